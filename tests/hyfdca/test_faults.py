"""Faults: lost, duplicated or forged shares are named errors, never convergence."""

import numpy as np
import pytest

from crypto import SecureSumError, masked_total
from feddata import History, partition as P
from hyfdca import (CertificateError, FaultyTransport, HyFDCARun, HyFDCASettings,
                    InProcessTransport, MissingReplies, run_hyfdca)
from hyfdca import _client
from hyfdca._certificate import POINT_STEPS, sums_layout
from hyfdca._run import train
from server_accounting import assert_w_accounts_for_each_client  # beside this file


@pytest.fixture(scope="module")
def grid(cancer):
    X, y = cancer
    return P.hybrid_grid(X[:240], y[:240], 2, 2)


def settings(**kw):
    return HyFDCASettings.from_variant("auto", loss="hinge", lam=0.05, **kw)


class TamperingTransport(InProcessTransport):
    """In-process delivery, except that ``tamper(phase, k, reply)`` may drop a reply
    (return None) or change it."""

    def __init__(self, clients, evaluator, record=False, tamper=None):
        super().__init__(clients, evaluator, record)
        self.tamper = tamper

    def exchange(self, phase, clients, build, receive):
        def deliver(k, reply):
            reply = self.tamper(phase, k, reply)
            if reply is not None:
                receive(k, reply)
        super().exchange(phase, clients, build, deliver)


def tampering(tamper):
    return lambda clients, evaluator, record: TamperingTransport(clients, evaluator, record,
                                                                 tamper)


def test_a_lost_certificate_share_is_an_error_not_convergence(grid):
    """A transport that silently loses a reply: the run names it (MissingReplies); the
    secure sum itself would refuse the incomplete shares too (SecureSumError)."""
    lose = tampering(lambda phase, k, reply: None
                     if phase.startswith("certificate: loss") and k == 2 else reply)
    run = HyFDCARun(grid, settings(), crypto="mask", transport=lose)
    with pytest.raises(MissingReplies, match=r"'certificate: loss and conjugate sums': no "
                                             r"reply from client\(s\) \[2\]"):
        run.certificate()
    with pytest.raises(SecureSumError, match=r"no share from client\(s\) \[2\]"):
        masked_total([(0, np.zeros(2, np.uint64))], [0, 2])
    # what the failed certificate spent is on the record, marked as not completed
    (failed,) = run.certificate_costs
    assert failed["completed"] is False and failed["rtc"] == 3
    assert failed["encrypt"] > 0 and failed["messages_down"] == 3 * grid.n_clients
    run.transport.tamper = lambda phase, k, reply: reply
    run.certificate()
    assert [c["completed"] for c in run.certificate_costs] == [False, True]


def test_a_lost_line_search_share_is_an_error(grid):
    lose = tampering(lambda phase, k, reply: None
                     if phase == "primal aggregation" and k == 1 else reply)
    run = HyFDCARun(grid, settings(), crypto="mask", transport=lose)
    with pytest.raises(MissingReplies, match=r"'primal aggregation': no reply from "
                                             r"client\(s\) \[1\]"):
        run.step()


class ReplyingTwice(InProcessTransport):
    """Hands every reply to the run twice."""

    def exchange(self, phase, clients, build, receive):
        def both(k, reply):
            receive(k, reply)
            receive(k, reply)
        super().exchange(phase, clients, build, both)


def test_a_reply_received_twice_applies_once(grid):
    half = settings(participation="fraction", fraction=0.5)
    a = HyFDCARun(grid, half, crypto="mask")
    b = HyFDCARun(grid, half, crypto="mask", transport=ReplyingTwice)
    for _ in range(4):
        a.step()
        b.step()
    np.testing.assert_array_equal(a.certificate()[2], b.certificate()[2])


@pytest.mark.parametrize("forged, earlier", [(POINT_STEPS.size - 1, 0), (0, 2)],
                         ids=["loss of w(alpha)", "loss of the certified point"])
