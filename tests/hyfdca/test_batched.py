"""Batched engine: the message protocol's iterates bit for bit, without dense N x d arrays."""

import shutil
import sys
import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp
from numba import njit

import _cuda_on_cpu

from feddata import partition as P
from hyfdca import BatchedHyFDCA
from hyfdca._batched_kernels import _sort_small
from hyfdca._pairwise_sum import pairwise_sum
from hyfdca._draws import (_below, draw_into, draw_positions, round_key, sample_units,
                           stream_key)
from hyfdca import HyFDCARun, run_hyfdca
from hyfdca._protocol import CRYPTO_FIELDS
from hyfdca import HyFDCASettings

LAM = 0.05


@pytest.fixture(scope="module")
def small(cancer):
    X, y = cancer
    return X[:240], y[:240]


@pytest.fixture(scope="module")
def digits_binary():
    from sklearn.datasets import load_digits
    X, y = load_digits(return_X_y=True)
    return X[:300] / 16.0, np.where(y[:300] % 2 == 0, 1.0, -1.0)


def partitions(X, y):
    return {
        "horizontal": P.horizontal(X, y, 3),
        "vertical": P.vertical(X, y, 3),
        "hybrid": P.hybrid_grid(X, y, 3, 3),
        "dealt": P.partition_from_spec(X, y, "dealt:2x3", seed=2),
        "explicit-overlapping": P.from_blocks(X, y, [(range(130), range(20)),
                                                     (range(110, 240), range(30)),
                                                     (range(240), range(15, 30))]),
    }


def assert_same_run(fed, settings, rounds=5, seed=1, frac_bits=32, moves=True,
                    global_columns=None):
    """Step both engines side by side; every round: step, round trips, the plain backend's
    operation counts, server alpha (integers), each client's alpha, w; the certificate
    midway and at the end, and what each cost (round trips, messages, operations)."""
    a = HyFDCARun(fed, settings, seed=seed, frac_bits=frac_bits)
    b = BatchedHyFDCA(fed, settings, seed=seed, frac_bits=frac_bits,
                      global_columns=global_columns)
    moved = False
    operations = 0
    for t in range(rounds):
        ra, rb = a.step(), b.step()
        assert (ra["step"], ra["available"], ra["rtc"]) == (rb["step"], rb["available"],
                                                            rb["rtc"]), t
        counts = {f: (ra[f], rb[f]) for f in CRYPTO_FIELDS}
        assert all(x == y for x, y in counts.values()), (t, counts)
        operations += ra["encrypt"] + ra["decrypt"]
        np.testing.assert_array_equal(b.duals.enc_alpha, a.server.enc_alpha.payload,
                                      err_msg=str(t))
        np.testing.assert_array_equal(b.w, a.server.w, err_msg=f"w, round {t}")
        for k, client in enumerate(a.clients):
            np.testing.assert_array_equal(b.client_alpha(k),
                                          client.settled_alpha(a.server.client_step[k]))
        moved |= bool(np.any(b.duals.enc_alpha))
        if t == rounds // 2:
            assert a.certificate()[:2] == b.certificate()[:2], t
    assert moved == moves  # the comparison saw iterates that move
    assert operations > 0 or not moves  # and operations to count
    pa, pb = a.certificate(), b.certificate()
    assert pa[:2] == pb[:2]
    np.testing.assert_array_equal(pa[2], pb[2])
    counted = ("round", "available", "rtc", "messages_down", "messages_up", *CRYPTO_FIELDS)
    assert [{f: c[f] for f in counted} for c in a.certificate_costs] == \
        [{f: c[f] for f in counted} for c in b.certificate_costs]


@pytest.mark.parametrize("name", ["horizontal", "vertical", "hybrid", "dealt",
                                  "explicit-overlapping"])
@pytest.mark.parametrize("participation, variant, aggregation", [
    ("full", "auto", None), ("full", "paper", None), ("fraction", "auto", None),
    ("fraction", "combined", "consistent"), ("cyclic", "rho", None),
    ("fraction", "line-search", None)])
def test_bit_identical_to_the_message_protocol(small, name, participation, variant,
                                               aggregation):
    settings = HyFDCASettings.from_variant(variant, lam=LAM, H=30, participation=participation,
                                           fraction=0.6, aggregation=aggregation)
    # consistent rule on vertical data with 2 of 3 clients: no sample is ever complete
    moves = not (name == "vertical" and aggregation == "consistent")
    assert_same_run(partitions(*small)[name], settings, moves=moves)


