"""Per-value cost of encryption + decryption for each crypto backend.

Each backend encrypts a vector of fixed-point values (uniform in [-10, 10], 32 fractional
bits) and decrypts it, through the one KeyHolder interface; key generation is timed apart.
phe is slow, so it runs on a sample and its per-value cost is what is compared (it does not
depend on the vector's length: one ciphertext per value). The cost of one homomorphic
addition per value is shown for information. Times are CPU seconds of this process (so
that other load on the machine does not skew the ratios), wall seconds with --n-jobs > 1.

fast-paillier runs four ways at 2048 bits: one value per ciphertext (``slots=1``); packed
as the protocol packs it for the hinge and the other losses with a dual box (83-bit
slots, 24 per plaintext: the keys a ``HyFDCARun`` deals itself, whose slots
``hyfdca._encoding_range`` sizes for the dual box at 32 fractional bits; their key
generation includes that run's set-up on breast cancer); packed with the backend's default
headroom (62-bit range, 64 bits of headroom: 128-bit slots, 15 per plaintext); and with a
declared 40-bit range (|x| < 256 at 32 fractional bits, which the data here fits: 106-bit
slots, 19 per plaintext). The headline uses the protocol's row.

    python benchmarks/crypto_cost.py            # 10,000 values at 2048 bits (~1 min)
    python benchmarks/crypto_cost.py --quick    # phe on 20 values, the rest on 10,000 (~20 s)
    python benchmarks/crypto_cost.py --n-length 3072 --n-jobs 2   # pool started in set-up

The last line reads ``headline: phe_over_fast_protocol=<x> phe_over_mask=<y>``: phe's
per-value encrypt + decrypt time over fast-paillier's as the protocol packs it, and over
mask's.
"""

import argparse
import time

import numpy as np

from crypto import deal_keys
from feddata import federated_problem
from hyfdca import HyFDCARun, HyFDCASettings
from hyfdca.cli import whole_number

PROTOCOL = "fast-paillier protocol (hinge)"


positive_int = whole_number(1)   # argparse type: a whole number >= 1


def protocol_keys(**options):
    """(KeyHolder, Evaluator) that a HyFDCARun deals for fast-paillier under the hinge
    loss (its slots sized for the dual box), from a run set up on breast cancer 2x2."""
    fed, _, _ = federated_problem("breast_cancer", "2x2", seed=0)
    settings = HyFDCASettings.from_variant("auto", loss="hinge", lam=1e-2)
    run = HyFDCARun(fed, settings, crypto="fast-paillier", crypto_options=options)
    return run.clients[0].keys, run.server.evaluator


def measure(name, n_values, n_length, clock=time.process_time, protocol=False, **options):
    """(slots, seconds of key generation, per-value encrypt, decrypt, add seconds)."""
    if name in ("paillier", "fast-paillier"):
        options["n_length"] = n_length
    start = clock()
    keys, ev = protocol_keys(**options) if protocol else deal_keys(name, **options)[:2]
    keygen = clock() - start
    x = np.random.default_rng(0).uniform(-10.0, 10.0, n_values)
    if hasattr(keys, "_public"):  # the fixed-base table and the pool: part of key set-up
        start = clock()
        keys._public.table()
        if keys.n_jobs > 1:
            keys.decrypt(keys.encrypt(np.zeros(keys.pool_threshold * keys.slots)))
        keygen += clock() - start
    start = clock()
    ex = keys.encrypt(x)
    encrypt = clock() - start
    start = clock()
    total = ev.add(ex, ex)
    add = clock() - start
    start = clock()
    back = keys.decrypt(ex)
    decrypt = clock() - start
    if not np.allclose(back, x, atol=2.0**-30) or not np.allclose(keys.decrypt(total), 2 * x):
        raise RuntimeError(f"{name}: the round trip does not reproduce the values")
    if hasattr(keys, "close"):
        keys.close()
    return (getattr(keys, "slots", 1), keygen, encrypt / n_values, decrypt / n_values,
            add / n_values)


def main(argv=None):
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="phe on 20 values only")
    parser.add_argument("--n-values", type=positive_int, default=10_000)
    parser.add_argument("--phe-values", type=positive_int, default=None,
                        help="values for phe (default 200, 20 with --quick)")
    parser.add_argument("--n-length", type=positive_int, default=2048)
    parser.add_argument("--n-jobs", type=positive_int, default=1,
                        help="fast-paillier worker processes for long vectors")
    args = parser.parse_args(argv)
    phe_values = args.phe_values if args.phe_values is not None else (
        20 if args.quick else 200)

    clock = time.process_time if args.n_jobs == 1 else time.perf_counter
    rows = [
        ("paillier (phe)", "paillier", phe_values, {}),
        ("fast-paillier slots=1", "fast-paillier", min(args.n_values, 500 if args.quick
                                                       else 2000),
         dict(slots=1, n_jobs=args.n_jobs)),
        (PROTOCOL, "fast-paillier", args.n_values, dict(protocol=True, n_jobs=args.n_jobs)),
        ("fast-paillier packed", "fast-paillier", args.n_values,
         dict(slots="auto", n_jobs=args.n_jobs)),
        ("fast-paillier packed 40b", "fast-paillier", args.n_values,
         dict(slots="auto", n_jobs=args.n_jobs, max_bits=40)),
        ("mask", "mask", args.n_values, {}),
        ("plain", "plain", args.n_values, {}),
    ]
    print(f"per-value cost at {args.n_length} bits (mask: 256-bit ChaCha20 key), "
          f"n_jobs={args.n_jobs}, {'CPU' if args.n_jobs == 1 else 'wall'} time")
    print(f"{'backend':32s} {'slots':>5s} {'values':>7s} {'keygen s':>9s} {'encrypt us':>11s} "
          f"{'decrypt us':>11s} {'enc+dec us':>11s} {'add us':>9s}")
    cost = {}
    for label, name, n, options in rows:
        slots, keygen, enc, dec, add = measure(name, n, args.n_length, clock=clock, **options)
        cost[label] = enc + dec
        print(f"{label:32s} {slots:5d} {n:7d} {keygen:9.2f} {enc * 1e6:11.3f} "
              f"{dec * 1e6:11.3f} {(enc + dec) * 1e6:11.3f} {add * 1e6:9.3f}", flush=True)
    phe = cost["paillier (phe)"]
    for label in cost:
        print(f"  phe / {label}: {phe / cost[label]:,.0f}x")
    print(f"headline: phe_over_fast_protocol={phe / cost[PROTOCOL]:.0f} "
          f"phe_over_mask={phe / cost['mask']:.0f}")


if __name__ == "__main__":
    main()