def test_a_forged_share_that_makes_the_gap_negative_is_an_error(grid, forged, earlier):
    """The shares (a certificate without x_{t-1}: the first, and those right after
    another) are the segment's loss sums (c = 0: the certified point, ..., c = 1:
    w(alpha)), the conjugate sums and the holding count; a forged loss sum of either
    end makes a primal fall below the dual."""
    armed = []

    def forge(phase, k, reply):
        if phase.startswith("certificate: loss") and k == 0 and armed:
            reply.shares[forged] -= np.uint64(1 << 40)  # the loss sum falls by 2^8
        return reply
    run = HyFDCARun(grid, settings(), crypto="mask", transport=tampering(forge))
    for _ in range(earlier):
        run.step()
        run.certificate()
    armed.append(True)
    with pytest.raises(CertificateError, match="duality gap is -2"):
        run.certificate()


def test_a_forged_dual_after_a_restart_is_checked_against_the_best_primal(grid,
                                                                         monkeypatch):
    """A client that restarts loses the certified points, so the next certificate's point
    starts again at x_t, whose primal lies above the best so far. A dual forged between
    the two passes that certificate's own check; it must still be refused against the best
    primal (it made the certified gap negative and the run stop, claiming tol 1e-12)."""
    restart_after = 30
    forgery = {}  # "delta": what the next certificate's first client adds to its dual sums
    honest = _client.segment_objective_sums

    def forging(code, z, zp, has_previous, *rest):
        honest(code, z, zp, has_previous, *rest)
        rest[-1][sums_layout(has_previous).dual] += forgery.pop("delta", 0.0)
    monkeypatch.setattr(_client, "segment_objective_sums", forging)

    def certified_run(delta, history):
        def restart_client_0(run):
            if run.round == restart_after:
                run.clients[0] = run.clients[0].restarted()
                assert run.rejoin(0)
                forgery["delta"] = delta
        run = HyFDCARun(grid, settings(), crypto="mask")
        train(run, history, max_rounds=restart_after + 1, tol=1e-12, eval_every=1,
              callback=restart_client_0)
        return history.evaluations

    evaluations = certified_run(0.0, History())
    best_before = min(e["primal"] for r, e in evaluations.items() if r <= restart_after)
    after = evaluations[restart_after + 1]
    assert after["primal"] > best_before + 1e-6  # the restart's window
    history = History()
    with pytest.raises(CertificateError, match=r"best certified dual .* round 31\) exceeds "
                                               r"the best certified primal"):
        certified_run((best_before + after["primal"]) / 2 - after["dual"], history)
    assert max(history.evaluations) == restart_after   # the refuted one is not recorded


@pytest.mark.parametrize("frac_bits", [16, 32])
def test_honest_runs_to_tiny_gaps_pass_the_weak_duality_check(grid, frac_bits):
    """Near the optimum the gap is within rounding of 0: the allowance must cover it."""
    run, history = run_hyfdca(grid, settings(), max_rounds=300, rel_tol=1e-9,
                              crypto="mask", frac_bits=frac_bits)
    assert min(e["gap"] for e in history.evaluations.values()) < 1e-4


# --- fault injection: whole rounds or nothing ---------------------------------------------

def faulty(**options):
    return lambda clients, evaluator, record: FaultyTransport(clients, evaluator, record,
                                                              **options)


def partial(fraction=0.5):
    return settings(participation="fraction", fraction=fraction)


def final_state(run):
    alpha = run.clients[0].keys.decrypt(run.server.enc_alpha)
    return alpha, run.server.w, run.certificate()[:2]


PHASES = ["dual sync + primal aggregation", "secure inner product", "local dual method",
          "primal aggregation"]


def reference_without(grid, absent, rounds, fraction=0.5):
    """A fault-free run in which the clients of ``absent`` {round: ids} were absent."""
    run = HyFDCARun(grid, partial(fraction), crypto="mask")
    available = run.available
    run.available = lambda: np.setdiff1d(available(), absent.get(run.round, []))
    for _ in range(rounds):
        run.step()
    return run


def faulty_run(grid, rounds, fraction=0.5, **options):
    run = HyFDCARun(grid, partial(fraction), crypto="mask", transport=faulty(**options))
    records = [run.step() for _ in range(rounds)]
    return run, records


def assert_same_state(a, b):
    for x, y in zip(final_state(a), final_state(b)):
        np.testing.assert_array_equal(x, y)


def test_duplicated_messages_apply_once(grid):
    clean = reference_without(grid, {}, 8)
    run, _ = faulty_run(grid, 8, duplicate=1.0)
    assert run.transport.faults.duplicates_ignored > 50
    assert_same_state(run, clean)


