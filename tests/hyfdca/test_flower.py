"""HyFDCA on Flower: the same apps in Flower's simulation engine give the in-process
iterates bit for bit; the server loads only public keys."""

import json

import numpy as np
import pytest
import scipy.sparse as sp

from crypto import DealtKeys, KeyHolder, SecureSum
from feddata import History
from feddata import partition as P
from hyfdca import HyFDCARun, HyFDCASettings
from hyfdca._run import train

pytest.importorskip("flwr")  # a test extra; an import error of hyfdca.flower itself fails
from hyfdca import flower  # noqa: E402


@pytest.fixture(scope="module")
def job(cancer, tmp_path_factory):
    X, y = cancer
    folder = tmp_path_factory.mktemp("flower")
    client_keys, server_keys = flower.write_keys(folder / "keys", "mask")
    settings = HyFDCASettings.from_variant("auto", lam=0.05, participation="fraction",
                                           fraction=0.5)
    return P.hybrid_grid(X[:200], y[:200], 2, 2), settings, folder, client_keys, server_keys


def in_process_and_simulated(job, fed, settings, name, max_rounds, eval_every):
    """(the in-process run, its History, the simulation's model and rows) of ``settings``
    on ``fed`` with the job's keys, run seed 3."""
    _, _, folder, client_keys, server_keys = job
    keys, masker = flower.read_client_keys(client_keys)
    local = HyFDCARun(fed, settings, seed=3, dealt=DealtKeys(
        keys, flower.read_server_keys(server_keys), masker))
    history = History()
    train(local, history, max_rounds=max_rounds, eval_every=eval_every)
    model, rows = flower.simulate(fed, settings, folder / name, seed=3,
                                  client_keys=client_keys, server_keys=server_keys,
                                  max_rounds=max_rounds, eval_every=eval_every)
    return local, history, model, rows


def assert_same_certificates(rows, history):
    certified = {r["round"]: (r["primal"], r["dual"]) for r in rows["rows"]
                 if r["primal"] is not None}
    assert certified == {t: (e["primal"], e["dual"]) for t, e in history.evaluations.items()}


def test_a_2x2_mask_job_on_the_simulation_engine_gives_the_in_process_iterates(job, cancer):
    fed, settings, folder, client_keys, server_keys = job
    job_data = cancer
    keys, masker = flower.read_client_keys(client_keys)
    evaluator = flower.read_server_keys(server_keys)
    local = HyFDCARun(fed, settings, dealt=DealtKeys(keys, evaluator, masker), seed=3)
    history = History()
    train(local, history, max_rounds=6, eval_every=2)
    new = P.hybrid_grid(*[a[200:300] for a in job_data], 2, 2)
    model, rows = flower.simulate(fed, settings, folder / "sim", client_keys=client_keys,
                                  server_keys=server_keys, max_rounds=6, eval_every=2, seed=3,
                                  predict=new)
    np.testing.assert_array_equal(model, local.model)
    # federated prediction: the margins the server revealed are the pooled model's
    labels, margins = local.predict(new.n_samples, blocks=new.blocks)
    np.testing.assert_array_equal(np.load(folder / "sim" / "output" / "margins.npy"), margins)
    np.testing.assert_array_equal(np.load(folder / "sim" / "output" / "predictions.npy"),
                                  labels)
    np.testing.assert_allclose(margins, new.reassemble()[0] @ local.model, atol=1e-8)
    assert_same_certificates(rows, history)
    assert [r["rtc"] for r in rows["rows"]] == [0] + [r["rtc"] for r in history.rounds]


def test_certificates_every_round_at_full_participation_match_in_process(job, cancer):
    """Auto-full with a certificate every round (its certificates search the running
    mean, whose margins each ClientApp keeps in its session between messages, and the
    request names the mean across the wire): the simulation's certificates and model
    are the in-process run's, bit for bit."""
    settings = HyFDCASettings.from_variant("auto", lam=0.05)
    assert settings.certify_running_mean
    local, history, model, rows = in_process_and_simulated(job, job[0], settings,
                                                           "every-round", 4, 1)
    assert local.server.point_mean.size == 3  # rounds 2-4: the mean was searched
    np.testing.assert_array_equal(model, local.model)
    assert_same_certificates(rows, history)