@pytest.mark.parametrize("name", ["vertical", "hybrid", "dealt", "explicit-overlapping"])
@pytest.mark.parametrize("participation, variant, aggregation, draw", [
    ("full", "auto", None, "permuted"), ("fraction", "auto", None, "permuted"),
    ("fraction", "combined", "consistent", "random"), ("cyclic", "paper", None, "random")])
def test_bit_identical_with_block_draws(small, name, participation, variant, aggregation,
                                        draw):
    """draw_block = 4 (units from hyfdca._packing, draws from hyfdca._draws): both engines
    draw the same whole blocks, under every eligibility rule, bit for bit."""
    settings = HyFDCASettings.from_variant(variant, lam=LAM, H=30, participation=participation,
                                           fraction=0.6, aggregation=aggregation, draw=draw,
                                           draw_block=4)
    moves = not (name == "vertical" and aggregation == "consistent")
    assert_same_run(partitions(*small)[name], settings, moves=moves)


@pytest.mark.parametrize("name", ["horizontal", "hybrid", "dealt"])
@pytest.mark.parametrize("participation, variant", [
    ("full", "auto"), ("fraction", "auto"), ("fraction", "line-search"), ("cyclic", "paper")])
def test_bit_identical_with_a_capped_step(small, name, participation, variant):
    """step_cap is decided in hyfdca._round only; both engines follow it bit for bit."""
    settings = HyFDCASettings.from_variant(variant, lam=LAM, H=30, participation=participation,
                                           fraction=0.6, step_cap=0.375)
    assert_same_run(partitions(*small)[name], settings)


@pytest.mark.parametrize("name", ["horizontal", "hybrid", "dealt"])
@pytest.mark.parametrize("participation", ["full", "fraction"])
def test_bit_identical_with_a_relaxed_line_search(small, name, participation):
    """line_search_relax is decided in hyfdca._round only; both engines follow it."""
    settings = HyFDCASettings.from_variant("line-search", lam=LAM, H=30,
                                           participation=participation, fraction=0.6,
                                           line_search_relax=0.6)
    assert_same_run(partitions(*small)[name], settings)


def test_a_relaxed_step_is_theta_times_the_exact_step(small):
    fed = partitions(*small)["hybrid"]
    exact, relaxed = (BatchedHyFDCA(fed, HyFDCASettings.from_variant(
        "line-search", lam=LAM, H=30, line_search_relax=theta), seed=1).step()["step"]
        for theta in (1.0, 0.6))
    assert 0 < exact < 1   # an interior step, so the relaxation shows
    assert relaxed == pytest.approx(0.6 * exact, abs=2.0 ** -15)


@pytest.mark.parametrize("name", ["horizontal", "vertical", "hybrid", "explicit-overlapping"])
@pytest.mark.parametrize("participation, variant", [
    ("full", "auto"), ("fraction", "auto"), ("cyclic", "auto"), ("fraction", "paper")])
def test_bit_identical_with_the_proximal_outer_loop(small, name, participation, variant):
    """prox > 0: mu = lam + kappa in the rounds, the centre moved by hyfdca._round every
    prox_rounds rounds (here 3 times in 8 rounds), the certificate's proximal iterate:
    both engines bit for bit."""
    settings = HyFDCASettings.from_variant(variant, lam=LAM, H=30, participation=participation,
                                           fraction=0.6, prox=0.2, prox_rounds=2)
    assert_same_run(partitions(*small)[name], settings, rounds=8)


@pytest.mark.parametrize("name", ["hybrid", "explicit-overlapping"])
@pytest.mark.parametrize("participation", ["fraction", "cyclic"])
def test_bit_identical_with_phase_e_after_the_centre_moves(small, name, participation):
    """Phase E (second_inner_product) sends the parts at the w after the proximal
    centre's move, the w the next round starts from: both engines bit for bit."""
    settings = HyFDCASettings.from_variant("auto", lam=LAM, H=30, participation=participation,
                                           fraction=0.6, prox=0.2, prox_rounds=2,
                                           second_inner_product=True)
    assert_same_run(partitions(*small)[name], settings, rounds=8)


