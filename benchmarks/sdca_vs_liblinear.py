#!/usr/bin/env python
"""Centralized SDCA (our Numba kernel) against scikit-learn's LinearSVC (liblinear dual
coordinate descent), hinge loss, no intercept, one thread.

Both solve  P(w) = lam/2 ||w||^2 + (1/N) sum_i max(0, 1 - y_i x_i.w);  LinearSVC does so
with C = 1 / (lam N). For each data set and lam the script reports the seconds each solver
needs to reach a relative primal suboptimality (P(w) - P*) / P* <= 1e-4.

* P*: the smaller primal of a long SDCA run and a liblinear fit at tol=1e-10, checked
  against the best dual value of the SDCA run (a lower bound on P*). Not timed. (--quick
  runs a short SDCA reference on a9a, so its printed bound is loose there.)
* Ours: ``solvers.sdca(..., shrinking=True)``'s epoch loop, exactly as it runs
  (``ShrinkingHinge``: binary hinge kernel with liblinear's shrinking, active set shuffled
  inside Numba from the same seed). A search run evaluates the primal after every epoch
  and finds the first epoch that reaches the target (not timed). A timed run starts from
  scratch and runs that many epochs (the seed fixes every index, so the iterates repeat
  bit for bit; the target is re-checked after the clock stops). The clock covers the input
  check (``as_csr``), the target encoding, the row-norm pass, the solver's setup (with the
  column renumbering on news20-like), the kernel calls and writing w out at the end.
  "plain" is the same for the default path (``shrinking=False``: a fresh numpy
  permutation per epoch and the 1-D binary kernel, whose iterates equal ``sdca_pass``'s),
  shown for reference (full mode only); the ratio uses the shrinking path.
* liblinear: a fit cannot be resumed, so fits are run from scratch along a ladder of
  decreasing ``tol`` (3 ... 1e-8, steps of 1.5-3x, scanned from the loosest) and a ladder
  of ``max_iter`` (tol=1e-12, so that max_iter k means k outer passes; steps of ~10%,
  bisected); the first setting of each ladder that reaches the target is kept (not timed).
  Fit time includes scikit-learn's input checks and liblinear's copy of X, as a user pays
  them.
* Timing: 3 rounds, each timing one run of every contender from scratch (plain, ours, then
  each kept liblinear setting), so that a change of the machine's load hits both sides;
  the median per contender is reported, for liblinear the faster of its two settings.

Run from the repository root:

    python benchmarks/sdca_vs_liblinear.py            # full sizes (a few minutes)
    python benchmarks/sdca_vs_liblinear.py --quick    # small news20-like, < 60 s

The last output line is ``headline: a9a_ratio=<x> news20_ratio=<y>``: the worst ratio
(ours / liblinear) over lam for each data set, ``not-run`` for a data set that was
skipped (a9a without ``../shared/data`` or ``HYFDCA_DATA``), ``nan`` where a solver missed
the target.
"""

import os

for _var in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS", "OPENBLAS_NUM_THREADS",
             "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
from sklearn.exceptions import ConvergenceWarning  # noqa: E402
from sklearn.svm import LinearSVC  # noqa: E402

from feddata.datasets import load_a9a, make_news20_like  # noqa: E402
from solvers import (  # noqa: E402
    ShrinkingHinge,
    as_csr,
    encode_targets,
    epoch_order,
    loss_code,
    primal_objective,
    sdca,
    shrinking_seeds,
)
from solvers.kernels import hinge_pass_binary, objective_sums, row_sq_norms  # noqa: E402

TARGET = 1e-4
LAMS = (1e-4, 1e-5)
REPEATS = 3
SEED = 0
HINGE = loss_code("hinge")

TOL_LADDER = (3.0, 1.0, 0.5, 0.3, 0.2, 0.1, 5e-2, 3e-2, 2e-2, 1e-2, 5e-3, 3e-3, 2e-3, 1e-3,
              5e-4, 3e-4, 2e-4, 1e-4, 5e-5, 2e-5, 1e-5, 3e-6, 1e-6, 1e-7, 1e-8)
LADDER_MAX_ITER = 100_000
ITER_LADDER = tuple(sorted({max(1, round(1.1 ** k)) for k in range(0, 97)}))  # 1 .. ~9,500


def log(msg):
    print(msg, flush=True)