def test_an_auto_partial_job_whose_local_work_follows_the_disclosed_coherence(
        job, sparse_non_negative):
    """auto-partial below lam 1e-4 sets its iic from the coherence the SuperNodes disclose
    when the server asks who they are: the simulation's model is the in-process run's
    (bound on the dataset's own layout) and so are its certificates, bit for bit (the
    dual moves with H even where the certified point is still 0), and that iic is raised
    (min_H 1, so that the raise changes H on these small clients)."""
    fed = P.hybrid_grid(*sparse_non_negative(200, 60, 0.03), 2, 2)  # coherence ~0.02
    settings = HyFDCASettings.from_variant("auto", lam=1e-5, participation="fraction",
                                           fraction=0.3, min_H=1)
    n_local = fed.blocks[0].X.shape[0]
    assert settings.iic_coherence and settings.bind(fed).inner_steps(n_local) > max(
        1, round(settings.iic * n_local))
    local, history, model, rows = in_process_and_simulated(job, fed, settings, "coherence",
                                                           4, 2)
    np.testing.assert_array_equal(model, local.model)
    assert_same_certificates(rows, history)


def recording_niceness(folder):
    """A Flower mod that writes the niceness of the process running each ClientApp
    message to ``folder``/<pid>."""
    def mod(message, context, call_next):
        import os
        (folder / str(os.getpid())).write_text(str(os.nice(0)))
        return call_next(message, context)
    return mod


def test_a_bfv_job_on_the_simulation_engine_gives_the_in_process_iterates(job, tmp_path):
    """Lattice ciphertexts cross the Flower wire (serialised SEAL ciphertexts; every
    ClientApp loads the secret contexts, the ServerApp only the public ones). The parties
    run at the caller's priority (Ray's own default, niceness 15, starves them beside
    other work)."""
    import os

    fed, settings, _, _, _ = job
    client_keys, server_keys = flower.write_keys(tmp_path / "keys", "bfv")
    keys, masker = flower.read_client_keys(client_keys)
    local = HyFDCARun(fed, settings, dealt=DealtKeys(keys, flower.read_server_keys(server_keys),
                                                      masker), seed=3)
    train(local, History(), max_rounds=3, eval_every=3)
    (tmp_path / "nice").mkdir()
    model, _ = flower.simulate(fed, settings, tmp_path / "sim", client_keys=client_keys,
                               server_keys=server_keys, max_rounds=3, eval_every=3, seed=3,
                               client_mods=[recording_niceness(tmp_path / "nice")])
    np.testing.assert_array_equal(model, local.model)
    workers = {int(f.read_text()) for f in (tmp_path / "nice").iterdir()}
    assert workers == {os.nice(0)}
    assert "RAY_worker_niceness" not in os.environ


# the simulated parties' phase timeout: long enough that a loaded machine's slow reply is
# never taken for an absent party (5 s was, with two benchmarks on both cores)
PHASE_TIMEOUT = 12.0


def failing_at_round_start(k, round_, how, seconds=PHASE_TIMEOUT + 0.3):
    """A Flower mod for client k's round-start message of round ``round_``: "late" lets it
    go unanswered for ``seconds`` (handling nothing; the server, whose phase timeout is
    shorter, never reads the late error reply); "wiped" drops the node's session first, as
    a node restarted under the same node id would have none."""
    import time

    from flwr.app import Error
    from flwr.app import Message as FlowerMessage

    from hyfdca._messages import RoundStart
    from hyfdca.flower._client_app import SESSION
    from hyfdca.flower._wire import unpack

    def mod(message, context, call_next):
        if (int(context.node_config["partition-id"]) == k
                and message.metadata.message_type == "query.dual_sync"):
            request = unpack(message.content)
            if isinstance(request, RoundStart) and request.round == round_:
                if how == "wiped":
                    del context.state[SESSION]
                    return call_next(message, context)
                time.sleep(seconds)
                return FlowerMessage(Error(code=0, reason="late"), reply_to=message)
        return call_next(message, context)
    return mod


