"""A comparison's finished runs kept on disk, so that a comparison stopped part-way (hours
at the paper's length: 90 tuning runs, then the long ones) resumes from its last finished
run, not from its start.

Each run of :func:`run_method` is one file, keyed by the comparison's fingerprint (its
setting, methods, options and code digest: ``_suite._fingerprint``) and the run's own
arguments (method, hyperparameters, rounds, evaluation period, per-value costs). A run
that raised ``OverflowError`` or ``FloatingPointError`` (a divergent tuning candidate) is
kept as that error and raises it again. A file whose key differs, or that cannot be read
back, is computed again: a resumed comparison gives the bits of an uninterrupted one.
"""

import hashlib
import json
import pickle
import shutil
from pathlib import Path

from hyfdca._checkpoint import pickled, write_atomic
from hyfdca.experiments._methods import run_method

DIVERGENCE_ERRORS = (OverflowError, FloatingPointError)


def _digest(text):
    return hashlib.sha256(text.encode()).hexdigest()


class SavedRuns:
    """:func:`run_method` with each finished run saved under ``folder`` and reused.
    Pass an instance as ``run`` to :func:`compare`; picklable, so a joblib or Dask worker
    can use it (on a worker of another machine the files are that machine's)."""

    def __init__(self, folder, fingerprint):
        self.folder = Path(folder)
        self.fingerprint = fingerprint
        self.prefix = _digest(fingerprint)[:16]

    def _path(self, key):
        return self.folder / f"{self.prefix}-{_digest(key)[:24]}.pkl"

    def __call__(self, method, problem, params, *, rounds, eval_every=1, costs=None):
        key = json.dumps(dict(comparison=self.fingerprint, method=method, params=params,
                              rounds=rounds, eval_every=eval_every, costs=costs),
                         sort_keys=True, default=repr)
        path = self._path(key)
        outcome = _load(path, key)
        if outcome is None:
            try:
                outcome = ("history", run_method(method, problem, params, rounds=rounds,
                                                 eval_every=eval_every, costs=costs))
            except DIVERGENCE_ERRORS as err:
                outcome = ("raised", err)
            self.folder.mkdir(parents=True, exist_ok=True)
            write_atomic(path, pickled(key) + pickled(outcome))
        kind, value = outcome
        if kind == "raised":
            raise value
        return value

    def count(self):
        """How many runs of this comparison are saved."""
        return len(list(self.folder.glob(f"{self.prefix}-*.pkl")))

    def remove(self):
        """Delete the folder (the comparison is saved whole); its parent too if empty."""
        shutil.rmtree(self.folder, ignore_errors=True)
        try:
            self.folder.parent.rmdir()
        except OSError:
            pass


def _load(path, key):
    """The saved (kind, value) at ``path`` if it was saved under ``key``, else None."""
    try:
        with open(path, "rb") as f:
            if pickle.load(f) != key:
                return None
            return pickle.load(f)
    except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ImportError,
            TypeError, ValueError):
        return None