@pytest.mark.parametrize("name", ["hybrid", "dealt", "explicit-overlapping"])
@pytest.mark.parametrize("participation", ["full", "fraction", "cyclic"])
def test_bit_identical_with_the_scaled_line_search(small, name, participation):
    """curvature_scaling (two more secure sums, decided in hyfdca._round): both engines
    follow it bit for bit."""
    settings = HyFDCASettings.from_variant("scaled-line-search", lam=LAM, H=30,
                                           participation=participation, fraction=0.6)
    assert_same_run(partitions(*small)[name], settings)


@pytest.mark.parametrize("name", ["hybrid", "dealt", "explicit-overlapping"])
@pytest.mark.parametrize("variant", ["auto-full", "auto-partial", "scaled-line-search",
                                     "capped-line-search"])
def test_bit_identical_with_norm_share_weights(small, name, variant):
    """holder_weights="norm-share" (the weights come from hyfdca._round): both engines
    follow it bit for bit, under full and partial participation."""
    participation = "full" if variant == "auto-full" else "fraction"
    settings = HyFDCASettings.from_variant(variant, lam=LAM, H=30, fraction=0.6,
                                           participation=participation,
                                           holder_weights="norm-share")
    assert_same_run(partitions(*small)[name], settings)


def test_the_holder_weights_reach_the_engines_and_change_the_run(small):
    """Both engines scale each holder's dalpha by _round.aggregation_weights; norm-share
    and equal weights give different iterates on a hybrid split."""
    from hyfdca import HyFDCARun
    from hyfdca._round import aggregation_weights

    fed = partitions(*small)["hybrid"]
    runs = {}
    for rule in ("equal", "norm-share"):
        settings = HyFDCASettings.from_variant("auto-full", lam=LAM, H=30,
                                               holder_weights=rule)
        run = BatchedHyFDCA(fed, settings, seed=0)
        B = run.blocks
        expected = aggregation_weights(rule, fed.holder_counts[B.hold_sample], B.q,
                                       B.partial_sq, run.frac_bits)
        np.testing.assert_array_equal(B.update_weight, expected)
        message_run = HyFDCARun(fed, settings, seed=0)
        for k, client in enumerate(message_run.clients):
            np.testing.assert_array_equal(
                client.update_weight, expected[B.row_off[k]:B.row_off[k + 1]])
        for _ in range(3):
            run.step()
        runs[rule] = run.alpha.copy()
    assert not np.array_equal(runs["equal"], runs["norm-share"])


def test_a_capped_step_is_the_step_taken(small):
    fed = partitions(*small)["hybrid"]
    capped = HyFDCASettings.from_variant("paper", lam=LAM, H=30, step_cap=0.375)
    run = BatchedHyFDCA(fed, capped, seed=1)
    assert [run.step()["step"] for _ in range(3)] == [0.375] * 3
    free, capped = ([r["step"] for r in run_hyfdca(fed, HyFDCASettings.from_variant(
        "line-search", lam=LAM, H=30, step_cap=cap), max_rounds=8)[1].rounds]
        for cap in (1.0, 0.25))
    assert max(free) > 0.25 and max(capped) == 0.25   # the cap binds where g* is larger
    assert capped[0] == free[0] < 0.25                # and leaves smaller steps alone
    with pytest.raises(ValueError, match=r"step_cap must be in \[2\^-16, 1\] .* got 1.5"):
        HyFDCASettings.from_variant("paper", step_cap=1.5)


@pytest.mark.parametrize("name", ["horizontal", "hybrid", "dealt", "explicit-overlapping"])
@pytest.mark.parametrize("participation", ["full", "fraction"])
def test_bit_identical_without_global_column_ids(small, name, participation):
    """The inner products read through each client's feature ids (and gather w onto J_k
    for long rows) where the engine keeps no global column ids: the same bits."""
    settings = HyFDCASettings.from_variant("auto", lam=LAM, H=30, participation=participation,
                                           fraction=0.6)
    assert_same_run(partitions(*small)[name], settings, global_columns=False)