@pytest.mark.parametrize("how", ["late", "wiped"])
def test_a_party_that_does_not_answer_is_absent_then_rejoins_on_the_simulation_engine(job, how):
    """Client k does not answer round 3's first phase in time ("late"), or answers that it
    has no session ("wiped": its node restarted under the same id): on Flower the round runs
    again without it, the other parties roll back their part of the first attempt, k is
    lost, the server finds its node again (it answers who it is) and k rejoins with a
    fresh session (set-up, whole dual sync, its v_k). The iterates are bit for bit those
    of the in-process run in which k restarts in round 3 and rejoins in the same round,
    certificates skipped while it was away included."""
    import json

    from hyfdca import FaultyTransport

    fed, settings, folder, client_keys, server_keys = job
    keys, masker = flower.read_client_keys(client_keys)
    evaluator = flower.read_server_keys(server_keys)
    dealt = DealtKeys(keys, evaluator, masker)
    probe = HyFDCARun(fed, settings, dealt=dealt, seed=3)
    for _ in range(3):
        probe.step()
    k = int(probe.available()[0])
    model, rows = flower.simulate(fed, settings, folder / f"sim-{how}", client_keys=client_keys,
                                  server_keys=server_keys, max_rounds=12, eval_every=2,
                                  seed=3, phase_timeout=PHASE_TIMEOUT,
                                  client_mods=[failing_at_round_start(k, 3, how)])
    events = json.loads((folder / f"sim-{how}" / "output" / "events.json").read_text())
    assert events["events"][0] == ["lost", 3, k, "dual sync + primal aggregation"]
    [rejoin] = events["rejoins"]
    back = rejoin["round"]
    assert rejoin["client"] == k and rejoin["rtc"] == 3 and back > 3
    assert events["events"][1][:3] == ["rejoined", back, k]

    script = [(3, "dual sync + primal aggregation", k, "restart")]
    local = HyFDCARun(fed, settings, dealt=dealt, seed=3, transport=lambda c, e, r:
                      FaultyTransport(c, e, r, script=script))
    rejoining = local.transport.rejoining
    local.transport.rejoining = lambda t: rejoining(t) if t == back else []
    history = History()
    train(local, history, max_rounds=12, eval_every=2)
    assert [r["round"] for r in local.rejoin_costs] == [back]
    assert events["skipped_certificates"] == local.skipped_certificates
    np.testing.assert_array_equal(model, local.model)
    certified = [(r["primal"], r["dual"]) for r in rows["rows"] if r["primal"] is not None]
    assert certified == [(e["primal"], e["dual"]) for e in history.evaluations.values()]


def test_the_server_loads_only_the_public_key_file(job):
    _, _, _, client_keys, server_keys = job
    evaluator = flower.read_server_keys(server_keys)
    assert not isinstance(evaluator, (KeyHolder, SecureSum))
    assert "private" not in repr(vars(evaluator)).lower()
    with pytest.raises(ValueError, match="is not a server key file"):
        flower.read_server_keys(client_keys)


@pytest.mark.parametrize("crypto, options", [
    ("plain", {}), ("mask", {}), ("bfv", {}),
    ("paillier", dict(n_length=512, insecure=True)),
    ("fast-paillier", dict(n_length=512, insecure=True))])
