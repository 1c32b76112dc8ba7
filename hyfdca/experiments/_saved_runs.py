"""A comparison's finished runs kept on disk, so that a comparison stopped part-way (hours
at the paper's length: a hundred tuning runs or more, then the long ones) resumes from its
last finished run, not from its start.

Each run of :func:`run_method` is one file, keyed by the comparison's fingerprint (its
setting, methods, options, code and data digests: ``_suite._fingerprint``) and the run's own
arguments (method, hyperparameters, rounds, evaluation period, per-value costs, the set
its accuracy is taken on: a long run on a held-out test set is not a search's run). A run
that raised one of ``DIVERGENCE_ERRORS`` (a divergent tuning candidate) is kept as that
error and raises it again. A file whose key differs, or that cannot be read back, is
computed again; files of this setting saved under another fingerprint (another code or
options) are deleted at the first save. Under the deterministic time model a resumed
comparison gives the bits of an uninterrupted one (with the clock, its times come from
both sessions). A run that cannot be saved (a full disk, a folder a worker cannot
write) is returned all the same, with a warning.
"""

import hashlib
import json
import pickle
import shutil
import warnings
from pathlib import Path

from hyfdca._checkpoint import pickled, write_atomic
from hyfdca.experiments._methods import DIVERGENCE_ERRORS, run_method


def _digest(text):
    return hashlib.sha256(text.encode()).hexdigest()


class SavedRuns:
    """:func:`run_method` with each finished run saved under ``folder`` and reused.
    Pass an instance as ``run`` to :func:`compare`; picklable, so a joblib or Dask worker
    can use it (a worker on another machine sees the folder only if it is shared)."""

    def __init__(self, folder, fingerprint):
        self.folder = Path(folder)
        self.fingerprint = fingerprint
        self.prefix = _digest(fingerprint)[:16]
        self._cleared = False

    def _path(self, key):
        return self.folder / f"{self.prefix}-{_digest(key)[:24]}.pkl"

    def __call__(self, method, problem, params, *, rounds, eval_every=1, costs=None):
        key = json.dumps(dict(comparison=self.fingerprint, method=method, params=params,
                              rounds=rounds, eval_every=eval_every, costs=costs,
                              accuracy_on=problem.accuracy_on),
                         sort_keys=True, default=repr)
        path = self._path(key)
        outcome = _load(path, key)
        if outcome is None:
            try:
                outcome = ("history", run_method(method, problem, params, rounds=rounds,
                                                 eval_every=eval_every, costs=costs))
            except DIVERGENCE_ERRORS as err:
                outcome = ("raised", err)
            self._save(path, pickled(key) + pickled(outcome))
        kind, value = outcome
        if kind == "raised":
            raise value
        return value

    def _save(self, path, data):
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            if not self._cleared:
                for stale in self.folder.glob("*.pkl"):
                    if not stale.name.startswith(self.prefix):
                        stale.unlink(missing_ok=True)
                self._cleared = True
            write_atomic(path, data)
        except OSError as err:
            warnings.warn(f"a finished run could not be saved in {self.folder} ({err}); "
                          f"the comparison goes on, but a stop now would lose it",
                          stacklevel=3)

    def count(self):
        """How many runs of this comparison are saved."""
        return len(list(self.folder.glob(f"{self.prefix}-*.pkl")))

    def remove(self):
        """Delete the folder (the comparison is saved whole)."""
        shutil.rmtree(self.folder, ignore_errors=True)


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