def test_global_column_ids_are_kept_for_small_feature_windows_only():
    from hyfdca._batched import GLOBAL_COLUMNS_MAX_WINDOW
    X = sp.random(40, 2 * GLOBAL_COLUMNS_MAX_WINDOW + 2, density=0.01, format="csr",
                  random_state=0)
    X = sp.hstack([X, sp.csr_matrix(np.ones((40, 1)))], format="csr")  # no empty rows
    y = np.where(np.arange(40) % 2 == 0, 1.0, -1.0)
    settings = HyFDCASettings.from_variant("auto", lam=LAM)
    wide = BatchedHyFDCA(P.vertical(X, y, 2), settings)  # windows of 4,097 and 4,098
    narrow = BatchedHyFDCA(P.vertical(X, y, 4), settings)  # windows of ~2,049
    assert wide.blocks.gcol.size == 0
    np.testing.assert_array_equal(
        narrow.blocks.gcol,
        np.concatenate([b.feature_ids[b.X.indices] for b in narrow.dataset.blocks]))
    forced = BatchedHyFDCA(P.vertical(X, y, 2), settings, global_columns=True)
    assert forced.blocks.gcol.size == X.nnz


@pytest.mark.parametrize("loss", ["squared", "smoothed_hinge", "squared_hinge", "logistic"])
def test_bit_identical_for_every_loss(small, loss):
    X, y = small
    line_search = loss != "logistic"
    settings = HyFDCASettings.from_variant("rho", loss=loss, lam=LAM, H=25,
                                           line_search=line_search)
    assert_same_run(P.hybrid_grid(X, y, 2, 2), settings)


@pytest.mark.parametrize("overrides", [
    dict(sampling="independent", draw="random"), dict(second_inner_product=True),
    dict(variant="sigma-safe", participation="fraction", fraction=0.5),
    dict(variant="paper", participation="cyclic", fraction=0.3, iic=0.2)])
def test_bit_identical_options(small, overrides):
    X, y = small
    overrides = dict(dict(variant="auto", lam=LAM, H=20), **overrides)
    if "iic" in overrides:
        overrides.pop("H")
    settings = HyFDCASettings.from_variant(overrides.pop("variant"), **overrides)
    assert_same_run(P.hybrid_grid(X, y, 3, 2), settings)


@pytest.mark.parametrize("frac_bits", [20, 40])
def test_bit_identical_at_other_precisions(small, frac_bits):
    X, y = small
    settings = HyFDCASettings.from_variant("auto", lam=LAM, H=30, participation="fraction",
                                           fraction=0.5)
    assert_same_run(P.hybrid_grid(X, y, 3, 2), settings, frac_bits=frac_bits)


@pytest.mark.parametrize("participation", ["full", "fraction"])
def test_bit_identical_on_image_quadrants(digits_binary, participation):
    X, y = digits_binary
    fed = P.partition_from_spec(X, y, "quadrants:12", image_shape=(8, 8), seed=0)
    settings = HyFDCASettings.from_variant("auto", lam=LAM, participation=participation,
                                           fraction=0.5)
    assert_same_run(fed, settings, rounds=4)


def test_run_hyfdca_engines_agree(small):
    X, y = small
    fed = P.hybrid_grid(X, y, 2, 2)
    settings = HyFDCASettings.from_variant("auto", lam=LAM, H=30)
    a, ha = run_hyfdca(fed, settings, max_rounds=6, eval_every=2, seed=5)
    b, hb = run_hyfdca(fed, settings, max_rounds=6, eval_every=2, seed=5, engine="batched")
    assert ha.evaluations == hb.evaluations
    assert [r["rtc"] for r in ha.rounds] == [r["rtc"] for r in hb.rounds]
    np.testing.assert_array_equal(a.model, b.model)


def test_refuses_what_it_does_not_replicate(small):
    X, y = small
    fed = P.hybrid_grid(X, y, 2, 2)
    with pytest.raises(ValueError, match="logistic loss with the line search"):
        BatchedHyFDCA(fed, HyFDCASettings.from_variant("auto", loss="logistic", lam=LAM, H=5))
    settings = HyFDCASettings.from_variant("auto", lam=LAM, H=5)
    with pytest.raises(ValueError, match="crypto='plain'"):
        run_hyfdca(fed, settings, max_rounds=1, crypto="mask", engine="batched")
    with pytest.raises(ValueError, match="engine must be one of"):
        run_hyfdca(fed, settings, max_rounds=1, engine="fast")
    with pytest.raises(ValueError, match="backend must be one of"):
        BatchedHyFDCA(fed, settings, backend="tpu")


def test_bit_identical_with_an_empty_sample(small):
    """q_i = 0 (a sample with no non-zero feature): the hinge step takes its maximiser."""
    X, y = small
    Xz = X.copy()
    Xz[7] = 0.0
    assert_same_run(P.hybrid_grid(Xz, y, 2, 2), HyFDCASettings.from_variant("auto", lam=LAM,
                                                                            H=30))


