"""CuPy (GPU) versions of the batched engine's hot kernels (``backend="cupy"``).

The partial inner products and the LocalDualMethod run as CUDA kernels on the
concatenated CSR (one thread per requested holding, per available client); the rest of a
round stays in the Numba kernels on the host: draws, integer aggregation, line search,
and the changes of the primal contributions v_k, which are O(nnz of the changed rows)
and must reach w client after client (the server's order of additions). The CUDA code repeats the
Numba kernels' floating-point operations in the same order and is compiled with
``--fmad=false`` (no fused multiply-adds), so the iterates are meant to be the same bits;
the logistic loss (whose Newton steps call ``log``, whose GPU rounding differs) is refused.

CuPy is imported only here, when ``backend="cupy"`` is asked for.

Status: written without access to a GPU; its tests (tests/hyfdca/test_batched.py) skip
where CuPy or a GPU is missing and have not yet run on one. Without a GPU the tests
compile this CUDA source as C and launch it thread by thread on the CPU behind a
stand-in for the CuPy calls made here (tests/hyfdca/_cuda_on_cpu.py): the same bits as
the Numba kernels for every loss but the logistic, the declared argument types, the
copies to and from the device. CuPy itself and truly concurrent threads are untested.
"""

import numpy as np

try:  # imported only when the cupy backend is asked for
    import cupy as cp
except ImportError as err:  # pragma: no cover - depends on the machine
    raise ImportError("backend='cupy' needs CuPy and a CUDA GPU (pip install cupy-cuda12x); "
                      f"import failed: {err}") from err

from solvers import HINGE, LOGISTIC, SMOOTHED_HINGE, SQUARED

_SOURCE = r"""
#define LIMIT 4611686018427387904.0  /* 2^62 */

__device__ double coordinate_step(int code, double alpha, double z, double y, double s,
                                  double smoothing) {
    if (code == %(SQUARED)d) return (y - z - alpha) / (1.0 + s);
    double beta = alpha * y;
    double m = y * z;
    double nb;
    if (code == %(HINGE)d) {
        nb = beta + (1.0 - m) / s;
        nb = fmin(fmax(nb, 0.0), 1.0);
    } else if (code == %(SMOOTHED_HINGE)d) {
        nb = beta + (1.0 - m - smoothing * beta) / (s + smoothing);
        nb = fmin(fmax(nb, 0.0), 1.0);
    } else {  /* squared hinge */
        nb = fmax((s * beta + 1.0 - m) / (s + 0.5), 0.0);
    }
    return y * nb - alpha;
}

__device__ long long encode(double x, double scale, int* err) {
    double r = rint(x * scale);
    if (!(fabs(r) < LIMIT)) { *err = 1; return 0; }
    return (long long) r;
}

extern "C" __global__ void inner_products(
        const long long* req, int n_req, const double* data, const int* indices,
        const long long* indptr, const int* hold_client, const long long* feat_off,
        const int* hold_feat, const double* w, double scale, long long* parts, int* err) {
    int t = blockDim.x * blockIdx.x + threadIdx.x;
    if (t >= n_req) return;
    long long h = req[t];
    long long f0 = feat_off[hold_client[h]];
    double s = 0.0;
    for (long long e = indptr[h]; e < indptr[h + 1]; e++)
        s += data[e] * w[hold_feat[f0 + indices[e]]];
    parts[h] = encode(s, scale, err);
}

extern "C" __global__ void local_dual(
        const long long* avail, int n_avail, int local_margins, const double* data,
        const int* indices, const long long* indptr, const long long* row_off,
        const long long* feat_off, const int* hold_feat, const long long* hold_sample,
        const double* y, const double* alpha, const double* q, const double* rho,
        const double* update_weight, const long long* margin, double inv_frac_scale,
        double frac_scale, const double* w, const long long* draw_off,
        const long long* drawn, const long long* drawn_cnt, int code, double lam_n,
        double sigma, double smoothing, double* dalpha, double* u, long long* hold_mark,
        long long stamp, long long* upd, int* err) {
    int a = blockDim.x * blockIdx.x + threadIdx.x;
    if (a >= n_avail) return;
    long long k = avail[a];
    long long r0 = row_off[k], f0 = feat_off[k], d0 = draw_off[k];
    for (long long t = 0; t < drawn_cnt[k]; t++) {
        long long h = r0 + drawn[d0 + t];
        double z;
        if (local_margins) {
            z = 0.0;
            for (long long e = indptr[h]; e < indptr[h + 1]; e++)
                z += data[e] * w[hold_feat[f0 + indices[e]]];
        } else {
            z = (double) margin[hold_sample[h]] * inv_frac_scale;
        }
        double corr = 0.0;
        for (long long e = indptr[h]; e < indptr[h + 1]; e++)
            corr += data[e] * u[f0 + indices[e]];
        double z_local = z + rho[h] * sigma * corr;
        double s = sigma * q[h] / lam_n;
        double delta = coordinate_step(code, alpha[h] + dalpha[h], z_local, y[h], s,
                                       smoothing);
        if (delta != 0.0) {
            dalpha[h] += delta;
            double step = delta / lam_n;
            for (long long e = indptr[h]; e < indptr[h + 1]; e++)
                u[f0 + indices[e]] += data[e] * step;
        }
    }
    for (long long t = 0; t < drawn_cnt[k]; t++) {
        long long h = r0 + drawn[d0 + t];
        if (hold_mark[h] != stamp) {
            hold_mark[h] = stamp;
            upd[h] = encode(dalpha[h] * update_weight[h], frac_scale, err);
        }
        for (long long e = indptr[h]; e < indptr[h + 1]; e++) u[f0 + indices[e]] = 0.0;
    }
    for (long long t = 0; t < drawn_cnt[k]; t++) dalpha[r0 + drawn[d0 + t]] = 0.0;
}
""" % dict(SQUARED=SQUARED, HINGE=HINGE, SMOOTHED_HINGE=SMOOTHED_HINGE)