@pytest.mark.parametrize("phase", PHASES)
@pytest.mark.parametrize("fault", ["drop", "delay", "crash"])
def test_a_missing_reply_makes_the_client_absent_for_the_round(grid, phase, fault):
    """Client 2's reply in round 3 is lost (after it handled the message), late, or the
    client crashed there: the run equals one where client 2 sat round 3 out."""
    probe = HyFDCARun(grid, partial(), crypto="mask")
    for _ in range(3):
        probe.step()
    k = int(probe.available()[0])  # a client available in round 3
    clean = reference_without(grid, {3: [k]}, 7)
    run, records = faulty_run(grid, 7, script=[(3, phase, k, fault)])
    assert_same_state(run, clean)
    assert records[3]["available"] == len(probe.available()) - 1
    if fault == "delay":
        assert run.transport.faults.stale_discarded == 1


def test_a_round_that_loses_everyone_changes_nothing(grid):
    """At fraction 1 (every client invited; the line search on), all four replies of
    round 2's phase D are lost: round 2 runs with nobody."""
    clean = reference_without(grid, {2: [0, 1, 2, 3]}, 5, fraction=1.0)
    lost = [(2, "primal aggregation", k, "drop") for k in range(4)]
    run, records = faulty_run(grid, 5, fraction=1.0, script=lost)
    assert records[2]["available"] == 0 and records[2]["step"] == 0.0
    assert records[2]["rtc"] > 0  # the attempts' traffic is counted
    assert_same_state(run, clean)


def test_a_retransmission_recovers_a_lost_reply_without_applying_it_twice(grid):
    clean = reference_without(grid, {}, 6)
    lost = [(t, phase, k, "drop") for t in (2, 4) for phase in PHASES for k in range(4)]
    run, _ = faulty_run(grid, 6, retries=1, script=lost)
    assert run.transport.faults.retransmitted >= 8
    assert_same_state(run, clean)


def test_random_faults_are_reproducible_and_the_run_still_converges(grid):
    options = dict(drop=0.1, delay=0.03, duplicate=0.1, crash=0.02, retries=1, seed=4)
    (a, _), (b, _) = [run_hyfdca(grid, partial(), max_rounds=40, crypto="mask",
                                 transport=faulty(**options)) for _ in range(2)]
    np.testing.assert_array_equal(a.model, b.model)
    faults = a.transport.faults
    assert faults.dropped and faults.delayed and faults.duplicated and faults.crashed
    # fault-free, this problem certifies a relative gap of 1e-2 at round 460; with these
    # faults (one seed: deterministic) at 530
    run, history = run_hyfdca(grid, partial(), max_rounds=1000, eval_every=10, rel_tol=1e-2,
                              crypto="mask", transport=faulty(**options))
    primal, dual = history.certified()
    assert primal - dual <= 1e-2 * primal and run.round < 1000


def test_a_lossy_transport_needs_partial_participation(grid):
    with pytest.raises(ValueError, match="participation='fraction'"):
        HyFDCARun(grid, settings(), transport=faulty(drop=0.1))


def test_a_certificate_that_cannot_reach_everyone_is_named(grid):
    run = HyFDCARun(grid, partial(), crypto="mask",
                    transport=faulty(drop=1.0, certificate_retries=3,
                                     phases={"certificate: dual sync + primal aggregation"}))
    with pytest.raises(MissingReplies, match="certificate: dual sync.*no reply from client"):
        run.certificate()


# --- a client that loses its state rejoins ------------------------------------------------

def test_the_server_accounts_for_each_clients_contribution(grid):
    run = HyFDCARun(grid, partial(), crypto="mask")
    for _ in range(6):
        run.step()
        assert_w_accounts_for_each_client(run)


@pytest.mark.parametrize("phase", PHASES)
def test_a_restarted_client_rejoins_and_the_run_converges(grid, phase):
    """Client k crashes in round 3 and comes back with no state: the round runs without
    it, and before round 4 it rejoins (set-up for it alone, the whole dual sync, its v_k
    replaces the old one); the server's w then accounts for every client exactly, and
    the run certifies its tolerance about as fast as without the fault."""
    probe = HyFDCARun(grid, partial(), crypto="mask")
    for _ in range(3):
        probe.step()
    k = int(probe.available()[0])
    run = HyFDCARun(grid, partial(), crypto="mask",
                    transport=faulty(script=[(3, phase, k, "restart")]))
    records = [run.step() for _ in range(5)]
    assert run.transport.faults.restarted == 1
    assert records[3]["available"] == len(probe.available()) - 1
    assert [(r["round"], r["client"], r["rtc"]) for r in run.rejoin_costs] == [(4, k, 3)]
    assert run.clients[k].q is not None  # its set-up values came back
    assert_w_accounts_for_each_client(run)
    history = train_to(run, 1e-2, 1000)
    primal, dual = history.certified()
    assert primal - dual <= 1e-2 * primal
    assert run.round < 700  # fault-free: 460 rounds (test_random_faults_...)
    assert_w_accounts_for_each_client(run)


