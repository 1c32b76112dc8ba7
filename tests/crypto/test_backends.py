"""The crypto interface: every backend against plain arithmetic, errors, secure sums."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crypto import (CiphertextError, DealtKeys, FixedPoint, KeyHolder, SecureSum,
                    SecureSumError, deal_keys,
                    make_backend, masked_total)

SMALL = dict(n_length=512, insecure=True)  # test keys only
OPTIONS = {
    "plain": ("plain", {}),
    "paillier": ("paillier", SMALL),
    "fast-paillier": ("fast-paillier", dict(SMALL, slots=1)),
    "fast-paillier-packed": ("fast-paillier", SMALL),
    "mask": ("mask", {}),
    "bfv": ("bfv", {}),
}
UNPACKED = ["plain", "paillier", "fast-paillier", "mask"]


def _deal(label, **extra):
    name, options = OPTIONS[label]
    return make_backend(name, **options, **extra)


@pytest.fixture(scope="module", params=list(OPTIONS))
def backend(request):
    return _deal(request.param)


@pytest.fixture(scope="module", params=UNPACKED)
def unpacked(request):
    return _deal(request.param)


values = st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=1, max_size=6)


@settings(max_examples=20, deadline=None)
@given(a=values, m=st.integers(-2**16, 2**16))
def test_homomorphic_add_and_scalar_multiply(backend, a, m):
    keys, ev = backend
    a = np.array(a)
    b = a[::-1] * 0.5
    ea, eb = keys.encrypt(a), keys.encrypt(b)
    np.testing.assert_allclose(keys.decrypt(ev.add(ea, eb)), a + b, atol=2**-30)
    np.testing.assert_allclose(keys.decrypt(ev.multiply(ea, m, 16)), a * m / 2**16,
                               atol=2**-30 * abs(m) / 2**16 + 1e-12)


def test_packing_fills_the_modulus_and_survives_long_vectors():
    keys, ev = _deal("fast-paillier-packed")
    assert keys.slots == (512 - 2) // (62 + 64 + 2)
    x = np.linspace(-5.0, 5.0, 3 * keys.slots + 2)  # a partial last ciphertext
    ex = keys.encrypt(x)
    assert len(ex) == x.size and len(ex.payload) == 4
    total = ev.add(ev.add(ex, ex), ev.multiply(ex, -3, 0))
    np.testing.assert_allclose(keys.decrypt(total), -x, atol=2**-31)
    assert ev.nbytes(ex) == 4 * 128


def test_take_put_add_at_and_counts(unpacked):
    keys, ev = unpacked
    before = ev.counts.as_dict()
    target = ev.zeros(4, keys.codec.frac_bits)
    ev.add_at(target, [1, 3], keys.encrypt([2.0, -3.0]))
    ev.put(target, [0], keys.encrypt([7.5]))
    ev.add_at(target, [3, 0], ev.take(target, [1, 1]))
    np.testing.assert_array_equal(keys.decrypt(target), [9.5, 2.0, 0.0, -1.0])
    np.testing.assert_array_equal(keys.decrypt(ev.take(target, [3, 1])), [-1.0, 2.0])
    after = ev.counts.as_dict()
    assert after["encrypt"] - before["encrypt"] == 3 and after["add"] - before["add"] == 4


@pytest.mark.parametrize("label", ["fast-paillier-packed", "bfv"])
def test_packed_vectors_move_whole_ciphertexts(label):
    keys, ev = _deal(label)
    s = keys.slots
    x = keys.encrypt(np.arange(2.0 * s))  # two full ciphertexts
    before = ev.counts.as_dict()
    target = ev.zeros(3, keys.codec.frac_bits)
    assert len(target) == 3 * s and target.slots == s
    ev.add_at(target, [2, 0], x)  # ciphertext 0 of x into 2, ciphertext 1 into 0
    ev.put(target, [1], ev.take(x, [0]))
    np.testing.assert_array_equal(keys.decrypt(target),
                                  np.concatenate([np.arange(s, 2.0 * s), np.arange(s),
                                                  np.arange(s)]))
    after = ev.counts.as_dict()
    assert after["add"] - before["add"] == 2  # counted per ciphertext
    assert after["decrypt"] - before["decrypt"] == 3
    with pytest.raises(ValueError, match="cannot add .* into 1 ciphertexts"):
        ev.add_at(target, [0], x)
    with pytest.raises(ValueError, match="multiplied by one integer"):
        ev.multiply(x, np.arange(2 * s), 0)
    unpacked_keys, _ = _deal("fast-paillier")
    with pytest.raises(ValueError, match="ciphertext made under key fast-paillier-.*, this "
                                         "evaluator holds key "):
        ev.add_at(target, [0], unpacked_keys.encrypt([1.0]))


@pytest.mark.parametrize("label", UNPACKED)
def test_key_mismatch_type_and_scale_errors(label):
    keys_a, ev_a = _deal(label)
    keys_b, _ = _deal(label)
    x = keys_b.encrypt([1.0])
    with pytest.raises(ValueError, match="made under key"):
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


def test_packed_slots_refuse_sums_and_products_beyond_their_headroom():
    keys, ev = make_backend("fast-paillier", slots="auto", headroom_bits=2, **SMALL)
    top = 2.0**29  # near the codec's 62-bit range at 32 fractional bits
    x = keys.encrypt([top, -top, 1.0])
    total = x
    for _ in range(3):  # 4 x 2^61 < 2^(62 + 2): still exact, no carry into a neighbour
        total = ev.add(total, x)
    np.testing.assert_array_equal(keys.decrypt(total), [4 * top, -4 * top, 4.0])
    headroom = r"2\^64.32 .*beyond the headroom .*\(2\^64.00\); refused"
    with pytest.raises(OverflowError, match=headroom):
        ev.add(total, x)
    with pytest.raises(OverflowError, match="fixed-point overflow.*refused"):
        ev.multiply(x, 5, 0)
    np.testing.assert_array_equal(keys.decrypt(ev.multiply(x, -4, 0)), [-4 * top, 4 * top, -4])


def test_unpacked_paillier_refuses_results_beyond_the_plaintext_space():
    keys, ev = _deal("fast-paillier")
    x = keys.encrypt([1.0])
    with pytest.raises(OverflowError, match="refused"):
        for _ in range(10):
            x = ev.multiply(x, 2**62, 0)


def test_mask_detects_a_wrapped_64_bit_lane_exactly():
    keys, ev = _deal("mask")
    x = keys.encrypt([2.0**29, 1.0])  # 2^61 encoded
    total = ev.add(ev.add(x, x), ev.add(x, x))  # 2^63: wraps the signed 64-bit lane
    with pytest.raises(OverflowError, match="wrapped 1 time"):
        keys.decrypt(total)
    np.testing.assert_array_equal(keys.decrypt(ev.add(x, x)), [2.0**30, 2.0])
    # a product that wraps millions of times is an overflow too, not "tampered"
    with pytest.raises(OverflowError, match=r"wrapped \d+ time"):
        keys.decrypt(ev.multiply(x, 2**40, 0))


def _tampered(vector, payload):
    out = type(vector)(payload, vector.scale_bits, vector.key_id, vector.bound, vector.slots,
                       len(vector))
    return out


@pytest.mark.parametrize("label", ["paillier", "fast-paillier", "fast-paillier-packed"])
def test_paillier_tampered_truncated_and_foreign_ciphertexts_are_errors(label):
    keys, ev = _deal(label)
    other_keys, _ = _deal(label)
    x = keys.encrypt([1.5, -2.0, 3.25])
    n = int(ev._n)
    for bad in (0, n, n * n + 1, -5):
        payload = x.payload.copy()
        payload[0] = bad
        with pytest.raises(CiphertextError, match="not an element of Z"):
            keys.decrypt(_tampered(x, payload))
    payload = x.payload.copy()
    # Paillier is malleable: Enc(m) (n+1)^e is a valid Enc(m + e). A shift within the
    # vector's tracked range cannot be told from a genuine value; a large one (what a random
    # tampering gives with overwhelming probability) decrypts out of range and is caught
    payload[0] = payload[0] * pow(n + 1, 2**70, n * n) % (n * n)
    with pytest.raises(CiphertextError, match="tampered"):
        keys.decrypt(_tampered(x, payload))
    payload = x.payload.copy()
    payload[-1] = payload[-1] + 1 if (payload[-1] + 1) % n else payload[-1] + 2
    with pytest.raises(CiphertextError, match="tampered"):
        keys.decrypt(_tampered(x, payload))
    with pytest.raises(CiphertextError, match="truncated"):
        keys.decrypt(_tampered(x, x.payload[:0] if x.slots > 1 else x.payload[:2]))
    foreign = other_keys.encrypt([1.5, -2.0, 3.25])
    foreign.key_id = keys.key_id  # a forged key id: decrypts to garbage, caught
    with pytest.raises(CiphertextError, match="another key"):
        keys.decrypt(foreign)
    assert keys.counts.decrypt == 0   # a refused ciphertext is no decryption done


def test_a_refused_refresh_counts_no_encryption():
    keys, ev = _deal("paillier")
    big = keys.encrypt([1.0, 2.0])
    big = ev.multiply(ev.multiply(big, 2**40, 0), 2**40, 0)   # 2^112: past 64-bit ints
    before = keys.counts.as_dict()
    with pytest.raises(OverflowError, match="beyond 64-bit integers"):
        keys.refresh(big)
    assert keys.counts.encrypt == before["encrypt"]


def test_mask_tampering_truncation_and_foreign_keys_are_errors():
    keys, ev = _deal("mask")
    other_keys, _ = _deal("mask")
    x = ev.add(keys.encrypt([1.5, -2.0, 3.25]), keys.encrypt([1.0, 1.0, 1.0]))
    np.testing.assert_array_equal(keys.decrypt(x), [2.5, -1.0, 4.25])

    def changed(field, edit):
        p = x.payload[np.arange(3)]
        setattr(p, field, edit(getattr(p, field).copy()))
        return _tampered(x, p)

    def plus_one(a):
        a.flat[0] += np.uint64(1)
        return a

    for field in ("value", "tags", "coef", "pos", "nonce"):
        with pytest.raises(CiphertextError, match="failed authentication"):
            keys.decrypt(changed(field, plus_one))
    with pytest.raises(CiphertextError, match="truncated or malformed"):
        keys.decrypt(_tampered(x, x.payload[np.arange(2)]))
    with pytest.raises(CiphertextError, match="truncated or malformed"):
        keys.decrypt(changed("indptr", lambda a: a[:-1]))
    foreign = other_keys.encrypt([2.5, -1.0, 4.25])
    foreign.key_id = keys.key_id
    with pytest.raises(CiphertextError, match="made under another key"):
        keys.decrypt(foreign)


def test_mask_ciphertexts_are_fresh_and_hide_the_encoding():
    keys, ev = _deal("mask")
    a, b = keys.encrypt([1.0, 1.0]), keys.encrypt([1.0, 1.0])
    encoded = np.uint64(1 << 32)
    assert not np.any(a.payload.value == encoded)
    assert a.payload.value[0] != a.payload.value[1] and a.payload.value[0] != b.payload.value[0]
    assert ev.nbytes(a) == 2 * 20 + 12  # fresh: the nonce implies the recipe
    assert ev.nbytes(ev.add(a, b)) > ev.nbytes(a)


def test_fast_paillier_encryptions_are_randomised_and_the_pool_agrees():
    keys, ev = make_backend("fast-paillier", n_jobs=2, pool_threshold=4, **SMALL)
    try:
        x = np.arange(-6.0, 6.0, 0.75)
        a, b = keys.encrypt(x), keys.encrypt(x)
        assert keys._pool is not None  # the vectors went through the process pool
        assert all(c != d for c, d in zip(a.payload, b.payload))
        np.testing.assert_array_equal(keys.decrypt(ev.add(a, b)), 2 * x)
    finally:
        keys.close()


def test_key_dealing_gives_the_server_no_secret(backend):
    import pickle

    keys, ev = backend
    assert not isinstance(ev, KeyHolder)
    blob = pickle.dumps(ev)
    secrets = _secrets_of(keys)
    assert secrets or keys.key_id.startswith("plain")   # the check below checks something
    for secret in secrets:
        assert secret not in blob
    if hasattr(ev, "contexts"):   # BFV: the server's SEAL contexts hold no secret key
        assert not any(context.has_secret_key() for context in ev.contexts())
        assert all(context.has_secret_key() for context in keys.contexts())
    held = _attributes(ev)
    assert not any(type(o).__name__ in {"PaillierPrivateKey", "_PrivateContext", "SecureSum",
                                        "MaskKeyHolder"} for o in held)


def _secrets_of(keys):
    """Byte strings of the holder's private material, as a pickle would carry them."""
    out = []
    if hasattr(keys, "_private_key"):
        out += [keys._private_key.p, keys._private_key.q]
    if hasattr(keys, "_private"):
        out += [int(keys._private.p), int(keys._private.q)]
    out = [v.to_bytes((v.bit_length() + 7) // 8, "little") for v in map(int, out)]
    if hasattr(keys, "_stream_key"):
        out += [keys._stream_key, keys._mac.tobytes()]
    if hasattr(keys, "_context_blobs"):  # BFV: the SEAL contexts with the secret key
        out += list(keys._context_blobs)
    return out


def _attributes(obj, depth=5, seen=None):
    seen = set() if seen is None else seen
    if id(obj) in seen or depth == 0:
        return []
    seen.add(id(obj))
    found = [obj]
    children = list(vars(obj).values()) if hasattr(obj, "__dict__") else []
    children += [getattr(obj, s) for s in getattr(type(obj), "__slots__", ()) if hasattr(obj, s)]
    if isinstance(obj, (list, tuple)):
        children = list(obj)
    if isinstance(obj, dict):
        children = list(obj.values())
    for child in children:
        found += _attributes(child, depth - 1, seen)
    return found


def test_deal_keys_hands_out_keys_masker_and_evaluator():
    dealt = deal_keys("mask", frac_bits=20)
    assert isinstance(dealt, DealtKeys) and isinstance(dealt.masker, SecureSum)
    assert dealt.keys.codec.frac_bits == 20 and dealt.masker.frac_bits == 20
    assert dealt.keys.evaluator is dealt.evaluator
    with pytest.raises(ValueError, match="unknown crypto backend 'rot13'"):
        deal_keys("rot13")


def test_secure_sum_refuses_missing_extra_and_duplicated_shares():
    masker = SecureSum(degree=2)
    clients = [0, 2, 5, 7]
    pairs = [(k, masker.mask([1.0, -2.0], k, clients, "t")) for k in clients]
    with pytest.raises(SecureSumError, match=r"no share from client\(s\) \[5\]"):
        masked_total(pairs[:2] + pairs[3:], clients)
    with pytest.raises(SecureSumError, match=r"unexpected share from client\(s\) \[9\]"):
        masked_total(pairs + [(9, pairs[0][1])], clients)
    with pytest.raises(SecureSumError, match=r"more than one share from client\(s\) \[2\]"):
        masked_total(pairs + [pairs[1]], clients)
    with pytest.raises(SecureSumError, match="different shapes"):
        masked_total(pairs[:3] + [(7, pairs[3][1][:1])], clients)
    # participants named twice: the masks were drawn over the repeat and cannot cancel
    with pytest.raises(SecureSumError, match=r"name client\(s\) \[2\] twice"):
        masked_total(pairs, [0, 2, 2, 5, 7])
    with pytest.raises(ValueError, match="name a client twice"):
        masker.mask([1.0], 0, [0, 2, 2], "t")
    # shares not as SecureSum.mask makes them: summed in float, or cast on addition
    for bad in (pairs[3][1].astype(np.float64), pairs[3][1].view(np.int64)):
        with pytest.raises(SecureSumError, match="shares must be 1-D uint64 arrays"):
            masked_total(pairs[:3] + [(7, bad)], clients)
    with pytest.raises(SecureSumError, match="shares must be 1-D uint64 arrays"):
        masked_total([(k, m.reshape(1, -1)) for k, m in pairs], clients)
    np.testing.assert_allclose(masked_total(pairs, clients), [4.0, -8.0], atol=1e-9)


@pytest.mark.parametrize("name", ["paillier", "fast-paillier"])
def test_short_keys_are_refused_unless_insecure(name):
    with pytest.raises(ValueError, match="under 2048 bits are insecure"):
        make_backend(name, n_length=1024)
    for length in (2048.9, "2048", True):
        with pytest.raises(ValueError, match="must be a whole number of bits"):
            make_backend(name, n_length=length)
    with pytest.raises(ValueError, match="slots"):
        make_backend("fast-paillier", n_length=512, insecure=True, slots=99)


def test_secure_sum_is_exact_and_masks_each_share():
    masker = SecureSum(degree=2)
    clients = [0, 2, 5, 7, 9]
    shares = {k: np.array([k * 0.25 - 1.0, -k * 1.5]) for k in clients}
    masked = [masker.mask(shares[k], k, clients, "t") for k in clients]
    np.testing.assert_allclose(masked_total(zip(clients, masked), clients),
                               sum(shares.values()), atol=1e-9)
    plain = FixedPoint(32).encode(shares[5]).astype(np.uint64)
    assert not np.array_equal(masked[2], plain)
    other_round = masker.mask(shares[5], 5, clients, "u")
    assert not np.array_equal(masked[2], other_round)
    with pytest.raises(ValueError, match="client 4 is not among the participants"):
        masker.mask([1.0], 4, clients, "t")


def test_default_2048_bit_fast_paillier_packed_round_trip():
    keys, ev = make_backend("fast-paillier")
    assert keys.slots == 2046 // 128 == 15 and ev.nbytes_per_value == 512
    x = keys.encrypt([0.5, -1234.25] * 20)
    np.testing.assert_array_equal(keys.decrypt(ev.add(x, x)), [1.0, -2468.5] * 20)
    assert len(x.payload) == 3


@pytest.mark.slow
@pytest.mark.parametrize("name,n_length", [("paillier", 2048), ("paillier", 3072),
                                           ("fast-paillier", 3072)])
def test_full_size_keys_round_trip(name, n_length):
    keys, ev = make_backend(name, n_length=n_length)
    x = keys.encrypt([0.5, -1234.25])
    np.testing.assert_array_equal(keys.decrypt(ev.add(x, x)), [1.0, -2468.5])
    assert ev.nbytes_per_value == n_length // 4


def test_fixed_point_refuses_more_than_int64_and_fractions_of_a_bit():
    with pytest.raises(ValueError, match="max_bits <= 62"):
        FixedPoint(32, max_bits=2046)
    for bad in (32.7, True):   # 32.7 was truncated to 32
        with pytest.raises(ValueError, match="frac_bits must be a whole number of bits"):
            FixedPoint(bad)
    assert FixedPoint(32.0).frac_bits == 32


def test_refresh_reencrypts_the_same_integers(unpacked):
    keys, ev = unpacked
    x = ev.multiply(ev.add(keys.encrypt([1.25, -3.5]), keys.encrypt([0.5, 0.5])), 3, 4)
    values, fresh = keys.refresh(x)
    np.testing.assert_array_equal(values, [1.75 * 3 / 16, -3.0 * 3 / 16])
    assert (fresh.scale_bits, fresh.bound, len(fresh)) == (x.scale_bits, x.bound, 2)
    np.testing.assert_array_equal(keys.decrypt(fresh), values)


def test_mask_recipes_grow_until_refreshed():
    keys, ev = make_backend("mask", refresh_atoms=3)
    stored = ev.zeros(3, 32)
    for _ in range(4):
        ev.add_at(stored, [0, 2], keys.encrypt([1.0, 2.0]))
    np.testing.assert_array_equal(ev.stale(stored, [0, 1, 2]), [True, False, True])
    assert keys.wants_refresh(ev.take(stored, [0])) and not keys.wants_refresh(
        ev.take(stored, [1]))
    values, fresh = keys.refresh(ev.take(stored, [0, 2]))
    ev.put(stored, [0, 2], fresh)
    assert not ev.stale(stored, [0, 1, 2]).any()
    np.testing.assert_array_equal(keys.decrypt(stored), [4.0, 0.0, 8.0])


def test_packed_decryption_catches_a_slot_overflow_that_bypassed_the_evaluator():
    keys, ev = _deal("fast-paillier-packed")
    x = keys.encrypt([2.0**29, -1.0, 3.0])
    nsq = ev._nsq
    payload = x.payload.copy()
    payload[0] = pow(payload[0], 2**10, nsq)  # every slot x 2^10, untracked: 2^71 > bound
    with pytest.raises(CiphertextError, match="or a packed slot overflowed"):
        keys.decrypt(_tampered(x, payload))
    # a product that shifts a slot wholly into its neighbour (2^61 x 2^67 = 2^128 with
    # 128-bit slots) leaves well-formed digits: undetectable on decryption, hence the
    # evaluator's refusal
    y = keys.encrypt([2.0**29, 0.0, 0.0])
    payload = y.payload.copy()
    payload[0] = pow(y.payload[0], 2**67, nsq)
    np.testing.assert_array_equal(keys.decrypt(_tampered(y, payload)), [0.0, 2.0**-32, 0.0])
    with pytest.raises(OverflowError, match="refused"):
        ev.multiply(ev.multiply(y, 2**40, 0), 2**40, 0)


def test_mask_mac_moduli_are_primes_whose_pairs_exceed_2_63():
    import gmpy2

    from crypto._mask import PRIMES

    primes = [int(p) for p in PRIMES]
    assert all(gmpy2.is_prime(p) and p < 2**32 for p in primes)
    assert min(a * b for a in primes for b in primes if a != b) > 2**63


def test_bfv_noise_leaves_a_margin_beyond_the_capacity():
    """The evaluator refuses growth beyond capacity / 2^62 = 2^51 times a fresh value's
    (the same factor bounds the noise); decryption is exact after a growth of 2^111, 60
    bits more, bypassing the evaluator's check."""
    keys, ev = make_backend("bfv")
    assert ev.capacity == 2**113 and ev.modulus.bit_length() == 116
    x = keys.encrypt(np.array([1.0, -2.0, 0.0, 3.0]) * 2.0**-32)  # encoded 1, -2, 0, 3
    payload = x.payload
    for _ in range(3):  # x 2^37 three times: the noise grows by 2^111, untracked
        payload = ev._multiply(payload, np.array([2**37]))
    grown = _tampered(x, payload)
    grown.bound = 3 * 2**111
    assert [int(v) for v in keys._decrypt(grown)] == [2**111, -2**112, 0, 3 * 2**111]
    with pytest.raises(OverflowError, match="refused"):
        ev.multiply(ev.multiply(x, 2**40, 0), 2**40, 0)  # 2^62 x 2^80 > 2^113


def test_bfv_multiplies_by_a_multiple_of_a_plaintext_prime():
    """m = 0 modulo one plaintext prime: SEAL refuses that prime's product with 0 (a
    "transparent" ciphertext); the residue is then a fresh encryption of zeros, and the
    product decrypts exactly."""
    keys, ev = make_backend("bfv", frac_bits=16)
    x = keys.encrypt(np.array([1.0, -2.0, 0.5]), range_bits=20)
    for m in (ev.primes[0], -2 * ev.primes[1]):
        np.testing.assert_array_equal(keys.decrypt(ev.multiply(x, m, 0)),
                                      np.array([1.0, -2.0, 0.5]) * m)


def test_bfv_decryption_refuses_another_keys_ciphertexts():
    keys, ev = make_backend("bfv")
    other, _ = make_backend("bfv")
    x = other.encrypt([1.0, 2.0])
    x.key_id = keys.key_id  # past the key-id check: the residues are noise
    with pytest.raises(CiphertextError, match="another key"):
        keys.decrypt(x)


@pytest.mark.parametrize("backend", ["plain", "fast-paillier", "mask"])
def test_a_declared_range_bounds_the_vector_and_refuses_values_outside_it(backend):
    """encrypt(values, range_bits): the vector's bound is 2^range_bits (a public
    declaration, not the data's magnitude), values at or beyond it are refused
    (OverflowError) and a range wider than the codec's is a ValueError."""
    options = dict(n_length=512, insecure=True) if backend == "fast-paillier" else {}
    keys, evaluator = make_backend(backend, frac_bits=8, **options)
    v = keys.encrypt(np.array([1.5, -1.0, 0.25]), range_bits=9)
    assert v.bound == 2 ** 9
    np.testing.assert_array_equal(keys.decrypt(v), [1.5, -1.0, 0.25])
    with pytest.raises(OverflowError, match="9 bits"):
        keys.encrypt(np.array([0.5, 2.0]), range_bits=9)
    with pytest.raises(ValueError, match="outside"):
        keys.encrypt(np.array([0.5]), range_bits=63)
    assert keys.encrypt(np.array([0.5])).bound == 2 ** keys.codec.max_bits


def test_fast_paillier_refuses_short_exponents_and_negative_headroom():
    """A random exponent shorter than twice the key's security level falls to a
    baby-step giant-step search (2^(bits/2) steps), and the plaintext with it; a negative
    headroom lets a fresh value carry into its neighbour slot. Both are refused before any
    key is made (insecure=True lets tests shorten the exponent)."""
    from crypto._fast_paillier import default_exponent_bits

    assert [default_exponent_bits(n) for n in (2048, 3072, 4096, 7680, 15360)] == \
        [224, 256, 256, 384, 512]
    with pytest.raises(ValueError, match="exponent_bits=64 is below twice the security "
                                         "level of a 2048-bit key \\(224\\)"):
        make_backend("fast-paillier", exponent_bits=64)
    with pytest.raises(ValueError, match="exponent_bits must be a whole number"):
        make_backend("fast-paillier", exponent_bits=224.5)
    with pytest.raises(ValueError, match="headroom_bits must be a whole number >= 0"):
        make_backend("fast-paillier", headroom_bits=-10)
    keys, _ = make_backend("fast-paillier", **SMALL, exponent_bits=64, headroom_bits=0)
    assert keys.decrypt(keys.encrypt([2.0**28, 1.0])).tolist() == [2.0**28, 1.0]


@pytest.mark.parametrize("label", ["paillier", "fast-paillier-packed", "bfv"])
def test_a_claimed_bound_beyond_capacity_is_refused(label):
    """The bound travels unauthenticated: one beyond what the ciphertexts hold would let
    a foreign or random ciphertext pass decryption's range check."""
    from crypto import CiphertextError

    keys, ev = _deal(label)
    x = keys.encrypt([1.5, -2.0])
    x.bound = ev.capacity * 2
    with pytest.raises(CiphertextError, match="claims values up to 2\\^.* beyond the 2\\^"):
        keys.decrypt(x)
    with pytest.raises(CiphertextError, match="claims values up to"):
        keys.refresh(x)
    x.bound = ev.capacity
    assert keys.decrypt(x).tolist() == [1.5, -2.0]


def test_multiply_takes_integers_only(backend):
    keys, ev = backend
    x = keys.encrypt([1.0])
    for bad in (1.9, np.inf, np.nan):   # inf passed as a whole float, became -2^63
        with pytest.raises(ValueError, match="multiply takes integers"):
            ev.multiply(x, bad, 0)
    with pytest.raises(OverflowError, match="multipliers beyond 64-bit integers"):
        ev.multiply(x, 2.0**64, 0)
    assert keys.decrypt(ev.multiply(x, 2.0, 0)).tolist() == [2.0]   # a whole float is one


def test_a_tampered_mask_position_costs_no_span_of_keystream():
    """A recipe position far from the others (2^31: 64 GiB of keystream for the span)
    gets its own run of keystream and fails the MAC; one past 2^32 is malformed."""
    import tracemalloc

    from crypto import CiphertextError

    keys, ev = _deal("mask")
    for position, message in ((2**31, "tampered|forged"), (2**40, "malformed")):
        x = keys.encrypt([1.0, 2.0, 3.0])
        x.payload.pos[-1] = position
        tracemalloc.start()
        with pytest.raises(CiphertextError, match=message):
            keys.decrypt(x)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < 16 * 2**20
