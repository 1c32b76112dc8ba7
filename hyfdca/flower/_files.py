"""What each party keeps on its own disk: its block (.npz), its keys, the server's
public keys."""

import pickle
import zipfile
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from crypto import deal_keys
from feddata import make_block


def write_block(path, block):
    """Client block (X^k in local coordinates, I_k, J_k, labels) as an .npz file."""
    X = block.X.tocsr()
    np.savez(path, data=X.data, indices=X.indices, indptr=X.indptr,
             shape=np.array(X.shape, dtype=np.int64), sample_ids=block.sample_ids,
             feature_ids=block.feature_ids, y=block.y)


def read_block(path):
    """The block :func:`write_block` wrote (ValueError naming the file if it is not one)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"client data file {path} does not exist")
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
        return make_block(X, f["y"], f["sample_ids"], f["feature_ids"])


def write_keys(folder, crypto="mask", **options):
    """Make the keys of a run and write ``clients.keys`` (every client's KeyHolder and
    secure-sum masker: secret, for the parties only) and ``server.keys`` (the public
    Evaluator: what the server loads). Returns the two paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    dealt = deal_keys(crypto, **options)
    clients, server = folder / "clients.keys", folder / "server.keys"
    clients.write_bytes(pickle.dumps((dealt.keys, dealt.masker)))
    server.write_bytes(pickle.dumps(dealt.evaluator))
    clients.chmod(0o600)
    return clients, server


def read_client_keys(path):
    """(KeyHolder, SecureSum) from a ``clients.keys`` file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"client key file {path} does not exist")
    keys, masker = pickle.loads(path.read_bytes())
    return keys, masker


def read_server_keys(path):
    """The public Evaluator from a ``server.keys`` file (refusing a file that holds a
    private key: the server never loads one)."""
    evaluator = pickle.loads(Path(path).read_bytes())
    if isinstance(evaluator, tuple) or not hasattr(evaluator, "key_id"):
        raise ValueError(f"{path} is not a server key file (a public evaluator); is it the "
                         f"clients' key file?")
    return evaluator

