#!/usr/bin/env python
"""Does CKKS earn a place beside BFV? The lattice schemes on TenSEAL, per value, and the
error CKKS would bring into HyFDCA's Enc(alpha).

Both at ring degree N = 8192 with a ciphertext modulus of at most 218 bits, the largest
the Homomorphic Encryption Standard allows for 128-bit security there (SEAL enforces it):

* ``bfv``: the toolkit's backend (``crypto.bfv_backend``): exact integers, 8,192 slots,
  two ciphertexts per vector (one per 58-bit plaintext prime, by CRT), so 4,096 values per
  ciphertext in effect;
* ``ckks``: TenSEAL's CKKS with moduli (60, 40, 40, 60) and scale 2^40: approximate
  reals, 4,096 slots, one ciphertext per vector, one multiplication deep after rescaling
  (HyFDCA needs one: Enc(alpha) += g Enc(Delta)).

Per value, best of ``--repeats``: encrypt, decrypt, add, multiply by a plaintext scalar,
and bytes. Then the error: Enc(alpha) after 50 rounds (10 with ``--quick``) of alpha +=
g (sum of K holders' updates) (g, updates and alpha as in a HyFDCA round: |dalpha| <= 1,
g in [0, 1]), decrypted and compared with the exact float64 value, against the
fixed-point resolution 2^-32 every exact backend carries (their runs equal the plaintext
run bit for bit).

The openfhe Python wrapper cannot be measured here: its 1.6.1 wheels need CPython >= 3.12,
or carry a CPython 3.10 extension in a ``py3-none-any`` wheel that does not import on the
toolkit's Python 3.11 (checked 2026-11-25).

    python benchmarks/lattice_schemes.py              # 32,768 values, 50 rounds, ~5 s
    python benchmarks/lattice_schemes.py --quick      # 8,192 values, 10 rounds

Last line: ``headline: ckks_vs_bfv_cost=<x> ckks_max_error=<e> fixed_point_step=<2^-32>``,
x = CKKS's encrypt + decrypt + add + multiply seconds per value over BFV's (below 1: CKKS
cheaper).
"""

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import tenseal as ts  # noqa: E402

from hyfdca.profile import measure_operations  # noqa: E402
from hyfdca.cli import whole_number  # noqa: E402

OPERATIONS = ("encrypt", "decrypt", "add", "multiply")
CKKS_DEGREE, CKKS_MODULI, CKKS_SCALE = 8192, (60, 40, 40, 60), 2.0 ** 40
FIXED_POINT_STEP = 2.0 ** -32


positive_int = whole_number(1)   # argparse type: a whole number >= 1


def best_of(repeats, job):
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        job()
        best = min(best, time.perf_counter() - start)
    return best


class CKKS:
    """TenSEAL CKKS vectors of 4,096 slots; a long vector is a list of ciphertexts."""

    def __init__(self):
        self.context = ts.context(ts.SCHEME_TYPE.CKKS, CKKS_DEGREE,
                                  coeff_mod_bit_sizes=list(CKKS_MODULI))
        self.context.global_scale = CKKS_SCALE
        self.slots = CKKS_DEGREE // 2

    def encrypt(self, values):
        return [ts.ckks_vector(self.context, values[i:i + self.slots].tolist())
                for i in range(0, values.size, self.slots)]

    def decrypt(self, vector):
        return np.concatenate([np.asarray(v.decrypt()) for v in vector])

    @staticmethod
    def add(a, b):
        return [x + y for x, y in zip(a, b)]

    @staticmethod
    def multiply(a, scalar):
        return [x * scalar for x in a]

    @staticmethod
    def nbytes(vector):
        return sum(len(v.serialize()) for v in vector)


def ckks_costs(n_values, repeats, rng):
    ckks = CKKS()
    values = rng.standard_normal(n_values)
    a, b = ckks.encrypt(values), ckks.encrypt(values[::-1].copy())
    jobs = {"encrypt": lambda: ckks.encrypt(values), "decrypt": lambda: ckks.decrypt(a),
            "add": lambda: ckks.add(a, b), "multiply": lambda: ckks.multiply(a, 0.37)}
    costs = {op: best_of(repeats, job) / n_values for op, job in jobs.items()}
    return costs, ckks.nbytes(a) / n_values


def ckks_alpha_error(n_values, rounds, holders, rng):
    """max |decrypted - exact| of Enc(alpha) after ``rounds`` HyFDCA-like steps."""
    ckks = CKKS()
    alpha = np.zeros(n_values)
    enc_alpha = None
    for _ in range(rounds):
        updates = [rng.uniform(-1.0, 1.0, n_values) / holders for _ in range(holders)]
        g = float(rng.uniform(0.0, 1.0))
        enc_delta = ckks.encrypt(updates[0])
        for update in updates[1:]:
            enc_delta = ckks.add(enc_delta, ckks.encrypt(update))
        step = ckks.multiply(enc_delta, g)
        enc_alpha = step if enc_alpha is None else ckks.add(enc_alpha, step)
        alpha += g * np.sum(updates, axis=0)
    return float(np.max(np.abs(ckks.decrypt(enc_alpha) - alpha)))


def main():
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=positive_int, default=3,
                        help="timings per operation (the best is shown)")
    parser.add_argument("--holders", type=positive_int, default=3,
                        help="holders whose updates Enc(alpha) adds each round")
    args = parser.parse_args()
    n_values, rounds = (8192, 10) if args.quick else (32768, 50)
    rng = np.random.default_rng(0)
    bfv = {c.operation: c for c in measure_operations("bfv", n_values=n_values,
                                                      repeats=args.repeats)}
    ckks, ckks_bytes = ckks_costs(n_values, args.repeats, rng)
    print(f"TenSEAL, N = 8192, 128-bit security, {n_values} values, best of {args.repeats}; "
          f"microseconds per value:")
    print("| scheme | " + " | ".join(OPERATIONS) + " | bytes per value |")
    print("|---|" + "---|" * (len(OPERATIONS) + 1))
    print("| bfv (crypto.bfv_backend) | " + " | ".join(
        f"{1e6 * bfv[op].per_value:.3g}" for op in OPERATIONS)
        + f" | {bfv['encrypt'].bytes_per_value:.0f} |")
    print("| ckks (TenSEAL) | " + " | ".join(f"{1e6 * ckks[op]:.3g}" for op in OPERATIONS)
          + f" | {ckks_bytes:.0f} |")
    ratio = sum(ckks.values()) / sum(bfv[op].per_value for op in OPERATIONS)
    error = ckks_alpha_error(min(n_values, 8192), rounds, args.holders, rng)
    print(f"\nCKKS Enc(alpha) after {rounds} rounds of {args.holders} holders' updates: "
          f"max error {error:.3g} (fixed point: every exact backend is within "
          f"{FIXED_POINT_STEP:.3g} of the plaintext run's value, and equal to it bit for bit)")
    print(f"headline: ckks_vs_bfv_cost={ratio:.3g} ckks_max_error={error:.3g} "
          f"fixed_point_step={FIXED_POINT_STEP:.3g}")


if __name__ == "__main__":
    main()