def test_every_backends_server_key_file_loads(tmp_path, crypto, options):
    """server.keys loads, and its bytes hold none of the clients' secrets: the masks'
    PRF key, the Paillier primes, the mask backend's stream and MAC keys, BFV's secret
    contexts (whose loaded contexts hold no secret key either)."""
    client_keys, server_keys = flower.write_keys(tmp_path, crypto, **options)
    evaluator = flower.read_server_keys(server_keys)
    assert evaluator.key_id
    keys, masker = flower.read_client_keys(client_keys)
    secrets = [masker._key]
    for name in ("_private_key", "_private"):
        if hasattr(keys, name):
            primes = [int(getattr(keys, name).p), int(getattr(keys, name).q)]
            secrets += [v.to_bytes((v.bit_length() + 7) // 8, order)
                        for v in primes for order in ("little", "big")]
    if hasattr(keys, "_stream_key"):
        secrets += [keys._stream_key, keys._mac.tobytes()]
    if hasattr(keys, "_context_blobs"):
        secrets += list(keys._context_blobs)
        assert not any(context.has_secret_key() for context in evaluator.contexts())
    assert len(secrets) > 1 or crypto == "plain"
    held = server_keys.read_bytes()
    assert not [secret for secret in secrets if secret in held]


def test_a_crafted_server_key_file_runs_no_code(tmp_path):
    """server.keys comes from a party: a pickle that would call a function on loading is
    refused before it runs (here: os.system, creating a file)."""
    import os
    import pickle

    class Crafted:
        def __reduce__(self):
            return os.system, (f"touch {tmp_path / 'ran'}",)

    crafted = tmp_path / "server.keys"
    crafted.write_bytes(pickle.dumps(Crafted()))
    with pytest.raises(ValueError, match="holds posix.system, which none holds"):
        flower.read_server_keys(crafted)
    assert not (tmp_path / "ran").exists()


def test_a_deployment_refuses_plaintext_keys_unless_told_it_is_insecure(tmp_path):
    """Checked before the server waits for any party."""
    from types import SimpleNamespace

    from hyfdca.flower._server_app import main

    _, server_keys = flower.write_keys(tmp_path, "plain")
    context = SimpleNamespace(run_config={"server-keys": str(server_keys)})
    with pytest.raises(ValueError, match="plaintext backend's: every value would cross"):
        main(None, context, {})
    class Unreachable:
        def get_node_ids(self):
            raise LookupError("asked for the nodes")

    context.run_config["insecure"] = True
    with pytest.raises(LookupError, match="asked for the nodes"):  # past the check
        main(Unreachable(), context, {"num-clients": 2})


def test_a_client_block_file_round_trips(job, tmp_path):
    fed = job[0]
    flower.write_block(tmp_path / "b.npz", fed.blocks[3])
    block = flower.read_block(tmp_path / "b.npz")
    assert (block.X != fed.blocks[3].X).nnz == 0
    for name in ("sample_ids", "feature_ids", "y"):
        np.testing.assert_array_equal(getattr(block, name), getattr(fed.blocks[3], name))
    assert fed.blocks[3].feature_ids[0] > 0   # global ids, not local positions
    (tmp_path / "x.npz").write_bytes(b"PK")
    with pytest.raises(ValueError, match="is not a HyFDCA client block"):
        flower.read_block(tmp_path / "x.npz")


@pytest.mark.parametrize("k", range(4))
def test_a_client_block_round_trips_through_a_libsvm_party_file(job, tmp_path, k):
    """Global feature indices (+1) and the id header; the same block back."""
    block = job[0].blocks[k]
    flower.write_block(tmp_path / "b.libsvm", block)
    text = (tmp_path / "b.libsvm").read_text().splitlines()
    assert text[0].startswith("# hyfdca sample_ids: ") and "-" in text[0]
    back = flower.read_block(tmp_path / "b.libsvm")
    np.testing.assert_array_equal(back.X.toarray(), block.X.toarray())
    for name in ("sample_ids", "feature_ids", "y"):
        np.testing.assert_array_equal(getattr(back, name), getattr(block, name))


def test_a_libsvm_party_file_names_what_is_wrong(tmp_path):
    bad = tmp_path / "bad.libsvm"
    bad.write_text("+1 1:0.5\n")
    with pytest.raises(ValueError, match="needs the header comments"):
        flower.read_block(bad)
    bad.write_text("# hyfdca sample_ids: 4-5\n# hyfdca feature_ids: 0,2\n+1 1:0.5\n-1 2:1\n")
    with pytest.raises(ValueError, match=r"feature index 2 \(global id 1\) is not one of"):
        flower.read_block(bad)
    bad.write_text("# hyfdca sample_ids: 4-6\n# hyfdca feature_ids: 0-2\n+1 1:0.5\n")
    with pytest.raises(ValueError, match="1 rows but 3 sample_ids"):
        flower.read_block(bad)
    for ids in ("4-x", "5-3,7"):
        bad.write_text(f"# hyfdca sample_ids: {ids}\n# hyfdca feature_ids: 0-2\n+1 1:0.5\n")
        with pytest.raises(ValueError, match="is not a list of ids and ranges"):
            flower.read_block(bad)
    bad.write_text("# hyfdca sample_ids: 4\n# hyfdca feature_ids:\n+1\n")
    with pytest.raises(ValueError, match="at least one sample and one feature"):
        flower.read_block(bad)


@pytest.mark.parametrize("change, message", [
    (dict(sample_ids=np.arange(4)), "a block of shape (3, 2) for 4 sample_ids and 2"),
    (dict(y=np.ones(4)), "4 labels for 3 rows"),
    (dict(sample_ids=np.array([5, 4, 6])), "sample_ids must be non-negative whole numbers, "
                                           "ascending and unique"),
    (dict(feature_ids=np.array([1.0, 2.0])), "feature_ids must be non-negative whole"),
])
def test_an_npz_party_file_names_what_is_wrong(tmp_path, change, message):
    """The checks a LIBSVM party file gets: rows, labels and ids consistent."""
    import re
    X = sp.csr_matrix(np.arange(6.0).reshape(3, 2))
    arrays = dict(data=X.data, indices=X.indices, indptr=X.indptr, shape=np.array(X.shape),
                  sample_ids=np.array([4, 5, 6]), feature_ids=np.array([1, 2]),
                  y=np.array([1.0, -1.0, 1.0]))
    np.savez(tmp_path / "party.npz", **{**arrays, **change})
    with pytest.raises(ValueError, match=re.escape(message)):
        flower.read_block(tmp_path / "party.npz")
    np.savez(tmp_path / "good.npz", **arrays)
    assert flower.read_block(tmp_path / "good.npz").X.shape == (3, 2)


def test_a_compressed_libsvm_party_file_with_blank_header_lines_reads_back(job, tmp_path):
    import gzip

    block = job[0].blocks[1]
    flower.write_block(tmp_path / "b.libsvm.gz", block)
    lines = gzip.open(tmp_path / "b.libsvm.gz", "rt").read().splitlines()
    (tmp_path / "c.libsvm").write_text("\n".join([lines[0], "", lines[1], *lines[2:]]) + "\n")
    for name in ("b.libsvm.gz", "c.libsvm"):
        back = flower.read_block(tmp_path / name)
        np.testing.assert_array_equal(back.X.toarray(), block.X.toarray())
        np.testing.assert_array_equal(back.sample_ids, block.sample_ids)


@pytest.mark.slow
def test_a_loopback_deployment_with_tls_gives_the_in_process_iterates(job, cancer):
    """(-m slow: 150-200 s on 2 cores, a third of the default suite's time; the same
    deployment runs in benchmarks/flower_rounds.py.) A SuperLink and four SuperNodes as
    subprocesses on 127.0.0.1 with self-signed TLS certificates, each SuperNode with its
    own data file (two .npz, two LIBSVM); `flwr run` of a one-round 2x2 mask job, then a
    federated prediction of 100 new samples (Flower starts a ClientApp process per
    message, so one round); nothing is left running afterwards, even when the run
    fails."""
    import json

    fed, settings, folder, client_keys, server_keys = job
    new = P.hybrid_grid(*[a[200:300] for a in cancer], 2, 2)
    data = folder / "deployment-data"
    data.mkdir()
    nodes = []
    for k, (block, new_block) in enumerate(zip(fed.blocks, new.blocks)):
        kind = "npz" if k < 2 else "libsvm"
        flower.write_block(data / f"client-{k}.{kind}", block)
        flower.write_block(data / f"new-{k}.{kind}", new_block)
        nodes.append({"client-id": k, "data-file": str(data / f"client-{k}.{kind}"),
                      "keys-file": str(client_keys),
                      "predict-file": str(data / f"new-{k}.{kind}")})
    output = folder / "deployment-output"
    app = flower.write_app(folder / "app", {
        "num-clients": 4, "server-keys": str(server_keys),
        "settings": json.dumps(settings.as_dict()), "seed": 3, "frac-bits": 32,
        "max-rounds": 1, "eval-every": 1, "rel-tol": 0.0, "phase-timeout": 0.0,
        "output": str(output), "predict-samples": new.n_samples})
    loopback = flower.Loopback(folder / "loopback", nodes, tls=True)
    try:
        with loopback:
            loopback.run(app)
    finally:
        assert loopback.leftover() == []
    keys, masker = flower.read_client_keys(client_keys)
    evaluator = flower.read_server_keys(server_keys)
    local = HyFDCARun(fed, settings, dealt=DealtKeys(keys, evaluator, masker), seed=3)
    history = History()
    train(local, history, max_rounds=1, eval_every=1)
    np.testing.assert_array_equal(np.load(output / "model.npy"), local.model)
    rows = json.loads((output / "history.json").read_text())["rows"]
    assert [(r["primal"], r["dual"]) for r in rows] == [
        (e["primal"], e["dual"]) for e in history.evaluations.values()]
    labels, margins = local.predict(new.n_samples, blocks=new.blocks)
    np.testing.assert_array_equal(np.load(output / "margins.npy"), margins)
    np.testing.assert_array_equal(np.load(output / "predictions.npy"), labels)
    np.testing.assert_allclose(margins, new.reassemble()[0] @ local.model, atol=1e-8)


@pytest.mark.slow
def test_a_supernode_killed_mid_run_is_absent_and_rejoins_when_restarted(job):
    """The loopback deployment (TLS, four SuperNodes) of a 2x2 mask job with a 20 s phase
    timeout: SuperNode 3 is killed (SIGKILL) after round 2; its reply never comes, it is
    absent from that round on and training goes on with three parties; SuperNode 3 is
    started again after round 4 (a new node, no state), the server finds it, it rejoins
    (set-up, whole dual sync, its v_k) and the job certifies its relative gap of 5e-2
    (in process, with a similar absence and without it: round 12). Every process is
    stopped afterwards. About 10 minutes on 2 cores."""
    import json

    fed, _, folder, client_keys, server_keys = job
    settings = HyFDCASettings.from_variant("auto", lam=1.0, participation="fraction",
                                           fraction=1.0)
    data = folder / "fault-data"
    data.mkdir()
    for k, block in enumerate(fed.blocks):
        flower.write_block(data / f"client-{k}.npz", block)
    output = folder / "fault-output"
    app = flower.write_app(folder / "fault-app", {
        "num-clients": 4, "server-keys": str(server_keys),
        "settings": json.dumps(settings.as_dict()), "seed": 3, "frac-bits": 32,
        "max-rounds": 40, "eval-every": 2, "rel-tol": 5e-2, "phase-timeout": 20.0,
        "output": str(output)})
    nodes = [{"client-id": k, "data-file": str(data / f"client-{k}.npz"),
              "keys-file": str(client_keys)} for k in range(4)]
    loopback = flower.Loopback(folder / "fault-loopback", nodes, tls=True)
    try:
        with loopback:
            job_run = loopback.start_run(app)
            loopback.wait_for_output("HyFDCA: round 2 done")
            loopback.kill_node(3)
            loopback.wait_for_output("HyFDCA: client 3 lost")
            loopback.wait_for_output("HyFDCA: round 4 done")
            loopback.start_node(3)
            loopback.wait_for_output("HyFDCA: client 3 rejoins")
            loopback.finish_run(job_run, timeout=1500)
    finally:
        assert loopback.leftover() == []
    events = json.loads((output / "events.json").read_text())
    [lost, rejoined] = events["events"]
    assert lost[0] == "lost" and lost[2] == 3 and lost[1] >= 2
    [rejoin] = events["rejoins"]
    assert rejoined[:3] == ["rejoined", rejoin["round"], 3]
    assert rejoin["client"] == 3 and rejoin["rtc"] == 3
    rounds = json.loads((output / "history.json").read_text())["rows"]
    # round index t is the record of round t + 1: four parties before the loss, three
    # from the round it was lost in until it rejoined, four after
    available = {r["round"] - 1: r["available"] for r in rounds[1:]}
    back = rejoin["round"]
    assert [available[t] for t in range(lost[1])] == [4] * lost[1]
    assert [available[t] for t in range(lost[1], back)] == [3] * (back - lost[1])
    assert all(available[t] == 4 for t in available if t >= back)
    certified = [r for r in rounds if r["primal"] is not None]
    best_primal = min(r["primal"] for r in certified)
    best_dual = max(r["dual"] for r in certified)
    assert best_primal - best_dual <= 5e-2 * best_primal
    assert certified[-1]["round"] > back
    assert np.load(output / "model.npy").shape == (fed.n_features,)


def test_a_failed_phase_sends_the_server_no_value_of_the_party(cancer):
    """Flower sends an exception's text (and on its simulation engine the traceback with
    every chained error) to the server: a party's encoder overflow, whose text names its
    largest value, reaches the server as the party, request and error type only, chained
    to nothing; the error itself stays on the party's side (its log, ``.error``)."""
    from hyfdca._messages import PredictRequest
    from hyfdca.flower._client_app import PhaseFailed, answered
    X, y = cancer
    fed = P.vertical(X[:20], y[:20], 2)
    run = HyFDCARun(fed, HyFDCASettings.from_variant("auto", lam=0.05), crypto="mask")
    client = run.clients[0]
    client.hold_for_prediction(fed.blocks[0])
    w = np.full(fed.blocks[0].feature_ids.size, 3.7e25)
    with pytest.raises(PhaseFailed) as failed:
        answered(client, PredictRequest(w, fed.n_samples, np.arange(2), "prediction-0-x"))
    assert str(failed.value) == ("client 0: OverflowError while answering PredictRequest "
                                 "(details in the party's own log)")
    assert failed.value.__cause__ is None and failed.value.__suppress_context__
    assert isinstance(failed.value.error, OverflowError)
    assert "e+" in str(failed.value.error)   # the value, kept on the party's side


def test_every_action_of_a_party_sends_the_server_no_value_of_its_files(tmp_path):
    """Reading a malformed data file (its error quotes the token) at describe, the first
    action: the server gets the party, the action and the error type, nothing chained."""
    from types import SimpleNamespace

    from hyfdca.flower._client_app import PhaseFailed, describe, guarded
    bad = tmp_path / "client-3.libsvm"
    bad.write_text("# hyfdca sample_ids: 0\n# hyfdca feature_ids: 0-4\n1 3:4242.125x\n")
    context = SimpleNamespace(node_config={"client-id": 3, "data-file": str(bad),
                                           "keys-file": str(tmp_path / "clients.keys")},
                              run_config={})
    with pytest.raises(PhaseFailed) as failed:
        guarded(describe, "describe")(None, context, {})
    assert str(failed.value) == ("client 3: ValueError while answering describe (details "
                                 "in the party's own log)")
    assert failed.value.__cause__ is None and "4242" in str(failed.value.error)


def test_the_clients_key_file_is_never_readable_by_others(tmp_path, monkeypatch):
    """clients.keys is created 0600 (not created readable and narrowed after): its mode
    when the next file is written, under a umask that lets others read."""
    import os
    import stat
    from pathlib import Path

    from hyfdca.flower._files import write_keys
    modes, write_bytes = [], Path.write_bytes

    def spy(path, data):
        clients = path.parent / "clients.keys"
        if clients.exists():
            modes.append(stat.S_IMODE(clients.stat().st_mode))
        return write_bytes(path, data)

    monkeypatch.setattr(Path, "write_bytes", spy)
    old = os.umask(0o022)
    try:
        clients, _ = write_keys(tmp_path, "mask")
        write_keys(tmp_path, "mask")     # again, over the first files
    finally:
        os.umask(old)
    assert modes == [0o600, 0o600]
    assert stat.S_IMODE(clients.stat().st_mode) == 0o600


def test_a_party_failing_the_prediction_skips_it_with_a_note(job, cancer):
    """The model, history and events are written; the prediction, which needs every
    party, is skipped with the reason in events.json (the ServerApp used to crash there,
    before writing events.json)."""
    from flwr.app import Error
    from flwr.app import Message as FlowerMessage

    fed, settings, folder, client_keys, server_keys = job
    new = P.hybrid_grid(*[a[200:240] for a in cancer], 2, 2)

    def failing_prediction(message, context, call_next):
        if (int(context.node_config["partition-id"]) == 1
                and message.metadata.message_type == "query.predict"):
            return FlowerMessage(Error(code=0, reason="disk gone"), reply_to=message)
        return call_next(message, context)

    output = folder / "no-prediction" / "output"
    output.mkdir(parents=True)
    np.save(output / "predictions.npy", np.ones(3))   # an earlier job's, never kept
    model, rows = flower.simulate(fed, settings, folder / "no-prediction", seed=3,
                                  client_keys=client_keys, server_keys=server_keys,
                                  max_rounds=2, eval_every=2, predict=new,
                                  client_mods=[failing_prediction])
    events = json.loads((output / "events.json").read_text())
    assert events["prediction"].startswith("skipped: ") and "disk gone" in events["prediction"]
    assert not (output / "predictions.npy").exists() and len(rows["rows"]) == 3


def test_a_bad_run_configuration_is_refused_before_any_party_is_asked():
    from hyfdca.flower._server_app import run_options
    for bad, message in ((dict(**{"phase-timeout": -1.0}), "phase-timeout must be a finite"),
                         (dict(**{"phase-timeout": float("inf")}), "phase-timeout must be"),
                         (dict(**{"eval-every": 0}), "eval_every must be a whole number"),
                         (dict(**{"rel-tol": float("nan")}), "rel_tol must be None or")):
        with pytest.raises(ValueError, match=message):
            run_options(bad)
    assert run_options({"phase-timeout": 0.0}) == (100, 10, None, None, 0, 32)
    # TOML may give a count as 32.0: a whole number, taken as one
    options = run_options({"frac-bits": 32.0, "max-rounds": 50.0, "seed": 3.0})
    assert options == (50, 10, None, None, 3, 32) and type(options[5]) is int
    with pytest.raises(ValueError, match="frac_bits must be a whole number >= 1, got 20.5"):
        run_options({"frac-bits": 20.5})


def test_a_loss_outside_the_rounds_is_listed_under_the_round_last_run():
    from crypto import deal_keys
    from hyfdca.flower._transport import FlowerTransport
    transport = FlowerTransport(None, [11, 12], deal_keys("plain").evaluator, timeout=1.0)
    transport.start_round(3)
    transport.start_round()          # a certificate after round 3
    assert transport.round == 3


def test_party_files_that_disagree_on_a_label_stop_the_job_at_set_up(job):
    """Parties whose files disagree on a shared sample's label (each file fine alone):
    the server, which sees ids only, names the sample from the keyed label tags, and the
    job stops at set-up without a model (hyfdca._holdings)."""
    from feddata.federated import ClientBlock, FederatedDataset
    from hyfdca._holdings import HoldingsError

    fed, settings, folder, client_keys, server_keys = job
    blocks = list(fed.blocks)
    flip = blocks[3]
    y = flip.y.copy()
    y[4] *= -1
    blocks[3] = ClientBlock(flip.sample_ids, flip.feature_ids, flip.X, y)
    mismatched = FederatedDataset.__new__(FederatedDataset)   # as files: not validated
    mismatched.blocks, mismatched.n_samples, mismatched.n_features = \
        blocks, fed.n_samples, fed.n_features
    with pytest.raises(HoldingsError, match=rf"holders disagree on the label of samples "
                                            rf"\[{int(flip.sample_ids[4])}\]"):
        flower.simulate(mismatched, settings, folder / "mislabelled", seed=3,
                        client_keys=client_keys, server_keys=server_keys, max_rounds=2)
    assert not (folder / "mislabelled" / "output" / "model.npy").exists()


def test_predict_files_that_hold_an_entry_twice_skip_the_prediction_with_a_note(job, cancer):
    """Every party given every new sample in its own features: each margin part would be
    added twice. The server asks the holders that share features for keyed entry tags
    (the `predict_entry_tags` action, each party reading its predict-file again) and
    skips the prediction, naming the parties."""
    from feddata.federated import ClientBlock, FederatedDataset

    fed, settings, folder, client_keys, server_keys = job
    X, y = cancer
    whole = P.vertical(X[200:230], y[200:230], 2)
    everything = FederatedDataset.__new__(FederatedDataset)   # as files: not validated
    everything.blocks = [ClientBlock(whole.blocks[k % 2].sample_ids, b.feature_ids,
                                     whole.blocks[k % 2].X, whole.blocks[k % 2].y)
                         for k, b in enumerate(fed.blocks)]
    everything.n_samples, everything.n_features = 30, fed.n_features
    assert all(np.array_equal(e.feature_ids, b.feature_ids)
               for e, b in zip(everything.blocks, fed.blocks))
    flower.simulate(fed, settings, folder / "doubled", seed=3, client_keys=client_keys,
                    server_keys=server_keys, max_rounds=2, eval_every=2, predict=everything)
    output = folder / "doubled" / "output"
    events = json.loads((output / "events.json").read_text())
    assert events["prediction"].startswith("skipped: ")
    assert "are held more than once (clients 0, 2: " in events["prediction"]
    assert not (output / "predictions.npy").exists()