def test_overflow_is_an_error_that_says_diverged(small):
    X, y = small
    settings = HyFDCASettings.from_variant("paper", loss="squared", lam=1e-3, H=200)
    with pytest.raises(OverflowError, match="diverged"):
        run_hyfdca(P.hybrid_grid(X, y, 3, 3), settings, max_rounds=300, eval_every=1000,
                   engine="batched")


@pytest.mark.parametrize("parts,refused", [
    ((0.84, 0.84, 0.84, 0.84), True),    # int64 would wrap past 2^63 and land in range
    ((0.75, 0.75, -0.75), True),         # the second partial sum leaves the range
    ((0.75, -0.75, 0.75), False),        # no partial sum does
])
def test_holder_parts_are_summed_with_every_addition_checked(parts, refused):
    """Each holder's part x_i^k . w fits the codec (|encoded| < 2^62); the batched engine
    refuses the sum wherever the message protocol's backend refuses one of its additions
    (in holder order), and an int64 sum never wraps back into range."""
    N = 8
    X, y = np.ones((N, len(parts))), np.where(np.arange(N) % 2 == 0, 1.0, -1.0)
    fed = P.vertical(X, y, len(parts))
    settings = HyFDCASettings.from_variant("paper", lam=0.1, H=N)
    w = np.array(parts) * 2.0 ** 62 / 2.0 ** 32   # encoded parts at these shares of 2^62
    assert _refused_by_each_engine(fed, settings, w) == [refused, refused]


def _refused_by_each_engine(fed, settings, w):
    """[message engine refused, batched engine refused] a round from the server's w."""
    outcomes = []
    for run in (HyFDCARun(fed, settings, seed=0), BatchedHyFDCA(fed, settings, seed=0)):
        (run.server if isinstance(run, HyFDCARun) else run).w[:] = w
        try:
            run.step()
            outcomes.append(False)
        except OverflowError:
            outcomes.append(True)
    return outcomes


def test_a_sum_just_under_2_62_is_refused_as_the_plain_codec_refuses_it():
    """Parts 2^62 - 2^40 and 2^40 - 128 (encoded) add up to 2^62 - 128, which the plain
    codec's check reads as 2^62 in float64 and refuses: the batched engine too."""
    N = 8
    X, y = np.ones((N, 2)), np.where(np.arange(N) % 2 == 0, 1.0, -1.0)
    w = np.array([2.0 ** 30 - 2.0 ** 8, 2.0 ** 8 - 2.0 ** -25])   # parts x 2^32
    settings = HyFDCASettings.from_variant("paper", lam=0.1, H=N)
    assert _refused_by_each_engine(P.vertical(X, y, 2), settings, w) == [True, True]

def _cupy_or_skip():
    try:
        import cupy
        if cupy.cuda.runtime.getDeviceCount() < 1:
            raise RuntimeError("no device")
    except Exception as err:  # ImportError, CUDA driver errors
        pytest.skip(f"backend='cupy' tests need CuPy and a CUDA GPU ({type(err).__name__}: "
                    f"{err})")


@pytest.mark.parametrize("name", ["horizontal", "hybrid", "explicit-overlapping"])
@pytest.mark.parametrize("participation", ["full", "fraction"])
def test_cupy_backend_gives_the_same_bits(small, name, participation):
    _cupy_or_skip()
    _assert_cupy_matches_numba(partitions(*small)[name], participation)


def _assert_cupy_matches_numba(fed, participation, loss="hinge"):
    settings = HyFDCASettings.from_variant("auto", lam=LAM, H=30, participation=participation,
                                           fraction=0.6, loss=loss)
    a = BatchedHyFDCA(fed, settings, seed=2)
    b = BatchedHyFDCA(fed, settings, seed=2, backend="cupy")
    for t in range(5):
        assert a.step()["step"] == b.step()["step"]
        np.testing.assert_array_equal(a.duals.enc_alpha, b.duals.enc_alpha, err_msg=str(t))
        np.testing.assert_array_equal(a.w, b.w, err_msg=str(t))


