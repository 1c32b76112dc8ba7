"""The crypto interface: every backend against plain arithmetic, errors, secure sums."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crypto import FixedPoint, SecureSum, make_backend, masked_total


@pytest.fixture(scope="module", params=["plain", "paillier"])
def backend(request):
    options = dict(n_length=512, insecure=True) if request.param == "paillier" else {}
    return make_backend(request.param, **options)


values = st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=1, max_size=6)


@settings(max_examples=25, deadline=None)
@given(a=values, m=st.integers(-2**16, 2**16))
def test_homomorphic_add_and_scalar_multiply(backend, a, m):
    keys, ev = backend
    a = np.array(a)
    b = a[::-1] * 0.5
    ea, eb = keys.encrypt(a), keys.encrypt(b)
    np.testing.assert_allclose(keys.decrypt(ev.add(ea, eb)), a + b, atol=2**-30)
    np.testing.assert_allclose(keys.decrypt(ev.multiply(ea, m, 16)), a * m / 2**16,
                               atol=2**-30 * abs(m) / 2**16 + 1e-12)


def test_take_put_add_at_and_counts(backend):
    keys, ev = backend
    before = ev.counts.as_dict()
    target = ev.zeros(4, keys.codec.frac_bits)
    ev.add_at(target, [1, 3], keys.encrypt([2.0, -3.0]))
    ev.put(target, [0], keys.encrypt([7.5]))
    np.testing.assert_array_equal(keys.decrypt(target), [7.5, 2.0, 0.0, -3.0])
    np.testing.assert_array_equal(keys.decrypt(ev.take(target, [3, 1])), [-3.0, 2.0])
    after = ev.counts.as_dict()
    assert after["encrypt"] - before["encrypt"] == 3 and after["add"] - before["add"] == 2


def test_key_mismatch_type_and_scale_errors():
    keys_a, ev_a = make_backend("plain")
    keys_b, _ = make_backend("plain")
    x = keys_b.encrypt([1.0])
    with pytest.raises(ValueError, match="made under key plain-"):
        ev_a.add(keys_a.encrypt([1.0]), x)
    with pytest.raises(ValueError, match="made under key"):
        keys_a.decrypt(x)
    with pytest.raises(TypeError, match="expected an EncryptedVector"):
        ev_a.add(keys_a.encrypt([1.0]), np.array([1.0]))
    with pytest.raises(ValueError, match="scales or lengths differ"):
        ev_a.add(keys_a.encrypt([1.0]), ev_a.multiply(keys_a.encrypt([1.0]), 3, 2))


def test_fixed_point_overflow_is_an_error_never_a_wrap():
    codec = FixedPoint(32)
    with pytest.raises(OverflowError, match="fixed-point overflow"):
        codec.encode([2.0**31])
    keys, ev = make_backend("plain")
    big = keys.encrypt([2.0**29])
    with pytest.raises(OverflowError, match="fixed-point overflow"):
        ev.multiply(big, 2**10, 0)
    with pytest.raises(ValueError, match="NaN or infinite"):
        codec.encode([np.nan])


def test_secure_sum_is_exact_and_masks_each_share():
    masker = SecureSum(degree=2)
    clients = [0, 2, 5, 7, 9]
    shares = {k: np.array([k * 0.25 - 1.0, -k * 1.5]) for k in clients}
    masked = [masker.mask(shares[k], k, clients, "t") for k in clients]
    np.testing.assert_allclose(masked_total(masked), sum(shares.values()), atol=1e-9)
    plain = FixedPoint(32).encode(shares[5]).astype(np.uint64)
    assert not np.array_equal(masked[2], plain)
    other_round = masker.mask(shares[5], 5, clients, "u")
    assert not np.array_equal(masked[2], other_round)
    with pytest.raises(ValueError, match="client 4 is not among the participants"):
        masker.mask([1.0], 4, clients, "t")


def test_default_2048_bit_paillier_round_trip():
    from crypto import paillier_backend

    keys, ev = paillier_backend()
    x = keys.encrypt([0.5, -1234.25])
    np.testing.assert_array_equal(keys.decrypt(ev.add(x, x)), [1.0, -2468.5])
    assert ev.nbytes_per_value == 512


def test_fixed_point_refuses_more_than_int64():
    with pytest.raises(ValueError, match="max_bits <= 62"):
        FixedPoint(32, max_bits=2046)
