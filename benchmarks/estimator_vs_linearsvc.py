#!/usr/bin/env python
"""HyFDCAClassifier at its defaults against scikit-learn's LinearSVC on a9a.

Both fit  P(w) = lam/2 ||w||^2 + (1/N) sum_i max(0, 1 - y_i (x_i.w + b))  with an
intercept (regularised, value ``intercept_scaling = 1``, as liblinear does); LinearSVC with
``C = 1 / (lam N)``, ``loss="hinge"``, its default ``tol`` and ``max_iter`` raised to
100,000 (at lam 1e-5 it still stops there). The estimator runs at its defaults: a 3x3
hybrid split of the training set, full participation, plaintext (the batched engine),
relative duality gap 1e-3. ``--loss logistic``: the logistic loss, against
LogisticRegression with liblinear's solver (which regularises the intercept as well), the
estimator on the message engine (the batched one has no logistic line search).

Data: a9a (the shared copy: 48,842 rows) split by a seeded permutation
into 2/3 training and 1/3 test rows. Per contender and lam: fit seconds (median of
``--repeats`` fits from scratch, input checks included), rounds or iterations, whether a
ConvergenceWarning was raised, test accuracy, and the primal objective on the training
set relative to the better of the two ((P - P_best) / P_best).

    python benchmarks/estimator_vs_linearsvc.py            # lam 1e-4 and 1e-5
    python benchmarks/estimator_vs_linearsvc.py --quick    # 10,000 rows, lam 1e-4
    python benchmarks/estimator_vs_linearsvc.py --loss logistic

Needs a9a (``../shared/data`` or ``HYFDCA_DATA``); without it the script says so and
the headline's figures read ``not-run``. Last line: ``headline: fit_time_ratio=<hyfdca /
linearsvc at lam 1e-4> accuracy_gap=<linearsvc - hyfdca test accuracy> converged=<yes or
no>``.
"""

import os

for _var in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS", "OPENBLAS_NUM_THREADS",
             "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "2")

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
from sklearn.exceptions import ConvergenceWarning  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.svm import LinearSVC  # noqa: E402

from feddata.datasets import load_dataset, locate_dataset  # noqa: E402
from hyfdca import HyFDCAClassifier  # noqa: E402
from solvers import primal_objective  # noqa: E402
from hyfdca.cli import whole_number  # noqa: E402

SEED = 0


positive_int = whole_number(1)   # argparse type: a whole number >= 1


def split(X, y, n_rows):
    order = np.random.default_rng(SEED).permutation(X.shape[0])[:n_rows]
    cut = (2 * order.size) // 3
    return X[order[:cut]], y[order[:cut]], X[order[cut:]], y[order[cut:]]


def fit_timed(make, X, y, repeats):
    """(median fit seconds, the last fitted model, ConvergenceWarning raised)."""
    times, warned = [], False
    for _ in range(repeats):
        model = make()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ConvergenceWarning)
            start = time.perf_counter()
            model.fit(X, y)
            times.append(time.perf_counter() - start)
        warned |= any(issubclass(w.category, ConvergenceWarning) for w in caught)
    return float(np.median(times)), model, warned


def objective(model, X, y, lam, loss):
    """P(w, b) on the training set, the intercept regularised as liblinear does."""
    w = np.append(model.coef_.ravel(), model.intercept_[0])
    Xb = np.hstack([X.toarray(), np.ones((X.shape[0], 1))])
    return float(primal_objective(Xb, y, w, loss=loss, lam=lam))


def contenders(loss, lam, n):
    """{name: a fresh model} of the two contenders for ``loss``."""
    if loss == "logistic":
        return {"HyFDCAClassifier (3x3, logistic)": lambda: HyFDCAClassifier(
                    lam=lam, loss="logistic"),
                "LogisticRegression (liblinear)": lambda: LogisticRegression(
                    solver="liblinear", C=1.0 / (lam * n), max_iter=100_000,
                    random_state=SEED)}
    return {"HyFDCAClassifier (3x3, defaults)": lambda: HyFDCAClassifier(lam=lam),
            "LinearSVC (liblinear dual CD)": lambda: LinearSVC(
                loss="hinge", C=1.0 / (lam * n), max_iter=100_000, random_state=SEED)}


def main(argv=None):
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10,000 rows, lam 1e-4")
    parser.add_argument("--loss", choices=("hinge", "logistic"), default="hinge")
    parser.add_argument("--repeats", type=positive_int, default=3,
                        help="timed fits per contender (the median is shown)")
    args = parser.parse_args(argv)
    if locate_dataset("a9a") is None:
        print("a9a is not on this machine (../shared/data or HYFDCA_DATA): nothing to run")
        print("headline: fit_time_ratio=not-run accuracy_gap=not-run converged=not-run")
        return
    ds = load_dataset("a9a")
    X, y = ds.X.tocsr(), np.asarray(ds.y, dtype=np.float64)
    X_train, y_train, X_test, y_test = split(X, y, 10_000 if args.quick else X.shape[0])
    lams = (1e-4,) if args.quick else (1e-4, 1e-5)
    print(f"a9a: {X_train.shape[0]} training rows, {X_test.shape[0]} test rows, "
          f"{X.shape[1]} features; {args.repeats} timed fits per contender")
    print(f"{'lam':>7} {'contender':<34} {'fit s':>8} {'iters':>7} {'warned':>6} "
          f"{'test acc':>8} {'rel. P':>9}")
    headline = None
    for lam in lams:
        results = {}
        for name, make in contenders(args.loss, lam, X_train.shape[0]).items():
            seconds, model, warned = fit_timed(make, X_train, y_train, args.repeats)
            iters = int(np.max(model.n_iter_))
            results[name] = (seconds, iters, warned, model.score(X_test, y_test),
                             objective(model, X_train, y_train, lam, args.loss))
        best = min(r[4] for r in results.values())
        for name, (seconds, iters, warned, acc, p) in results.items():
            print(f"{lam:>7g} {name:<34} {seconds:>8.2f} {iters:>7d} "
                  f"{'yes' if warned else 'no':>6} {acc:>8.4f} {(p - best) / best:>9.2e}")
        if headline is None:
            (ht, _, hw, hacc, _), (lt, _, _, lacc, _) = results.values()
            headline = (f"headline: fit_time_ratio={ht / lt:.3g} accuracy_gap={lacc - hacc:.4f} "
                        f"converged={'no' if hw else 'yes'}")
    print(headline)


if __name__ == "__main__":
    main()
