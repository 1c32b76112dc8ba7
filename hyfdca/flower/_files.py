"""What each party keeps on its own disk: its block (.npz or LIBSVM), its keys, the
server's public keys.

A party's LIBSVM file is an ordinary LIBSVM file (plain, .gz or .bz2) whose feature
indices are the global feature ids plus one (LIBSVM counts from 1), with two header
comments naming its global ids (0-based, as ranges)::

    # hyfdca sample_ids: 0-99,250-299
    # hyfdca feature_ids: 0-61
    +1 3:0.5 17:1.25
    ...

Its rows are the samples of ``sample_ids`` in that order; every index must be one of its
``feature_ids``.
"""

import io
import os
import pickle
import zipfile
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from crypto import deal_keys
from feddata import make_block
from feddata.datasets import load_libsvm, open_maybe_compressed

_ID_HEADER = "hyfdca "


def write_block(path, block):
    """Client block (X^k in local coordinates, I_k, J_k, labels) as a file: LIBSVM when
    the name ends in .libsvm or .txt, gzip-compressed when it then ends in .gz (with the
    id header of the module docstring), else .npz."""
    path = Path(path)
    if {".libsvm", ".txt"} & set(path.suffixes):
        return _write_libsvm_block(path, block)
    if path.suffix != ".npz":
        raise ValueError(f"{path}: a party file is .npz, or LIBSVM named .libsvm or .txt")
    X = block.X.tocsr()
    np.savez(path, data=X.data, indices=X.indices, indptr=X.indptr,
             shape=np.array(X.shape, dtype=np.int64), sample_ids=block.sample_ids,
             feature_ids=block.feature_ids, y=block.y)


