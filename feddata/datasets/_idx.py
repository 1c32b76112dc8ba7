"""IDX image files (MNIST, Fashion-MNIST), plain or gzip-compressed."""

import bz2
import gzip
import zlib
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from feddata.datasets._base import make_dataset

FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
_IDX_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4",
               0x0E: ">f8"}
_SUBSETS = {"train": ("train",), "test": ("t10k",), "all": ("train", "t10k")}


def open_maybe_compressed(path):
    """Open a file for binary reading, decompressing gzip or bzip2 by magic bytes."""
    with open(path, "rb") as handle:
        magic = handle.read(3)
    if magic[:2] == b"\x1f\x8b":
        return gzip.open(path, "rb")
    if magic == b"BZh":
        return bz2.open(path, "rb")
    return open(path, "rb")


@contextmanager
def corrupt_stream_named(name):
    """Inside the block, a truncated or corrupt gzip or bzip2 stream becomes a ValueError
    naming ``name``; the system's own errors (they carry an errno: permissions, missing
    files) pass unchanged."""
    try:
        yield
    except (EOFError, zlib.error, OSError) as err:
        if isinstance(err, OSError) and err.errno is not None:
            raise
        raise ValueError(f"cannot read {name}: the compressed data is truncated or corrupt "
                         f"({err})") from err


def read_idx(path):
    """An IDX file as a NumPy array; ValueError naming the file if it is malformed."""
    with corrupt_stream_named(path), open_maybe_compressed(path) as handle:
        raw = handle.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPES:
        raise ValueError(f"{path} is not an IDX file (bad magic number {raw[:4]!r})")
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"{path}: IDX header truncated")
    shape = tuple(int(v) for v in np.frombuffer(raw, ">u4", count=ndim, offset=4))
    dtype = np.dtype(_IDX_DTYPES[raw[2]])
    expected = int(np.prod(shape)) * dtype.itemsize
    if len(raw) - header != expected:
        raise ValueError(
            f"{path}: IDX header promises shape {shape} ({expected} bytes of data) but the "
            f"file holds {len(raw) - header} bytes"
        )
    return np.frombuffer(raw, dtype, offset=header).reshape(shape)


def _find(directory, stem):
    for suffix in ("", ".gz"):
        path = directory / f"{stem}{suffix}"
        if path.is_file():
            return path
    raise FileNotFoundError(f"{directory / stem}[.gz] not found")


def load_idx_images(directory, *, subset="all", name=None, normalize=False):
    """MNIST-layout IDX files in ``directory``: pixels scaled to [0, 1], sparse CSR.

    ``subset`` is "train" (60,000 for MNIST), "test" (10,000) or "all" (train then test).
    Labels are kept as the 10 digit classes for one-vs-rest.
    """
    directory = Path(directory)
    if subset not in _SUBSETS:
        raise ValueError(f"unknown subset {subset!r}; expected one of {sorted(_SUBSETS)}")
    images, labels = [], []
    for prefix in _SUBSETS[subset]:
        img_path = _find(directory, f"{prefix}-images-idx3-ubyte")
        lab_path = _find(directory, f"{prefix}-labels-idx1-ubyte")
        img, lab = read_idx(img_path), read_idx(lab_path)
        if img.ndim != 3 or lab.ndim != 1 or img.shape[0] != lab.shape[0]:
            raise ValueError(
                f"{img_path} holds images of shape {img.shape} but {lab_path} holds labels of "
                f"shape {lab.shape}"
            )
        if img.dtype != np.uint8:   # the scaling to [0, 1] divides by 255
            raise ValueError(f"{img_path} holds {img.dtype.name} pixels; MNIST-layout images "
                             f"are unsigned bytes (IDX type 0x08)")
        if lab.dtype.kind == "f" and not np.all(lab == np.round(lab)):
            raise ValueError(f"{lab_path} holds labels that are not whole numbers")
        if images and img.shape[1:] != images[0].shape[1:]:
            raise ValueError(f"{img_path} holds images of shape {img.shape[1:]}, the "
                             f"training images {images[0].shape[1:]}")
        images.append(img)
        labels.append(lab)
    img = np.concatenate(images)
    X = sp.csr_matrix(img.reshape(img.shape[0], -1).astype(np.float64) / 255.0)
    return make_dataset(X, np.concatenate(labels).astype(np.int64),
                        name=name or directory.name, source=str(directory),
                        normalize=normalize, image_shape=img.shape[1:])


def load_fashion_mnist(directory=FASHION_MNIST_DIR, *, subset="all", normalize=False):
    """Fashion-MNIST (70,000 x 784, 10 classes) from the Debian package's location."""
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(
            f"Fashion-MNIST not found in {directory}; install it with "
            f"`apt-get install -y dataset-fashion-mnist` or pass its folder"
        )
    return load_idx_images(directory, subset=subset, name="fashion-mnist", normalize=normalize)
