"""Key dealing: the one place where key material is made and handed out.

The clients run :func:`deal_keys` at set-up (in a deployment, one client generates the
keys and sends them to the others over authenticated channels, or they run a
distributed key generation; here the dealer is a local function). Every client gets the
same :class:`~crypto.KeyHolder` (private key or masking key) and the same
:class:`~crypto.SecureSum` masker (pairwise masking key); the server gets only the
:class:`~crypto.Evaluator`, which holds public parameters (the modulus n and n^2, for
fast-paillier also h^n mod n^2 and the slot layout; for BFV the public contexts; for
masking nothing but a random key id) and never a factor of n, a Paillier private key or a PRF key.
"""

from typing import NamedTuple

from crypto._bfv import bfv_backend
from crypto._fast_paillier import fast_paillier_backend
from crypto._fixed_point import DEFAULT_FRACTIONAL_BITS, FixedPoint
from crypto._interface import Evaluator, KeyHolder
from crypto._mask import mask_backend
from crypto._paillier import paillier_backend
from crypto._plain import plain_backend
from crypto._secure_sum import SecureSum

BACKENDS = {
    "plain": plain_backend,
    "paillier": paillier_backend,
    "fast-paillier": fast_paillier_backend,
    "mask": mask_backend,
    "bfv": bfv_backend,
}


class DealtKeys(NamedTuple):
    """What key dealing hands out: ``keys`` and ``masker`` to every client,
    ``evaluator`` to the server."""

    keys: KeyHolder
    evaluator: Evaluator
    masker: SecureSum


def deal_keys(backend="paillier", *, frac_bits=DEFAULT_FRACTIONAL_BITS, max_bits=62,
              secure_sum_degree=3, **options):
    """Generate the keys of ``backend`` and of the secure sums; see :class:`DealtKeys`.

    Parameters
    ----------
    backend : {"plain", "paillier", "fast-paillier", "mask", "bfv"}
    frac_bits, max_bits : int
        The fixed-point encoding every backend shares (round(x 2^frac_bits), |.| below
        2^max_bits, else OverflowError).
    **options
        Passed to the backend: ``n_length`` (2048 default, 3072 option; under 2048 only
        with ``insecure=True``), ``slots``, ``headroom_bits``, ``n_jobs`` ...
    """
    try:
        factory = BACKENDS[backend]
    except KeyError:
        raise ValueError(f"unknown crypto backend {backend!r}; known: {sorted(BACKENDS)}") \
            from None
    codec = FixedPoint(frac_bits, max_bits)
    keys, evaluator = factory(codec=codec, **options)
    return DealtKeys(keys, evaluator, SecureSum(frac_bits=frac_bits, degree=secure_sum_degree))


def make_backend(name, **kwargs):
    """(KeyHolder, Evaluator) of the named backend (key dealing without the masker)."""
    keys, evaluator, _ = deal_keys(name, **kwargs)
    return keys, evaluator