def primal(X, y, w, lam):
    """P(w); X is already canonical CSR (as_csr), so skip primal_objective's re-check."""
    W = np.ascontiguousarray(np.asarray(w, dtype=np.float64).reshape(-1, 1))
    Y = np.ascontiguousarray(y.reshape(-1, 1))
    sums = objective_sums(X.data, X.indices, X.indptr, Y, np.zeros_like(Y), W, HINGE, 1.0)
    return 0.5 * lam * float(W[:, 0] @ W[:, 0]) + float(sums[0, 0]) / X.shape[0]


def rel_subopt(p, p_star):
    return (p - p_star) / p_star


# --------------------------------------------------------------------------- P*

def reference_optimum(X, y, lam, *, sdca_epochs):
    """(P*, best dual lower bound, which solver gave P*). Not timed."""
    res = sdca(X, y, loss="hinge", lam=lam, tol=1e-10, max_epochs=sdca_epochs,
               order="permuted", random_state=SEED, eval_every=10)
    p_sdca = min(res.history["primal"])
    d_best = max(res.history["dual"])
    clf = liblinear(X.shape[0], lam, tol=1e-10, max_iter=100_000)
    clf.fit(X, y)
    p_lib = primal_objective(X, y, clf.coef_.ravel(), loss="hinge", lam=lam)
    assert abs(p_lib - primal(X, y, clf.coef_.ravel(), lam)) <= 1e-12 * p_lib
    if p_sdca <= p_lib:
        return p_sdca, d_best, "sdca"
    return p_lib, d_best, "liblinear"


# --------------------------------------------------------------------------- ours

def warm_up_jit(X, y):
    """Compile (or load from cache) the kernels for these dtypes."""
    k = min(5, X.shape[0])
    sub = X[:k]
    yk = np.ascontiguousarray(y[:k])
    sq = row_sq_norms(sub.data, sub.indptr)
    hinge_pass_binary(sub.data, sub.indices, sub.indptr, yk, np.zeros(k), np.zeros(X.shape[1]),
                      sq, np.arange(k, dtype=np.int64), 1.0, 1.0)
    ShrinkingHinge(sub, yk, np.zeros(k), np.zeros(X.shape[1]), sq, 1.0, 1.0,
                   shrinking_seeds(SEED, 1)[0]).run(1)


class Shrinking:
    """One run of ``sdca(shrinking=True)``'s epoch loop, one problem."""

    def __init__(self, X, y, lam):
        X = as_csr(X)
        Y, _ = encode_targets(y, "hinge")
        n, d = X.shape
        self.y = np.ascontiguousarray(Y[:, 0])
        self.alpha = np.zeros(n)
        self.w = np.zeros(d)
        sq_norms = row_sq_norms(X.data, X.indptr)
        self.solver = ShrinkingHinge(X, self.y, self.alpha, self.w, sq_norms, lam * n, 1.0,
                                     shrinking_seeds(SEED, 1)[0])

    def epoch(self):
        if self.solver.run(1)[1]:
            # converged within eps on all samples, target not reached (else we had stopped)
            self.solver.tighten()

    def finish(self):
        self.solver.sync()


class Plain:
    """One run of ``sdca(shrinking=False)``'s epoch loop for binary hinge."""

    def __init__(self, X, y, lam):
        self.X = X = as_csr(X)
        Y, _ = encode_targets(y, "hinge")
        n, d = X.shape
        self.y = np.ascontiguousarray(Y[:, 0])
        self.alpha = np.zeros(n)
        self.w = np.zeros(d)
        self.sq_norms = row_sq_norms(X.data, X.indptr)
        self.lam_n = lam * n
        self.rng = np.random.default_rng(SEED)

    def epoch(self):
        X = self.X
        hinge_pass_binary(X.data, X.indices, X.indptr, self.y, self.alpha, self.w,
                          self.sq_norms, epoch_order(self.rng, X.shape[0], "permuted"),
                          self.lam_n, 1.0)

    def finish(self):
        pass


def ours_run(kind, X, y, lam, p_star, max_epochs, n_epochs=None):
    """(seconds to target, epochs to target, seconds per epoch); nan if not reached.

    Without ``n_epochs``: evaluate the primal after every epoch (off the clock) and stop at
    the first epoch that reaches the target. With it: run exactly that many epochs (the
    seed fixes every index, so the iterates repeat bit for bit) and check the target once.
    """
    t0 = time.perf_counter()
    run = kind(X, y, lam)
    elapsed = time.perf_counter() - t0
    for epoch in range(1, (n_epochs or max_epochs) + 1):
        t0 = time.perf_counter()
        run.epoch()
        elapsed += time.perf_counter() - t0
        if n_epochs is None:
            run.finish()
            if rel_subopt(primal(X, y, run.w, lam), p_star) <= TARGET:
                return elapsed, epoch, elapsed / epoch
    if n_epochs is not None:
        t0 = time.perf_counter()
        run.finish()                       # w as the caller gets it, on the clock
        elapsed += time.perf_counter() - t0
        assert rel_subopt(primal(X, y, run.w, lam), p_star) <= TARGET, "not repeatable"
        return elapsed, n_epochs, elapsed / n_epochs
    return math.nan, max_epochs, elapsed / max_epochs


