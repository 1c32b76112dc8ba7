"""Checkpoints: a run's state on disk, written atomically, resumed bit for bit.

A checkpoint folder DIR holds

  DIR/LATEST                      the name of the newest complete checkpoint
  DIR/round-000120/run.json       round, engine, settings, seed, frac_bits, crypto,
                                  eval_every, the data's fingerprint, the History, and
                                  the SHA-256 of every other file of the folder
  DIR/round-000120/model.npy      the certified point w_c (run.model)
  protocol engine:
  DIR/round-000120/server.pkl     the server's state: ciphertexts, w, the public evaluator,
                                  the participation draws, the transport's state (a
                                  simulated lossy network's draws); never a private or
                                  PRF key
  DIR/round-000120/client-3.pkl   client 3's state and its keys (a party keeps its own)
  batched engine (a plaintext simulation of all parties):
  DIR/round-000120/engine.npz     the engine's arrays

Every file is written to a temporary name, flushed, fsynced and renamed; the folder is
written under a temporary name and renamed once complete; then LATEST is replaced the same
way. A kill at any moment leaves LATEST naming a complete checkpoint (or no LATEST at
all); what such a kill leaves half-written (a .round-N.partial folder, a .LATEST.*.tmp
file) is removed by the next save. The newest KEEP checkpoints, by round number, are
kept. One run owns DIR: two runs writing one folder are not supported. A file changed
after the save (a flipped bit, a client file from another round or another client) fails
its SHA-256 and is named; nothing is resumed from it.

The .pkl files are pickles: load only checkpoints you wrote (unpickling runs code).
"""

import hashlib
import io
import json
import os
import pickle
import shutil
import tempfile
import zipfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np

# 2: the server keeps each client's v_k and Enc(q) (rejoins); 3: the certified point;
# 4: the line search's stall record; 5: block draws (settings.draw_block, the batched
# engine's draw units); 6: the protocol's clients away (a failed rejoin); 7: eval_every,
# the files' SHA-256, the transport's state, clients back from a restart saved as away
FORMAT = 7
KEEP = 2
LATEST = "LATEST"


class CheckpointError(ValueError):
    """A checkpoint that is missing, incomplete, or made for another run or data set."""


