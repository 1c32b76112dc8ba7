"""Our own Paillier on gmpy2: packing, short-exponent randomness, CRT decryption, a pool.

Encryption (Damgard, Jurik and Nielsen, PKC 2010, section 4.2): instead of r^n mod n^2
with a fresh 2048-bit r, a fixed h_s = h^n mod n^2 (h = -x^2 mod n for a random x) is
raised to a short random exponent a: c = (1 + M n) h_s^a mod n^2. h_s^a comes from a
fixed-base windowed table (h_s^(j 2^(8i)) for every byte position i and byte value j),
so an encryption costs ceil(exponent_bits / 8) modular multiplications. The exponent has
2 x the key's security level in bits (224 at 2048 bits, 256 at 3072 and 4096, 384 from
7680, 512 from 15360; shorter is refused unless ``insecure``); its security rests
on the DCR assumption plus the short-exponent hardness that DJN and the libraries built on
it assume. Decryption uses the factors: m mod p and m mod q by two half-size
exponentiations (L_p(c^(p-1) mod p^2) h_p mod p), combined by CRT.

Packing (``slots`` > 1): k fixed-point integers v_0..v_(k-1) travel in one plaintext
M = sum_i v_i 2^(s i) (balanced digits, so negatives need no offset and sums stay exact),
with slot width s = max_bits + headroom_bits + 2. A slot holds |v| <= 2^(s-2): fresh
values use 2^max_bits of it, leaving 2^headroom_bits worth of additions; the evaluator
tracks every vector's bound and refuses (OverflowError) an add or multiply that could pass
2^(s-2), so a slot never carries into its neighbour. Decryption checks every slot
against the vector's bound and the padding slots against zero (CiphertextError), which
catches a tampered ciphertext or one of another key with overwhelming probability.
A packed ciphertext cannot be sliced homomorphically: ``take``, ``add_at`` and ``put``
move whole ciphertexts, and the protocol lays its vectors out in blocks of ``slots``
samples (``hyfdca._packing``). By default every ciphertext holds as many slots as the
modulus allows, with 64 bits of headroom: 128-bit slots, 15 per 2048-bit modulus, room for
2^48 sums of fresh values multiplied by up to 2^16 (a HyFDCA run of R rounds over K
holders needs R K <= 2^48). A caller whose values have a narrower declared range
(``KeyHolder.encrypt(..., range_bits)``) can ask for less headroom: HyFDCA's runs with a
dual box take 19 bits at 32 fractional bits (83-bit slots, 24 per modulus;
``hyfdca._encoding_range``).

Vectors of at least ``pool_threshold`` ciphertexts are encrypted and decrypted in a
process pool of ``n_jobs`` workers (client side only; each worker builds its own table).
"""

import atexit
import itertools
import multiprocessing
import os
import secrets
from concurrent.futures import ProcessPoolExecutor

import gmpy2

from crypto._fixed_point import FixedPoint
from crypto._interface import CiphertextError, KeyHolder, OpCounts
from crypto._paillier import (DEFAULT_KEYSIZE, PaillierArithmetic, check_ciphertexts,
                              check_key_size, object_array, whole)

WINDOW_BITS = 8
_ids = itertools.count()


def default_exponent_bits(n_length):
    """2 x the security level of an n_length-bit modulus (NIST SP 800-57: 112 bits under
    3072, 128 under 7680, 192 under 15360, 256 from there)."""
    for least, level in ((15360, 256), (7680, 192), (3072, 128)):
        if n_length >= least:
            return 2 * level
    return 2 * 112


def generate_primes(n_length):
    """Two distinct primes of n_length/2 bits whose product has exactly n_length bits."""
    half = n_length // 2
    while True:
        p, q = (gmpy2.next_prime(gmpy2.mpz(secrets.randbits(half)) | (3 << (half - 2)))
                for _ in range(2))
        n = p * q
        if p != q and n.bit_length() == n_length and gmpy2.gcd(n, (p - 1) * (q - 1)) == 1:
            return p, q