def test_a_rejoins_encryption_work_is_counted_in_its_record(grid):
    """Every encryption operation after set-up is in a round's record or a rejoin's
    (``rejoin_costs``, kept apart from the rounds as a certificate's is)."""
    from hyfdca._protocol import CRYPTO_FIELDS
    run = HyFDCARun(grid, partial(fraction=1.0), crypto="mask",
                    transport=faulty(script=[(2, "local dual method", 1, "restart")]))
    start = run.counts.as_dict()
    records = [run.step() for _ in range(5)]
    end = run.counts.as_dict()
    [rejoin] = run.rejoin_costs
    assert rejoin["client"] == 1 and rejoin["encrypt"] > 0 and rejoin["decrypt"] > 0
    for f in CRYPTO_FIELDS:
        assert end[f] - start[f] == sum(r[f] for r in records) + rejoin[f]


def test_a_client_restarted_when_its_reply_is_lost_rejoins_too(grid):
    """Restarted in two rounds running, once at the first phase: it rejoins twice."""
    run = HyFDCARun(grid, partial(fraction=1.0), crypto="mask",
                    transport=faulty(script=[(2, "local dual method", 1, "restart"),
                                             (3, "dual sync + primal aggregation", 1,
                                              "restart")]))
    records = [run.step() for _ in range(5)]
    assert [r["available"] for r in records] == [4, 4, 3, 3, 4]
    assert [(r["round"], r["client"]) for r in run.rejoin_costs] == [(3, 1), (4, 1)]
    assert_w_accounts_for_each_client(run)


def test_a_rejoin_whose_reply_is_lost_leaves_the_client_away(grid):
    """Every rejoin's resync is lost: the client stays away (never in a round), the
    server's record of it is untouched, and the others go on."""
    run = HyFDCARun(grid, partial(fraction=1.0), crypto="mask", transport=faulty(
        script=[(2, "local dual method", 1, "restart")], drop=1.0, certificate_retries=0,
        phases={"rejoin: dual sync + primal contribution"}))
    records = [run.step() for _ in range(3)]
    before = run.server.synced_at[1], run.server.contribution[1].copy()
    records += [run.step() for _ in range(3)]
    assert [r["available"] for r in records] == [4, 4, 3, 3, 3, 3]
    assert [r["round"] for r in run.rejoin_costs] == [3, 4, 5]  # tried before every round
    assert run.server.synced_at[1] == before[0]
    np.testing.assert_array_equal(run.server.contribution[1], before[1])


def same_bits(history):
    """A history's rows and certificates but the clock's seconds, as comparable text."""
    rows = [[(k, repr(v)) for k, v in row.items() if not k.endswith("seconds")]
            for row in history.rows()]
    return rows, repr(sorted(history.evaluations.items()))


def test_a_checkpoint_saves_a_returning_client_as_away(grid, tmp_path):
    """A checkpoint taken between a restart and the next round changes nothing: it saves
    the client as away, and the run restored from it rejoins the client before its next
    round, where the uninterrupted run rejoins it; the same bits after."""
    script = [(3, "local dual method", 2, "restart")]
    a = HyFDCARun(grid, partial(fraction=1.0), crypto="mask", transport=faulty(script=script))
    b = HyFDCARun(grid, partial(fraction=1.0), crypto="mask", transport=faulty(script=script))
    for _ in range(4):
        a.step()
        b.step()
    for name, data in b.checkpoint_files().items():
        (tmp_path / name).write_bytes(data)
    assert b.rejoin_costs == [] and b.transport.away() == [2]   # saving rejoined no one
    restored = HyFDCARun.from_checkpoint(tmp_path, grid, partial(fraction=1.0), crypto="mask",
                                         transport=faulty(script=script))
    assert restored.rejoin_costs == [] and restored.transport.away() == [2]
    for _ in range(3):
        a.step()
        restored.step()
    for run in (a, restored):   # rejoined before round 5, in both
        assert [(r["round"], r["client"]) for r in run.rejoin_costs] == [(4, 2)]
    assert_same_state(a, restored)