_THREADS = 128


def _grid(n):
    return (max(1, -(-n // _THREADS)),), (_THREADS,)


class CupyKernels:
    """The engine's data on the GPU and the three kernels behind the Numba interface."""

    def __init__(self, engine):
        if engine.params.loss_code == LOGISTIC:
            raise ValueError("backend='cupy' does not run the logistic loss (GPU logarithms "
                             "round differently); use backend='numba'")
        module = cp.RawModule(code=_SOURCE, options=("--fmad=false",))
        self._inner = module.get_function("inner_products")
        self._local = module.get_function("local_dual")
        B, up = engine.blocks, cp.asarray
        self.data, self.indices, self.indptr = up(B.data), up(B.indices), up(B.indptr)
        self.row_off, self.feat_off = up(B.row_off), up(B.feat_off)
        self.hold_client = up(B.hold_client)
        self.hold_feat = up(B.hold_feat.astype(np.int32))
        self.hold_sample = up(B.hold_sample)
        self.y, self.q, self.rho = up(B.y), up(B.q), up(B.rho)
        self.update_weight = up(B.update_weight)
        self.dalpha = cp.zeros(B.hold_sample.size)
        self.u = cp.zeros(B.hold_feat.size)
        self.hold_mark = cp.zeros(B.hold_sample.size, dtype=cp.int64)
        self.err = cp.zeros(1, dtype=cp.int32)

    def _check(self, engine):
        if int(self.err[0]):
            self.err[0] = 0
            engine.arrays.err[0] = 1

    def inner_products(self, engine, requested):
        """parts[h] = Enc(x_h^k . w) for the requested holdings (host arrays updated)."""
        R = engine.arrays
        req = cp.asarray(requested)
        parts = cp.asarray(R.parts)
        self._inner(*_grid(req.size), (req, np.int32(req.size), self.data, self.indices,
                                       self.indptr, self.hold_client, self.feat_off,
                                       self.hold_feat, cp.asarray(engine.w),
                                       np.float64(engine.params.frac_scale), parts, self.err))
        R.parts[requested] = cp.asnumpy(parts[req])
        self._check(engine)

    def local_dual(self, engine, avail, stamp):
        """LocalDualMethod of every available client; its upd and hold_mark updated."""
        P, R, D = engine.params, engine.arrays, engine.draws
        av = cp.asarray(avail)
        upd = cp.asarray(R.upd)
        self.hold_mark = cp.asarray(R.hold_mark)
        self._local(*_grid(av.size), (
            av, np.int32(av.size), np.int32(engine.local_margins), self.data, self.indices,
            self.indptr, self.row_off, self.feat_off, self.hold_feat, self.hold_sample,
            self.y, cp.asarray(engine.duals.alpha_loc), self.q, self.rho, self.update_weight,
            cp.asarray(R.margin), np.float64(P.inv_frac_scale), np.float64(P.frac_scale),
            cp.asarray(engine.w), cp.asarray(D.draw_off), cp.asarray(D.drawn),
            cp.asarray(D.drawn_cnt),
            np.int32(P.loss_code), np.float64(P.lam_n), np.float64(P.sigma),
            np.float64(P.smoothing), self.dalpha, self.u, self.hold_mark, np.int64(stamp),
            upd, self.err))
        R.upd[...] = cp.asnumpy(upd)
        R.hold_mark[...] = cp.asnumpy(self.hold_mark)
        self._check(engine)
