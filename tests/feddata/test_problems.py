"""federated_problem: the training/validation split, and features fitted on the training
part only (no held-out message shapes the TF-IDF a model trains on)."""

import numpy as np
import pytest
import scipy.sparse as sp

from feddata import datasets as D
from feddata.problems import federated_problem

WORDS = ("win free prize now call claim cash text reply stop see you there friend "
         "lunch later home soon ok thanks").split()


def _messages(seed=0, n=48):
    rng = np.random.default_rng(seed)
    labels = ["spam" if i % 4 == 0 else "ham" for i in range(n)]
    texts = [" ".join(rng.choice(WORDS, size=6)) for _ in range(n)]
    return labels, texts


def _write(folder, labels, texts):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "SMSSpamCollection").write_text(
        "".join(f"{label}\t{text}\n" for label, text in zip(labels, texts)))


def _split(labels, seed=0, validation_size=0.25):
    from sklearn.model_selection import train_test_split
    y = np.where(np.array(labels) == "spam", 1.0, -1.0)
    return train_test_split(np.arange(len(labels)), test_size=validation_size,
                            random_state=seed, stratify=y)


def _training_blocks(fed):
    return [(b.sample_ids, b.feature_ids, b.X.toarray()) for b in fed.blocks]


def test_a_held_out_message_shapes_no_training_feature(tmp_path, monkeypatch):
    labels, texts = _messages()
    _, held_out = _split(labels)
    changed = list(texts)
    # every word in one held-out message: with TF-IDF fitted on all messages this moves
    # the IDF of every word it did not hold already, and so the training rows
    changed[held_out[0]] = " ".join(WORDS)
    results = []
    for name, version in (("a", texts), ("b", changed)):
        _write(tmp_path / name, labels, version)
        monkeypatch.setenv("HYFDCA_DATA", str(tmp_path / name))
        results.append(federated_problem("sms-spam", "2x2"))
    (fed_a, (X_a, _), _), (fed_b, (X_b, _), _) = results
    for (rows_a, cols_a, X_block_a), (rows_b, cols_b, X_block_b) in zip(
            _training_blocks(fed_a), _training_blocks(fed_b)):
        np.testing.assert_array_equal(rows_a, rows_b)
        np.testing.assert_array_equal(cols_a, cols_b)
        np.testing.assert_array_equal(X_block_a, X_block_b)
    assert (X_a != X_b).nnz > 0   # the changed message is in the validation set


def test_the_text_features_are_fitted_on_the_training_messages(tmp_path, monkeypatch):
    from sklearn.feature_extraction.text import TfidfVectorizer

    labels, texts = _messages(seed=1)
    train, held_out = _split(labels)
    texts[held_out[0]] += " unseenword unseenword"   # only in held-out messages
    texts[held_out[1]] += " unseenword"
    _write(tmp_path, labels, texts)
    monkeypatch.setenv("HYFDCA_DATA", str(tmp_path))
    fed, (X_val, _), _ = federated_problem("sms-spam", "1x1")
    reference = TfidfVectorizer(ngram_range=(1, 2), min_df=2, dtype=np.float64)
    reference.fit([texts[i] for i in train])
    assert "unseenword" not in reference.vocabulary_
    np.testing.assert_allclose(X_val.toarray(),
                               reference.transform([texts[i] for i in held_out]).toarray(),
                               rtol=0, atol=1e-15)
    assert fed.n_features == len(reference.vocabulary_)
    # the whole-data set keeps its vocabulary from every message
    assert D.load_sms_spam(tmp_path / "SMSSpamCollection").X.shape[1] > fed.n_features


def test_data_without_fitted_features_split_as_before():
    from sklearn.model_selection import train_test_split

    ds = D.load_digits()
    assert ds.refit is None
    y = np.where(ds.y == ds.classes[0], 1.0, -1.0)
    fed, (X_val, y_val), _ = federated_problem("digits", "1x1", seed=3)
    X_tr, X_ref, y_tr, y_ref = train_test_split(ds.X, y, test_size=0.25, random_state=3,
                                                stratify=y)
    np.testing.assert_array_equal(X_val, X_ref)
    np.testing.assert_array_equal(y_val, y_ref)
    np.testing.assert_array_equal(fed.labels, y_tr)


def test_the_standardisation_is_fitted_on_the_training_samples():
    import sklearn.datasets as skd
    from sklearn.model_selection import train_test_split

    raw = skd.load_breast_cancer().data
    ds = D.load_breast_cancer()
    train, held_out = train_test_split(np.arange(ds.n_samples), test_size=0.25,
                                       random_state=2, stratify=ds.y)
    fed, (X_val, _), _ = federated_problem("breast_cancer", "1x1", seed=2)
    mean, std = raw[train].mean(axis=0), raw[train].std(axis=0)
    np.testing.assert_allclose(X_val, (raw[held_out] - mean) / std, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(fed.blocks[0].X.toarray().mean(axis=0), 0, atol=1e-12)
    assert not np.allclose(X_val, ds.X[held_out])   # not every sample's statistics


def test_a_dataset_with_a_refit_pickles():
    import pickle

    ds = D.load_breast_cancer()
    again = pickle.loads(pickle.dumps(ds))
    rows = np.arange(0, ds.n_samples, 2)
    np.testing.assert_array_equal(again.refit(rows), ds.refit(rows))


def test_refit_checks_its_rows_and_what_it_returns():
    X = sp.csr_matrix(np.eye(4))
    ds = D.make_dataset(X, [0, 1, 0, 1], name="toy", source="test",
                        refit=lambda rows: X[:3])
    for rows, message in ((np.array([], dtype=int), "non-empty 1-D array of row indices"),
                          (np.array([0.5]), "non-empty 1-D array of row indices"),
                          (np.array([0, 4]), r"must lie in \[0, 4\), got 0 to 4")):
        with pytest.raises(ValueError, match=message):
            ds.refit(rows)
    with pytest.raises(ValueError, match="toy: refit returned 3 rows for 4 samples"):
        ds.refit(np.array([0, 1]))
    nan = D.make_dataset(np.eye(2), [0, 1], name="toy", source="test",
                         refit=lambda rows: np.full((2, 2), np.nan))
    with pytest.raises(ValueError, match="toy: refitted X"):
        nan.refit(np.array([0]))
    scaled = D.make_dataset(np.eye(2), [0, 1], name="toy", source="test", normalize=True,
                            refit=lambda rows: 3 * np.eye(2))
    np.testing.assert_allclose(scaled.refit(np.array([0])), np.eye(2))
