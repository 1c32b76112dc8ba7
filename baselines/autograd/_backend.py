"""The array backend: NumPy by default, CuPy on request, chosen by one module-level switch."""

import numpy as np

_STATE = {"name": "numpy", "xp": np}


def set_backend(name):
    """Make ``name`` ("numpy" or "cupy") the array module of every tensor created from now on.

    CuPy is imported only here, and only when asked for. Tensors that already exist keep their
    arrays; do not mix tensors made under different backends in one expression.
    """
    if name == "numpy":
        _STATE.update(name="numpy", xp=np)
    elif name == "cupy":
        try:
            import cupy
        except ImportError as exc:
            raise ImportError(
                "set_backend('cupy'): CuPy is not installed or cannot load its CUDA libraries "
                "(install the 'gpu' extra, cupy-cuda12x, on a machine with an NVIDIA GPU)"
            ) from exc
        _STATE.update(name="cupy", xp=cupy)
    else:
        raise ValueError(f"unknown backend {name!r}; expected 'numpy' or 'cupy'")


def get_backend():
    """Name of the current backend, "numpy" or "cupy"."""
    return _STATE["name"]


def get_array_module():
    """The current array module (``numpy`` or ``cupy``), used as ``xp`` throughout."""
    return _STATE["xp"]


def add_at(target, index, values):
    """Unbuffered ``target[index] += values``: repeated indices accumulate (np.add.at)."""
    if _STATE["name"] == "cupy":
        import cupyx

        cupyx.scatter_add(target, index, values)
    else:
        np.add.at(target, index, values)


def to_numpy(array):
    """A NumPy copy (CuPy) or view (NumPy) of ``array``."""
    return array.get() if hasattr(array, "get") else np.asarray(array)