def ours_search(kind, X, y, lam, p_star, max_epochs):
    """Epochs to target of ``kind`` (None if not reached), primal checked every epoch."""
    warm_up_jit(X, y)
    secs, epochs, _ = ours_run(kind, X, y, lam, p_star, max_epochs)
    return None if math.isnan(secs) else epochs


# --------------------------------------------------------------------------- liblinear

def liblinear(n, lam, *, tol, max_iter):
    return LinearSVC(loss="hinge", dual=True, C=1.0 / (lam * n), fit_intercept=False,
                     tol=tol, max_iter=max_iter, random_state=SEED)


def lib_fit(X, y, lam, setting):
    """(seconds, primal, n_iter_) of one fit from scratch."""
    clf = liblinear(X.shape[0], lam, **setting)
    t0 = time.perf_counter()
    clf.fit(X, y)
    secs = time.perf_counter() - t0
    return secs, primal(X, y, clf.coef_.ravel(), lam), int(clf.n_iter_)


def reaches(X, y, lam, p_star, setting):
    """(reaches the target?, n_iter_, seconds) of one timed fit from scratch."""
    secs, p, n_iter = lib_fit(X, y, lam, setting)
    return rel_subopt(p, p_star) <= TARGET, n_iter, secs


def first_reaching_tol(X, y, lam, p_star):
    """Loosest tol of the ladder (scanned from the loosest) whose fit reaches the target:
    (setting, n_iter_, seconds of that fit), or Nones."""
    for tol in TOL_LADDER:
        setting = {"tol": tol, "max_iter": LADDER_MAX_ITER}
        ok, n_iter, secs = reaches(X, y, lam, p_star, setting)
        if ok:
            return setting, n_iter, secs
    return None, None, None


def first_reaching_iter(X, y, lam, p_star, upper):
    """Fewest outer iterations (ITER_LADDER up to ``upper``, then ``upper``) that reach the
    target, by bisection: liblinear's primal after k passes is taken to fall with k."""
    ks = [k for k in ITER_LADDER if k < upper] + [upper]
    found = reaches(X, y, lam, p_star, {"tol": 1e-12, "max_iter": ks[-1]})
    if not found[0]:
        return None, None, None
    lo, hi = 0, len(ks) - 1                      # ks[hi] reaches the target
    while lo < hi:
        mid = (lo + hi) // 2
        trial = reaches(X, y, lam, p_star, {"tol": 1e-12, "max_iter": ks[mid]})
        if trial[0]:
            hi, found = mid, trial
        else:
            lo = mid + 1
    return {"tol": 1e-12, "max_iter": ks[hi]}, found[1], found[2]


def describe(setting):
    if setting["tol"] >= 1e-11:
        return f"tol={setting['tol']:g}"
    return f"max_iter={setting['max_iter']}"


def lib_search(X, y, lam, p_star):
    """The settings (at most 2, one per ladder) whose fit reaches the target, with n_iter_."""
    lib_fit(X[:50], y[:50], lam, {"tol": 1e-1, "max_iter": 10})   # import/first-call costs
    by_tol = first_reaching_tol(X, y, lam, p_star)
    upper = by_tol[1] if by_tol[0] is not None else ITER_LADDER[-1]
    by_iter = first_reaching_iter(X, y, lam, p_star, upper)
    return [(setting, n_iter) for setting, n_iter, _ in (by_tol, by_iter)
            if setting is not None]


def timed_rounds(X, y, lam, p_star, epochs, settings):
    """Median seconds of each contender over REPEATS interleaved rounds.

    Each round runs, from scratch: every SDCA path for its epochs to target (the target is
    re-checked), then every liblinear setting. Interleaving keeps a change in the machine's
    load from favouring one side.
    """
    times = {key: [] for key in list(epochs) + list(range(len(settings)))}
    for _ in range(REPEATS):
        for kind, n_epochs in epochs.items():
            if n_epochs is not None:
                times[kind].append(ours_run(kind, X, y, lam, p_star, n_epochs, n_epochs)[0])
        for k, (setting, _) in enumerate(settings):
            secs, p, _ = lib_fit(X, y, lam, setting)
            assert rel_subopt(p, p_star) <= TARGET, "liblinear fit not repeatable"
            times[k].append(secs)
    return {key: float(np.median(v)) if v else math.nan for key, v in times.items()}


