"""The SMS Spam Collection as TF-IDF word n-grams."""

from pathlib import Path

import numpy as np

from feddata.datasets._base import find_data_file, make_dataset

SMS_LABELS = ("ham", "spam")


def read_labelled_lines(path):
    """(labels, texts) from a ``label<TAB>text`` file; a header line ``Label<TAB>...``
    is skipped. Anything else malformed raises ValueError naming the file and line."""
    labels, texts = [], []
    try:
        with open(path, encoding="utf-8", errors="strict") as handle:
            for lineno, line in enumerate(handle, start=1):
                line = line.rstrip("\n").rstrip("\r")
                if not line.strip():
                    continue
                label, sep, text = line.partition("\t")
                if lineno == 1 and label.strip().lower() == "label":
                    continue
                if not sep or label not in SMS_LABELS:
                    raise ValueError(
                        f"{path}, line {lineno}: expected 'ham' or 'spam', a tab, then the "
                        f"text; got {line[:60]!r}"
                    )
                labels.append(label)
                texts.append(text)
    except UnicodeDecodeError as err:
        raise ValueError(f"{path} is not UTF-8 text (a byte at position {err.start} of a "
                         f"read block: {err.reason})") from None
    if not labels:
        raise ValueError(f"{path} holds no labelled messages")
    return labels, texts


def load_sms_spam(path=None, *, data_home=None, ngram_range=(1, 2), min_df=2,
                  normalize=False):
    """SMS spam (5,574 messages): TF-IDF of word n-grams, spam = +1, ham = -1.

    TfidfVectorizer already scales each row to unit L2 norm; ``min_df`` drops n-grams seen
    in fewer messages. X's vocabulary and inverse document frequencies are fitted on every
    message; the Dataset's ``refit(rows)`` fits them on those messages only and applies
    them to all (n-grams seen only outside ``rows`` are dropped), as ``federated_problem``
    does with its training part.
    """
    path = Path(path) if path is not None else find_data_file(("SMSSpamCollection",), data_home)
    labels, texts = read_labelled_lines(path)
    tfidf_fitted_on = _TfidfFittedOn(texts, tuple(ngram_range), min_df)
    return make_dataset(tfidf_fitted_on(np.arange(len(texts))), labels, name="sms-spam",
                        source=str(path), normalize=normalize, refit=tfidf_fitted_on)


class _TfidfFittedOn:
    """rows -> TF-IDF of every text, its vocabulary and IDF fitted on ``texts[rows]``."""

    def __init__(self, texts, ngram_range, min_df):
        self.texts, self.ngram_range, self.min_df = texts, ngram_range, min_df

    def __call__(self, rows):
        # imported on use, not with the module (docs/architecture.md)
        from sklearn.feature_extraction.text import TfidfVectorizer

        vectorizer = TfidfVectorizer(ngram_range=self.ngram_range, min_df=self.min_df,
                                     lowercase=True, dtype=np.float64)
        vectorizer.fit([self.texts[i] for i in rows])
        return vectorizer.transform(self.texts)
