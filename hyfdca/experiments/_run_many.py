"""Many runs of one comparison at once: joblib processes on this machine, each run with
its BLAS on one thread (as ``_suite.compare_on_one_blas_thread``, so the bits do not
depend on where a run ran). A run is deterministic, so the outcomes are those of running
the calls one after the other, in the calls' order."""

from joblib import Parallel, delayed
from threadpoolctl import threadpool_limits

from hyfdca.experiments._methods import DIVERGENCE_ERRORS


def _outcome(run, method, problem, params, options):
    """The run's History, or the divergence error it raised."""
    with threadpool_limits(limits=1, user_api="blas"):
        try:
            return run(method, problem, params, **options)
        except DIVERGENCE_ERRORS as err:
            return err


def run_many(run, problem, calls, n_jobs=1):
    """[History or divergence error] of ``run(method, problem, params, **options)`` for
    each (method, params, options) of ``calls``, ``n_jobs`` at once (1: in this
    process, one after the other)."""
    if n_jobs == 1 or len(calls) <= 1:
        return [_outcome(run, m, problem, p, o) for m, p, o in calls]
    return Parallel(n_jobs=n_jobs)(delayed(_outcome)(run, m, problem, p, o)
                                   for m, p, o in calls)