def test_cupy_backend_says_what_it_needs(small):
    try:
        import cupy  # noqa: F401
    except ImportError:
        X, y = small
        settings = HyFDCASettings.from_variant("auto", lam=LAM, H=5)
        with pytest.raises(ImportError, match="needs CuPy and a CUDA GPU"):
            BatchedHyFDCA(P.hybrid_grid(X, y, 2, 2), settings, backend="cupy")
    else:
        pytest.skip("CuPy is installed: the missing-CuPy error cannot be shown here")


def test_draws_are_passes_of_permutations_and_reproducible():
    ten, five = sample_units(10), sample_units(5)
    a = draw_positions((3, 1, 0), 7, ten, None, 25, permuted=True)
    for start in (0, 10):
        assert sorted(a[start:start + 10]) == list(range(10))
    assert np.array_equal(a, draw_positions((3, 1, 0), 7, ten, None, 25, permuted=True))
    assert not np.array_equal(a, draw_positions((3, 1, 0), 8, ten, None, 25, permuted=True))
    counts = np.bincount(draw_positions((0, 2, 4), 0, five, None, 5000, permuted=False),
                         minlength=5)
    assert counts.min() > 900  # uniform: about 1000 each


def test_block_draws_take_whole_units_in_a_random_order():
    """Units of 3 (one short, as a holder set's last block): a draw is whole units but the
    last, cut at H; a permuted draw of every position is one pass; the order is shuffled
    (not unit after unit); only the candidate units are drawn; the same key, the same
    draw."""
    units = np.array([[0, 2, 5], [1, 3, 4], [6, 7, -1], [8, -1, -1]])
    unit_of = {p: u for u, row in enumerate(units) for p in row if p >= 0}
    sizes = (units >= 0).sum(axis=1)
    contiguous = 0
    for round_ in range(50):
        a = draw_positions((3, 1, 0), round_, units, None, 7, permuted=True)
        assert len(set(a)) == 7
        taken = np.bincount([unit_of[p] for p in a], minlength=4)
        assert np.sum((taken > 0) & (taken < sizes)) <= 1  # whole units but the last
        runs = 1 + sum(unit_of[a[t]] != unit_of[a[t - 1]] for t in range(1, 7))
        contiguous += runs == np.count_nonzero(taken)  # each unit in one run
    assert contiguous < 10  # visited unit after unit in few draws only
    one_pass = draw_positions((3, 1, 0), 7, units, None, 9, permuted=True)
    assert sorted(one_pass) == list(range(9))
    assert np.array_equal(one_pass, draw_positions((3, 1, 0), 7, units, None, 9, True))
    some = draw_positions((3, 1, 0), 7, units, np.array([1, 3]), 40, permuted=False)
    assert set(some) == {1, 3, 4, 8}
    wide = np.arange(8).reshape(1, 8)  # a unit wider than H: a random part of it each round
    seen = set().union(*(draw_positions((3, 1, 0), r, wide, None, 3, True) for r in range(20)))
    assert seen == set(range(8))


@njit
def _fisher_yates_reference(key, round_, n, H):
    """Forward Fisher-Yates on a fresh identity each pass (O(n) a pass)."""
    state = round_key(key, round_)
    out = np.empty(H, dtype=np.int64)
    filled = 0
    while filled < H:
        need = min(n, H - filled)
        perm = np.arange(n)
        for i in range(min(need, n - 1)):
            state, j = _below(state, n - i)
            j += i
            perm[i], perm[j] = perm[j], perm[i]
        out[filled:filled + need] = perm[:need]
        filled += need
    return out


def test_permuted_draws_undo_their_swaps_and_match_fisher_yates():
    """The O(H) pass (swaps undone in the shared scratch) draws what a fresh Fisher-Yates
    pass draws, and leaves the scratch as the identity for the next client."""
    rng = np.random.default_rng(0)
    scratch = np.arange(64, dtype=np.int64)
    for trial in range(300):
        n, H = int(rng.integers(1, 50)), int(rng.integers(1, 130))
        key = stream_key((trial, 1, 2))
        out = np.empty(H, dtype=np.int64)
        draw_into(key, trial, n, H, True, out, scratch)
        np.testing.assert_array_equal(out, _fisher_yates_reference(key, trial, n, H))
        np.testing.assert_array_equal(scratch, np.arange(64))


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 128, 129, 1000, 4099])
def test_pairwise_sum_is_numpy_sum(n):
    rng = np.random.default_rng(n)
    a = rng.normal(size=n + 3) * 10.0 ** rng.uniform(-5, 5, size=n + 3)  # rounding matters
    assert pairwise_sum(a, 3, n) == np.sum(a[3:3 + n])