def read_block(path):
    """The block :func:`write_block` wrote, .npz or LIBSVM (plain, .gz or .bz2; told apart
    by the file's first bytes);
    ValueError naming the file and the problem if it is not one."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"client data file {path} does not exist")
    with open(path, "rb") as handle:
        if handle.read(2) != b"PK":  # not a zip archive: a LIBSVM file
            return _read_libsvm_block(path)
    try:
        archive = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as err:
        raise ValueError(f"{path} is not a HyFDCA client block (an .npz of write_block): "
                         f"{err}") from err
    with archive as f:
        missing = {"data", "indices", "indptr", "shape", "sample_ids", "feature_ids",
                   "y"} - set(f.files)
        if missing:
            raise ValueError(f"{path} is not a HyFDCA client block: it lacks {sorted(missing)}")
        X = sp.csr_matrix((f["data"], f["indices"], f["indptr"]), shape=tuple(f["shape"]))
        y, sample_ids, feature_ids = f["y"], f["sample_ids"], f["feature_ids"]
    problems = [text for bad, text in (
        (X.shape != (sample_ids.size, feature_ids.size),
         f"a block of shape {X.shape} for {sample_ids.size} sample_ids and "
         f"{feature_ids.size} feature_ids"),
        (y.shape != (X.shape[0],), f"{y.size} labels for {X.shape[0]} rows"),
        *((ids.dtype.kind not in "iu" or np.any(ids < 0) or np.any(np.diff(ids) <= 0),
           f"{name} must be non-negative whole numbers, ascending and unique")
          for name, ids in (("sample_ids", sample_ids), ("feature_ids", feature_ids))),
    ) if bad]
    if problems:
        raise ValueError(f"{path} is not a consistent client block: " + "; ".join(problems))
    return make_block(X, y, sample_ids, feature_ids)


def _ranges(ids):
    """0,1,2,5,7,8 -> "0-2,5,7-8"."""
    ids = np.asarray(ids, dtype=np.int64)
    if ids.size == 0:
        return ""
    breaks = np.flatnonzero(np.diff(ids) != 1)
    starts = np.concatenate([[0], breaks + 1])
    ends = np.concatenate([breaks, [ids.size - 1]])
    return ",".join(str(ids[a]) if a == b else f"{ids[a]}-{ids[b]}" for a, b in
                    zip(starts, ends))


def _parse_ranges(text, path, name):
    ids = []
    try:
        for part in filter(None, text.replace(" ", "").split(",")):
            first, _, last = part.partition("-")
            first, last = int(first), int(last or first)
            if last < first:
                raise ValueError
            ids.extend(range(first, last + 1))
    except ValueError:
        raise ValueError(f"{path}: header '{name}: {text}' is not a list of ids and "
                         f"ranges such as 0-99,150") from None
    ids = np.asarray(ids, dtype=np.int64)
    if ids.size and (ids.min() < 0 or np.any(np.diff(ids) <= 0)):
        raise ValueError(f"{path}: {name} must be non-negative and ascending")
    return ids


def _write_libsvm_block(path, block):
    """Values as the shortest decimal that reads back to the same float (repr)."""
    import gzip

    X = block.X.tocsr()
    columns = block.feature_ids[X.indices] + 1
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt") as handle:
        handle.write(f"# {_ID_HEADER}sample_ids: {_ranges(block.sample_ids)}\n"
                     f"# {_ID_HEADER}feature_ids: {_ranges(block.feature_ids)}\n")
        for i, label in enumerate(block.y):
            row = slice(X.indptr[i], X.indptr[i + 1])
            pairs = " ".join(f"{j}:{float(v)!r}" for j, v in zip(columns[row], X.data[row]))
            handle.write(f"{float(label)!r} {pairs}\n")


def _read_libsvm_block(path):
    headers = {}
    with open_maybe_compressed(path) as handle:
        for raw in handle:
            line = raw.decode("utf-8", errors="replace").strip()
            if not line:
                continue
            if not line.startswith("#"):
                break
            key, sep, value = line.lstrip("# ").partition(":")
            if sep and key.startswith(_ID_HEADER):
                headers[key[len(_ID_HEADER):]] = value
    missing = {"sample_ids", "feature_ids"} - set(headers)
    if missing:
        raise ValueError(f"{path}: a party's LIBSVM file needs the header comments "
                         f"'# hyfdca sample_ids: ...' and '# hyfdca feature_ids: ...' (its "
                         f"global ids); missing {sorted(missing)}")
    sample_ids = _parse_ranges(headers["sample_ids"], path, "sample_ids")
    feature_ids = _parse_ranges(headers["feature_ids"], path, "feature_ids")
    if feature_ids.size == 0 or sample_ids.size == 0:
        raise ValueError(f"{path}: a party holds at least one sample and one feature; its "
                         f"header lists {sample_ids.size} samples, {feature_ids.size} features")
    data = load_libsvm(path, n_features=int(feature_ids.max(initial=-1)) + 1,
                       task="regression")
    X = data.X.tocsc()
    if X.shape[0] != sample_ids.size:
        raise ValueError(f"{path}: {X.shape[0]} rows but {sample_ids.size} sample_ids")
    outside = np.setdiff1d(np.flatnonzero(np.diff(X.indptr)), feature_ids)
    if outside.size:
        raise ValueError(f"{path}: feature index {int(outside[0]) + 1} (global id "
                         f"{int(outside[0])}) is not one of the file's feature_ids")
    return make_block(X[:, feature_ids].tocsr(), data.y, sample_ids, feature_ids)


def write_keys(folder, crypto="mask", **options):
    """Make the keys of a run and write ``clients.keys`` (every client's KeyHolder and
    secure-sum masker: secret, for the parties only) and ``server.keys`` (the public
    Evaluator: what the server loads). Returns the two paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    dealt = deal_keys(crypto, **options)
    clients, server = folder / "clients.keys", folder / "server.keys"
    secret = pickle.dumps((dealt.keys, dealt.masker))
    clients.unlink(missing_ok=True)   # a new file, so that it is 0600 from its first byte
    with os.fdopen(os.open(clients, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as out:
        out.write(secret)
    server.write_bytes(pickle.dumps(dealt.evaluator))
    return clients, server


def read_client_keys(path):
    """(KeyHolder, SecureSum) from a ``clients.keys`` file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"client key file {path} does not exist")
    keys, masker = pickle.loads(path.read_bytes())
    return keys, masker


# what a server.keys file may hold: each backend's public evaluator and its parts
# (unpickling anything else could run code on the server: a party hands it this file)
_PUBLIC_KEY_CLASSES = {
    ("crypto._interface", "OpCounts"), ("crypto._fixed_point", "FixedPoint"),
    ("crypto._plain", "PlainEvaluator"), ("crypto._mask", "MaskEvaluator"),
    ("crypto._paillier", "PaillierEvaluator"), ("phe.paillier", "PaillierPublicKey"),
    ("crypto._fast_paillier", "FastPaillierEvaluator"), ("gmpy2.gmpy2", "from_binary"),
    ("crypto._bfv", "BFVEvaluator")}


class _PublicKeyUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) not in _PUBLIC_KEY_CLASSES:
            raise pickle.UnpicklingError(f"{module}.{name}")
        return super().find_class(module, name)


def read_server_keys(path):
    """The public Evaluator from a ``server.keys`` file, unpickling only the classes a
    public evaluator is made of (so a crafted file runs no code, and the clients' file,
    which holds private keys, is refused before any of it is built)."""
    path = Path(path)
    try:
        evaluator = _PublicKeyUnpickler(io.BytesIO(path.read_bytes())).load()
    except pickle.UnpicklingError as err:
        raise ValueError(f"{path} is not a server key file (a public evaluator): it holds "
                         f"{err}, which none holds; is it the clients' key file?") from None
    if not hasattr(evaluator, "key_id"):
        raise ValueError(f"{path} is not a server key file (a public evaluator)")
    return evaluator