class _PublicContext:
    """n, n^2, h_s and the fixed-base table of h_s (built on first use)."""

    def __init__(self, n, hs, exponent_bits):
        self.n, self.nsq, self.hs = gmpy2.mpz(n), gmpy2.mpz(n) ** 2, gmpy2.mpz(hs)
        self.exponent_bits = int(exponent_bits)
        self._table = None

    def table(self):
        if self._table is None:
            rows, base, nsq = [], self.hs, self.nsq
            for _ in range(-(-self.exponent_bits // WINDOW_BITS)):
                row = [gmpy2.mpz(1), base]
                for _ in range((1 << WINDOW_BITS) - 2):
                    row.append(row[-1] * base % nsq)
                rows.append(row)
                base = row[-1] * base % nsq
            self._table = rows
        return self._table

    def encrypt(self, m):
        """(1 + m n) h_s^a mod n^2 for m in Z_n, a fresh short random exponent a."""
        nsq, table = self.nsq, self.table()
        a, r, mask = secrets.randbits(self.exponent_bits), gmpy2.mpz(1), (1 << WINDOW_BITS) - 1
        for row in table:
            digit = a & mask
            if digit:
                r = r * row[digit] % nsq
            a >>= WINDOW_BITS
        return (1 + m * self.n) * r % nsq


class _PrivateContext:
    """The factors and the CRT constants of decryption."""

    def __init__(self, p, q):
        p, q = gmpy2.mpz(p), gmpy2.mpz(q)
        self.p, self.q, self.n = p, q, p * q
        self.psq, self.qsq = p * p, q * q
        g = self.n + 1
        self.hp = gmpy2.invert((gmpy2.powmod(g, p - 1, self.psq) - 1) // p, p)
        self.hq = gmpy2.invert((gmpy2.powmod(g, q - 1, self.qsq) - 1) // q, q)
        self.p_inv_q = gmpy2.invert(p, q)

    def decrypt(self, c):
        p, q = self.p, self.q
        mp = (gmpy2.powmod(c % self.psq, p - 1, self.psq) - 1) // p * self.hp % p
        mq = (gmpy2.powmod(c % self.qsq, q - 1, self.qsq) - 1) // q * self.hq % q
        return mp + (mq - mp) * self.p_inv_q % q * p


_WORKER = {}


def _init_worker(n, hs, exponent_bits, p, q):
    _WORKER["public"] = _PublicContext(n, hs, exponent_bits)
    _WORKER["private"] = _PrivateContext(p, q)


def _encrypt_chunk(ms):
    public = _WORKER["public"]
    return [public.encrypt(m) for m in ms]


def _decrypt_chunk(cs):
    private = _WORKER["private"]
    return [private.decrypt(c) for c in cs]


class FastPaillierEvaluator(PaillierArithmetic):
    """Server side: n, n^2 and the slot layout; no factor of n."""

    def __init__(self, n, slots, slot_bits, counts):
        super().__init__(f"fast-paillier-{int(n) % 10**12:012d}-{next(_ids)}", n, counts)
        self.slots, self.slot_bits = int(slots), int(slot_bits)
        if self.slots > 1:
            self.capacity = 1 << (self.slot_bits - 2)


class FastPaillierKeyHolder(KeyHolder):
    def __init__(self, codec, evaluator, public, private, n_jobs=1, pool_threshold=256):
        super().__init__(codec, evaluator)
        self.slots = evaluator.slots
        self._public, self._private = public, private
        self.n_jobs = os.cpu_count() if n_jobs is None else int(n_jobs)
        self.pool_threshold = int(pool_threshold)
        self._pool = None

    # --- packing ----------------------------------------------------------------------

    def _pack(self, ints):
        n, k, s = self._public.n, self.slots, self.evaluator.slot_bits
        if k == 1:
            return [gmpy2.mpz(int(v)) % n for v in ints]
        out = []
        values = [int(v) for v in ints]
        for start in range(0, len(values), k):
            m = 0
            for v in reversed(values[start:start + k]):
                m = (m << s) + v
            out.append(gmpy2.mpz(m) % n)
        return out

    def _unpack(self, plain, vector):
        n, k, s, bound = self._public.n, self.slots, self.evaluator.slot_bits, vector.bound
        half, full, low = n // 2, 1 << s, (1 << s) - 1
        signed = [int(m - n) if m > half else int(m) for m in plain]
        if k == 1:
            values = signed
        else:
            values = []
            for m in signed:
                for _ in range(k):
                    r = m & low
                    if r >= full >> 1:
                        r -= full
                    values.append(r)
                    m = (m - r) >> s
                if m:
                    raise CiphertextError("a packed ciphertext decrypts beyond its slots: it "
                                          "was tampered with or made under another key")
            if any(values[len(vector):]):
                raise CiphertextError("a packed ciphertext has non-zero padding slots: it was "
                                      "tampered with or made under another key")
            values = values[:len(vector)]
        if values and max(abs(v) for v in values) > bound:
            raise CiphertextError(
                f"a ciphertext decrypts outside the range its operations allow (|x| < "
                f"2^{bound.bit_length()} encoded): it was tampered with or made under another "
                f"key (or a packed slot overflowed)")
        return object_array(values)

    # --- encryption and decryption ----------------------------------------------------

    def _map(self, chunk_function, local, items):
        if self.n_jobs > 1 and len(items) >= self.pool_threshold:
            pool = self._get_pool()
            chunks = [items[i::self.n_jobs] for i in range(self.n_jobs)]
            results = list(pool.map(chunk_function, chunks))
            out = [None] * len(items)
            for i, part in enumerate(results):
                out[i::self.n_jobs] = part
            return out
        return [local(x) for x in items]

    def _get_pool(self):
        if self._pool is None:
            pub, priv = self._public, self._private
            self._pool = ProcessPoolExecutor(
                self.n_jobs, mp_context=multiprocessing.get_context("spawn"),
                initializer=_init_worker,
                initargs=(pub.n, pub.hs, pub.exponent_bits, priv.p, priv.q))
            atexit.register(self._pool.shutdown)
        return self._pool

    def close(self):
        """Shut the process pool down (it restarts on demand)."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def _encrypt(self, ints):
        packed = self._pack(ints)
        return object_array(self._map(_encrypt_chunk, self._public.encrypt, packed))

    def _decrypt(self, vector):
        expected = -(-len(vector) // self.slots)
        cs = check_ciphertexts(vector.payload, expected, self._public.n, self._public.nsq)
        plain = self._map(_decrypt_chunk, self._private.decrypt, cs)
        return self._unpack(plain, vector)

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_pool"] = None
        return state


def fast_paillier_backend(n_length=DEFAULT_KEYSIZE, frac_bits=32, insecure=False,
                          slots="auto", headroom_bits=64, exponent_bits=None, n_jobs=1,
                          pool_threshold=256, codec=None):
    """(KeyHolder for clients, Evaluator for the server) under a fresh key.

    Parameters
    ----------
    n_length : int, default=2048
        Modulus bits; under 2048 refused unless ``insecure=True`` (tests only).
    slots : int or "auto", default="auto"
        Values per ciphertext; "auto" packs as many as the modulus holds.
    headroom_bits : int, default=64
        Extra bits per slot: about 2^headroom_bits additions of fresh values fit.
    exponent_bits : int, optional
        Bits of the DJN random exponent (default 2 x the security level).
    n_jobs : int or None, default=1
        Worker processes for long vectors (None: one per CPU).
    """
    n_length = check_key_size(n_length, insecure)
    codec = FixedPoint(frac_bits) if codec is None else codec
    least = default_exponent_bits(n_length)
    exponent_bits = least if exponent_bits is None else exponent_bits
    if not whole(exponent_bits) or not 64 <= exponent_bits <= n_length:
        raise ValueError(f"exponent_bits must be a whole number in 64..{n_length}, got "
                         f"{exponent_bits!r}")
    if exponent_bits < least and not insecure:
        raise ValueError(f"exponent_bits={exponent_bits} is below twice the security level "
                         f"of a {n_length}-bit key ({least}): a baby-step giant-step "
                         f"search finds a short exponent in 2^(bits/2) steps, and with it "
                         f"the plaintext; pass insecure=True only in tests")
    if not whole(headroom_bits) or headroom_bits < 0:
        raise ValueError(f"headroom_bits must be a whole number >= 0, got {headroom_bits!r}")
    p, q = generate_primes(n_length)
    n = p * q
    while True:
        x = gmpy2.mpz(secrets.randbelow(int(n) - 2) + 2)
        if gmpy2.gcd(x, n) == 1:
            break
    hs = gmpy2.powmod(-x * x % n, n, n * n)
    slot_bits = codec.max_bits + int(headroom_bits) + 2
    most = (n_length - 2) // slot_bits
    slots = most if slots == "auto" else int(slots)
    if not 1 <= slots <= max(most, 1):
        raise ValueError(f"a {n_length}-bit modulus holds 1..{most} slots of {slot_bits} "
                         f"bits, got slots={slots}")
    evaluator = FastPaillierEvaluator(n, slots, slot_bits, OpCounts())
    public = _PublicContext(n, hs, exponent_bits)
    keys = FastPaillierKeyHolder(codec, evaluator, public, _PrivateContext(p, q),
                                 n_jobs=n_jobs, pool_threshold=pool_threshold)
    return keys, evaluator