def test_sort_small_sorts_the_range_and_nothing_else():
    rng = np.random.default_rng(4)
    for n in list(range(0, 20)) + [17, 40, 100]:
        a = rng.integers(0, 50, size=n + 6)
        expected = a.copy()
        expected[3:3 + n] = np.sort(a[3:3 + n])
        _sort_small(a, 3, 3 + n)
        np.testing.assert_array_equal(a, expected, err_msg=str(n))


def test_no_dense_n_by_d_d_by_k_or_n_by_k_state():
    """A 10x10 grid on 2,000 x 5,000 data with 20,000 non-zeros (N d = 10^7, d K = 5 10^5,
    N K = 2 10^5): every engine array is at most a few times the holdings (client-sample
    and client-feature pairs), and a round allocates little beyond the engine's state."""
    rng = np.random.default_rng(0)
    N, d = 2000, 5000
    X = sp.random(N, d, density=0.002, random_state=rng, format="csr")
    y = np.where(rng.random(N) < 0.5, 1.0, -1.0)
    fed = P.hybrid_grid(X, y, 10, 10)
    K = fed.n_clients
    settings = HyFDCASettings.from_variant("auto", lam=1e-3, H=50)
    warm = BatchedHyFDCA(fed, settings)  # load the compiled kernels outside the trace
    warm.step(), warm.step(), warm.certificate()
    del warm
    tracemalloc.start()
    run = BatchedHyFDCA(fed, settings)
    for _ in range(3):
        run.step()
    run.certificate()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    arrays = run.state_arrays()
    # buf: 3 x holdings
    limit = 3 * (max(X.nnz, run.duals.alpha_loc.size, run.blocks.hold_feat.size, N, d) + 1)
    assert limit < min(N * d, d * K, N * K)
    assert max(a.size for a in arrays) <= limit
    state = sum(a.nbytes for a in arrays)
    assert peak < 1.5 * state


@pytest.fixture
def cuda_on_cpu(monkeypatch):
    """``import cupy`` gives tests/hyfdca/_cuda_on_cpu (the CUDA source run as C)."""
    if shutil.which("gcc") is None:
        pytest.skip("the CUDA-on-CPU check compiles the kernels with gcc, not found")
    monkeypatch.setitem(sys.modules, "cupy", _cuda_on_cpu)
    sys.modules.pop("hyfdca._cupy_kernels", None)
    yield
    sys.modules.pop("hyfdca._cupy_kernels", None)  # not kept with the stand-in's cupy


@pytest.mark.parametrize("name", ["horizontal", "hybrid", "explicit-overlapping"])
@pytest.mark.parametrize("participation", ["full", "fraction"])
def test_cupy_kernels_run_as_c_give_the_same_bits(small, cuda_on_cpu, name, participation):
    """The CuPy backend's CUDA source, compiled as C and run on the CPU thread by thread,
    against the Numba kernels (no GPU needed; see _cuda_on_cpu for what this leaves out)."""
    _assert_cupy_matches_numba(partitions(*small)[name], participation)


@pytest.mark.parametrize("loss", ["smoothed_hinge", "squared_hinge", "squared"])
def test_cupy_kernels_run_as_c_every_loss(small, cuda_on_cpu, loss):
    _assert_cupy_matches_numba(partitions(*small)["hybrid"], "fraction", loss)


def test_the_engine_leaves_the_callers_dataset_alone_unless_asked(small):
    fed = partitions(*small)["hybrid"]
    before = [(b.X.data, b.X.indices, b.feature_ids, b.X.data.copy()) for b in fed.blocks]
    settings = HyFDCASettings.from_variant("auto", lam=LAM, H=30)
    run = BatchedHyFDCA(fed, settings)
    run.step()
    for b, (data, indices, features, values) in zip(fed.blocks, before):
        assert b.X.data is data and b.X.indices is indices and b.feature_ids is features
        np.testing.assert_array_equal(b.X.data, values)
    BatchedHyFDCA(fed, settings, share_storage=True)   # opt-in: views of the engine's arrays
    assert all(b.X.data is not data for b, (data, *_) in zip(fed.blocks, before))
    for b, (_, _, _, values) in zip(fed.blocks, before):
        np.testing.assert_array_equal(b.X.data, values)