def test_a_checkpoint_changes_nothing_when_a_client_restarted_in_the_last_round(grid, tmp_path):
    """A restart in the last round, then the run's end off the certificate schedule:
    with or without checkpoints, the same history (saving used to rejoin the client, so
    the end's certificate reached it only when checkpoints were on)."""
    def run(**options):
        transport = faulty(script=[(12, "local dual method", 1, "restart")])
        return run_hyfdca(grid, partial(), crypto="mask", max_rounds=13, eval_every=5,
                          transport=transport, **options)[1]

    plain, saved = run(), run(checkpoint=tmp_path, checkpoint_every=5)
    assert list(plain.evaluations) == [0, 5, 10]   # round 13: client 1 is away
    assert same_bits(plain) == same_bits(saved)


@pytest.mark.parametrize("faults", [dict(drop=0.05, seed=7),
                                    dict(delay=0.05, duplicate=0.05, seed=3),
                                    dict(crash=0.05, seed=5),
                                    dict(script=[(8, "local dual method", 1, "restart")],
                                         drop=1.0, certificate_retries=1, seed=2,
                                         phases={"rejoin: dual sync + primal contribution"})])
def test_a_run_over_a_faulty_transport_resumes_with_the_same_faults(grid, tmp_path, faults):
    """The transport's fault stream, counts and message ids are saved: the resumed run
    meets the faults of the uninterrupted one (before: the stream started again, and
    another transport was accepted silently)."""
    from hyfdca import CheckpointError

    def run(max_rounds, **options):
        return run_hyfdca(grid, partial(), crypto="mask", max_rounds=max_rounds,
                          eval_every=5, transport=faulty(**faults), **options)

    whole, whole_history = run(20)
    run(13, checkpoint=tmp_path)
    resumed, resumed_history = run(20, checkpoint=tmp_path, resume=True)
    assert same_bits(resumed_history) == same_bits(whole_history)
    assert vars(resumed.transport.faults) == vars(whole.transport.faults)
    assert resumed.rejoin_costs == whole.rejoin_costs   # each rejoin attempted once a round
    np.testing.assert_array_equal(resumed.model, whole.model)
    with pytest.raises(CheckpointError, match="transport.may_lose: checkpoint True, this run "
                                              "False"):
        run_hyfdca(grid, partial(), crypto="mask", max_rounds=20, eval_every=5,
                   checkpoint=tmp_path, resume=True)


def train_to(run, rel_tol, max_rounds):
    from feddata import History
    from hyfdca._run import train
    history = History()
    train(run, history, max_rounds=max_rounds, eval_every=10, rel_tol=rel_tol)
    return history


def test_a_client_whose_rejoin_failed_rejoins_when_the_run_is_resumed(grid, tmp_path):
    """A checkpoint taken while a restarted client's rejoin keeps failing holds its blank
    state; the resumed run rejoins it before any round, never runs a round with it
    blank, and w accounts for every client's alpha."""
    from hyfdca._checkpoint import save_checkpoint
    run = HyFDCARun(grid, partial(fraction=1.0), crypto="mask", transport=faulty(
        script=[(2, "local dual method", 1, "restart")], drop=1.0, certificate_retries=0,
        phases={"rejoin: dual sync + primal contribution"}))
    for _ in range(4):
        run.step()
    save_checkpoint(tmp_path, dict(round=run.round), run.server.w, run.checkpoint_files())
    assert run.transport.away() == [1]
    resumed = HyFDCARun.from_checkpoint(tmp_path / "round-000004", grid,
                                        partial(fraction=1.0), crypto="mask")
    before = len(run.rejoin_costs)   # the failed attempts, kept in the checkpoint
    assert resumed.rejoin_costs[:before] == run.rejoin_costs and before > 0
    assert [(r["round"], r["client"]) for r in resumed.rejoin_costs[before:]] == [(4, 1)]
    records = [resumed.step() for _ in range(2)]
    assert [r["available"] for r in records] == [4, 4]
    assert_w_accounts_for_each_client(resumed)