# --------------------------------------------------------------------------- driver

def load_sets(quick):
    sets = []
    try:
        a9a = load_a9a()
        sets.append(("a9a", as_csr(a9a.X), np.asarray(a9a.y, dtype=np.float64)))
    except FileNotFoundError as err:
        log(f"skipping a9a: data file not found ({err})")
    kwargs = {"n_samples": 5_000, "n_features": 300_000} if quick else {}
    news = make_news20_like(seed=0, **kwargs)
    sets.append(("news20-like", as_csr(news.X), np.asarray(news.y, dtype=np.float64)))
    return sets


def fmt_row(cells, widths):
    return "  ".join(str(c).rjust(w) for c, w in zip(cells, widths))


def main(argv=None):
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="small news20-like and shorter P* runs (whole run < 60 s)")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore", ConvergenceWarning)

    wall0 = time.perf_counter()
    ref_epochs = ({"a9a": 100, "news20-like": 300} if args.quick
                  else {"a9a": 3000, "news20-like": 1000})
    max_epochs = 2000 if args.quick else 5000
    rows = []
    ratios = {"a9a": [], "news20-like": []}
    for name, X, y in load_sets(args.quick):
        n, d = X.shape
        for lam in LAMS:
            p_star, d_best, src = reference_optimum(X, y, lam, sdca_epochs=ref_epochs[name])
            cert = (p_star - d_best) / p_star
            kinds = (Shrinking,) if args.quick else (Plain, Shrinking)
            epochs = {kind: ours_search(kind, X, y, lam, p_star, max_epochs)
                      for kind in kinds}
            settings = lib_search(X, y, lam, p_star)
            times = timed_rounds(X, y, lam, p_star, epochs, settings)
            p_secs, p_epochs = times.get(Plain, math.nan), epochs.get(Plain)
            o_secs, o_epochs = times[Shrinking], epochs[Shrinking]
            p_epoch_secs = p_secs / p_epochs if p_epochs else math.nan
            o_epoch_secs = o_secs / o_epochs if o_epochs else math.nan
            l_secs, l_setting, l_iter = math.nan, "not reached", None
            for k, (setting, n_iter) in enumerate(settings):
                if not times[k] >= l_secs:             # also replaces the initial nan
                    l_secs, l_setting, l_iter = times[k], describe(setting), n_iter
            ratio = o_secs / l_secs
            note = "" if cert <= 0.1 * TARGET else " (loose: short reference run)"
            log(f"{name} lam={lam:g}: P*={p_star:.10g} from {src}, "
                f"(P*-D)/P*<={cert:.1e}{note}; "
                f"ours {o_secs:.3f}s = {o_epochs} epochs x {1e3 * o_epoch_secs:.2f} ms"
                + ("" if p_epochs is None else
                   f" (plain {p_secs:.3f}s = {p_epochs} x {1e3 * p_epoch_secs:.2f} ms)")
                + "; "
                f"liblinear {l_secs:.3f}s at {l_setting} ({l_iter} outer iterations)")
            rows.append((name, f"{n:,} x {d:,}", f"{X.nnz:,}", f"{lam:g}", f"{p_star:.6f}",
                         "-" if p_epochs is None else f"{p_secs:.3f} ({p_epochs})",
                         f"{o_secs:.3f} ({o_epochs})",
                         f"{l_secs:.3f} ({l_setting})", f"{ratio:.2f}"))
            ratios[name].append(ratio)

    header = ("data set", "N x d", "nnz", "lam", "P*", "plain s (epochs)", "ours s (epochs)",
              "liblinear s (setting)", "ours/lib")
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    log("")
    log(f"time to (P - P*)/P* <= {TARGET:g}, single thread, median of {REPEATS}"
        f"{' (--quick)' if args.quick else ''}; wall {time.perf_counter() - wall0:.1f} s")
    log(fmt_row(header, widths))
    for row in rows:
        log(fmt_row(row, widths))
    # worst ratio over lam; nan if the data set was skipped or a solver missed the target
    worst = {k: "not-run" if not v else f"{max(v):.2f}" if not any(math.isnan(r) for r in v)
             else "nan" for k, v in ratios.items()}
    log(f"headline: a9a_ratio={worst['a9a']} news20_ratio={worst['news20-like']}")


if __name__ == "__main__":
    main()
