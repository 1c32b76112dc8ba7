"""Run ``hyfdca._cupy_kernels`` without a GPU: its CUDA source compiled as C by gcc and
launched thread by thread on the CPU, behind the few CuPy calls the module makes.

What this checks: the kernels' arithmetic against the Numba kernels (bit for bit; gcc
with ``-ffp-contract=off`` as nvcc with ``--fmad=false``), the argument types each kernel
declares against the arrays it is given (a GPU would read an int64 array through an
``int*`` without complaint), and that the module copies to and from the device where it
should (device arrays here are copies, as on a GPU). What it cannot check: CuPy itself,
the CUDA compiler, and threads of one launch running at the same time (they run one
after another here).
"""

import ctypes
import re
import subprocess
import tempfile
from pathlib import Path

import numpy as np

_C_TYPES = {"double*": np.float64, "long long*": np.int64, "int*": np.int32,
            "double": np.float64, "long long": np.int64, "int": np.int32}
_CTYPES_SCALAR = {np.float64: ctypes.c_double, np.int64: ctypes.c_longlong,
                  np.int32: ctypes.c_int}


class DeviceArray(np.ndarray):
    """An array 'on the device': a copy of the host's, never the same memory."""


def asarray(x):
    if isinstance(x, DeviceArray):
        return x
    return np.array(x, copy=True).view(DeviceArray)


def asnumpy(x):
    return np.array(x, copy=True).view(np.ndarray)


def zeros(n, dtype=np.float64):
    return np.zeros(n, dtype=dtype).view(DeviceArray)


int32, int64, float64 = np.int32, np.int64, np.float64


class RawModule:
    """``cupy.RawModule(code=..., options=...)``: the source compiled as C."""

    def __init__(self, code, options=()):
        if "--fmad=false" not in options:
            raise AssertionError("the kernels must be compiled without fused multiply-adds")
        c_source = ("#include <math.h>\nstruct dim { int x; };\n"
                    "struct dim blockDim, blockIdx, threadIdx;\n"
                    + code.replace('extern "C" __global__', "").replace("__device__",
                                                                        "static"))
        self._dir = tempfile.TemporaryDirectory()
        src, lib = Path(self._dir.name, "kernels.c"), Path(self._dir.name, "kernels.so")
        src.write_text(c_source)
        subprocess.run(["gcc", "-O2", "-ffp-contract=off", "-shared", "-fPIC", "-o", str(lib),
                        str(src), "-lm"], check=True, capture_output=True, text=True)
        self._lib = ctypes.CDLL(str(lib))
        self._code = code

    def get_function(self, name):
        match = re.search(r"__global__ void %s\((.*?)\)\s*{" % name, self._code, re.S)
        params = [p.replace("const ", "").strip() for p in match.group(1).split(",")]
        types = [_C_TYPES[p.rsplit(" ", 1)[0]] for p in params]
        pointers = [p.rsplit(" ", 1)[0].endswith("*") for p in params]
        return _Kernel(self._lib, getattr(self._lib, name), name, params, types, pointers)


class _Kernel:
    def __init__(self, lib, function, name, params, types, pointers):
        self._lib, self._function, self._name = lib, function, name
        self._params, self._types, self._pointers = params, types, pointers

    def __call__(self, grid, block, args):
        if len(args) != len(self._params):
            raise TypeError(f"{self._name}: {len(args)} arguments for {len(self._params)}")
        c_args = []
        for value, param, dtype, pointer in zip(args, self._params, self._types,
                                                self._pointers):
            if pointer:
                if not isinstance(value, DeviceArray):
                    raise TypeError(f"{self._name}: {param} is not on the device")
                if value.dtype != dtype or not value.flags.c_contiguous:
                    raise TypeError(f"{self._name}: {param} given {value.dtype}")
                c_args.append(ctypes.c_void_p(value.ctypes.data))
            else:
                if type(value) is not dtype:
                    raise TypeError(f"{self._name}: {param} given {type(value).__name__}")
                c_args.append(_CTYPES_SCALAR[dtype](value))
        dims = {name: ctypes.c_int.in_dll(self._lib, name)
                for name in ("blockDim", "blockIdx", "threadIdx")}
        dims["blockDim"].value = block[0]
        for b in range(grid[0]):
            dims["blockIdx"].value = b
            for t in range(block[0]):
                dims["threadIdx"].value = t
                self._function(*c_args)


class _Runtime:
    @staticmethod
    def getDeviceCount():
        return 1


class cuda:  # noqa: N801 - the name CuPy uses
    runtime = _Runtime