def write_atomic(path, data):
    """Write ``data`` (bytes) to ``path``: a temporary file of its own (two writers of
    one path never share one), fsync, rename."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _fsync_folder(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def dataset_fingerprint(dataset):
    """SHA-256 over every block's ids, non-zeros and labels: resuming on other data (or
    another partition of it) is refused."""
    digest = hashlib.sha256()
    for block in dataset.blocks:
        for array in (block.sample_ids, block.feature_ids, block.X.data, block.X.indices,
                      block.X.indptr, block.y):
            digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def pickled(obj):
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


# what reading a truncated or overwritten file raises (json, numpy, pickle, zip)
DAMAGE = (ValueError, EOFError, OSError, pickle.UnpicklingError, zipfile.BadZipFile)


@contextmanager
def reading(path):
    """Read checkpoint file ``path`` in the block: a missing or damaged file is a
    CheckpointError that names it (the block's own CheckpointErrors pass unchanged)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint file {path} is missing")
    try:
        yield path
    except CheckpointError:
        raise
    except DAMAGE as error:
        raise CheckpointError(f"checkpoint file {path} is damaged ({type(error).__name__}: "
                              f"{error})") from error


def unpickled(path):
    with reading(path), open(path, "rb") as handle:
        return pickle.load(handle)


def save_checkpoint(directory, description, model, files):
    """Write one checkpoint: ``description`` (JSON-able dict with "round"), the model w
    and the engine's ``files`` (name -> bytes); then point LATEST at it."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    name = f"round-{int(description['round']):06d}"
    partial = directory / f".{name}.partial"
    if partial.exists():
        shutil.rmtree(partial)
    partial.mkdir()
    files = {"model.npy": array_bytes(model), **files}
    for file_name, data in files.items():
        write_atomic(partial / file_name, data)
    digests = {file_name: _sha256(data) for file_name, data in files.items()}
    write_atomic(partial / "run.json", json.dumps(dict(description, format=FORMAT,
                                                       files=digests), indent=1).encode())
    _fsync_folder(partial)
    final = directory / name
    if final.exists():
        shutil.rmtree(final)
    os.replace(partial, final)
    _fsync_folder(directory)
    write_atomic(directory / LATEST, name.encode())
    _fsync_folder(directory)
    for old in _saved_rounds(directory)[:-KEEP]:
        if old.name != name:
            shutil.rmtree(old)
    _remove_leftovers(directory)


def _sha256(data):
    return hashlib.sha256(data).hexdigest()


# what run.json must hold besides the run's identity
_DESCRIBED = ("round", "history", "files")


def _check_files(folder, digests):
    """CheckpointError naming a file of the folder that is missing or differs from the
    bytes the save wrote."""
    for file_name, digest in sorted(digests.items()):
        with reading(folder / file_name) as path:
            if _sha256(path.read_bytes()) != digest:
                raise CheckpointError(
                    f"checkpoint file {path} is damaged: its SHA-256 differs from the one "
                    f"{folder / 'run.json'} recorded (changed after the save, or a file "
                    f"of another checkpoint or client)")


def _saved_rounds(directory):
    """The checkpoint folders round-N of ``directory``, oldest round first (by number, not
    by name; other names are left alone)."""
    numbered = {}
    for folder in directory.glob("round-*"):
        digits = folder.name[len("round-"):]
        if digits.isdigit() and folder.is_dir():
            numbered[int(digits)] = folder
    return [numbered[t] for t in sorted(numbered)]


def _remove_leftovers(directory):
    """Remove what an interrupted save left: .round-N.partial folders and LATEST's
    temporary files (this save's own are renamed by now)."""
    for partial in directory.glob(".round-*.partial"):
        shutil.rmtree(partial, ignore_errors=True)
    for temporary in directory.glob(f".{LATEST}.*.tmp"):
        temporary.unlink(missing_ok=True)


def latest_checkpoint(directory):
    """The folder LATEST names, or None when ``directory`` holds no checkpoint."""
    pointer = Path(directory) / LATEST
    if not pointer.is_file():
        return None
    folder = Path(directory) / pointer.read_text().strip()
    if not (folder / "run.json").is_file():
        raise CheckpointError(f"{pointer} names {folder.name}, which is not a complete "
                              f"checkpoint")
    return folder


def load_checkpoint(directory):
    """(description, model, folder) of the newest checkpoint in ``directory``."""
    folder = latest_checkpoint(directory)
    if folder is None:
        raise CheckpointError(f"no checkpoint in {directory} (no {LATEST} file): nothing "
                              f"to resume")
    with reading(folder / "run.json") as path:
        description = json.loads(path.read_text())
    if not isinstance(description, dict) or description.get("format") != FORMAT:
        found = description.get("format") if isinstance(description, dict) else None
        raise CheckpointError(f"{folder}: checkpoint format {found!r}, this version reads "
                              f"{FORMAT}")
    lacking = [key for key in _DESCRIBED if key not in description]
    if lacking or not isinstance(description["files"], dict):
        raise CheckpointError(f"checkpoint file {folder / 'run.json'} is damaged: it lacks "
                              f"{lacking or ['the files digests']}")
    _check_files(folder, description["files"])
    with reading(folder / "model.npy") as path:
        model = np.load(path, allow_pickle=False)
    return description, model, folder


def check_same_run(description, expected):
    """CheckpointError naming every field of ``expected`` the checkpoint disagrees on
    (inside a dict such as the settings, every entry that differs)."""
    wrong = []
    for key, value in expected.items():
        saved = description.get(key)
        if saved == value:
            continue
        if isinstance(saved, dict) and isinstance(value, dict):
            wrong += [f"{key}.{name}: checkpoint {saved.get(name)!r}, this run "
                      f"{value.get(name)!r}" for name in sorted(set(saved) | set(value))
                      if saved.get(name) != value.get(name)]
        else:
            wrong.append(f"{key}: checkpoint {saved!r}, this run {value!r}")
    if wrong:
        raise CheckpointError("the checkpoint was made by another run; it differs in "
                              + "; ".join(wrong))


def array_bytes(array):
    """An array as the bytes of an .npy file (no pickle)."""
    buffer = io.BytesIO()
    np.save(buffer, np.asarray(array), allow_pickle=False)
    return buffer.getvalue()


def bytes_array(data):
    """The array :func:`array_bytes` wrote."""
    return np.load(io.BytesIO(data), allow_pickle=False)
