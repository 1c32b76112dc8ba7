"""Encryption cost profiling: per-operation costs of each crypto backend, and the time of a
HyFDCA round split into computation, encryption and communication (the paper's Figure 4).

Operation costs are measured on vectors of n values: encrypt and decrypt (client side),
add and multiply by a plaintext integer (server side), per value and per vector, with the
throughput and the bytes per value on the wire.

Round times are measured on a real run: every encrypt, decrypt, add and multiply of the run
is timed and charged to the client that made it, or to the server. Clients work in
parallel, so a round costs

    computation  slowest client's local dual method (``compute_seconds``)
    encryption   slowest client's crypto time + the server's crypto time
    communication  round trips x latency (0, 0.2575 s US-Singapore, 0.6 s GEO satellite)
"""

import inspect
import time
from dataclasses import dataclass

import numpy as np

from crypto import BACKENDS, make_backend
from solvers import check_whole, is_whole

LATENCIES = (0.0, 0.2575, 0.6)
OPERATIONS = ("encrypt", "decrypt", "add", "multiply")


def backend_options(name, key_bits=None, one_per_ciphertext=False):
    """Key options of backend ``name`` (``crypto_options`` of a run): the key size where
    the backend has one (under 2048 bits only with ``insecure=True``, for quick tests);
    with ``one_per_ciphertext``, no packing where the backend packs optionally."""
    accepted = inspect.signature(BACKENDS[name]).parameters
    options = {"slots": 1} if one_per_ciphertext and "slots" in accepted else {}
    if key_bits is not None and "n_length" in accepted:
        options["n_length"] = int(key_bits)
        if key_bits < 2048:
            options["insecure"] = True
    return options


def cost_values(name):
    """Values per vector for measuring ``name``'s per-value costs in one call: a Paillier
    operation takes milliseconds, so 20 values drown the per-call overhead; a masking
    operation takes tenths of a microsecond, so it needs thousands (at 20 the overhead
    made mask 19-37 times too dear)."""
    return 20 if "paillier" in name else 2000


@dataclass
class OperationCost:
    backend: str
    key_bits: int | None
    operation: str
    n_values: int
    seconds: float          # for the whole vector
    bytes_per_value: float

    @property
    def per_value(self):
        return self.seconds / self.n_values

    @property
    def throughput(self):
        return self.n_values / self.seconds if self.seconds > 0 else np.inf


def measure_operations(name, *, key_bits=None, n_values=1000, repeats=3, seed=0,
                       one_per_ciphertext=False):
    """Best-of-``repeats`` wall time of each operation, after one untimed call, on a
    vector of ``n_values`` fixed-point values drawn from N(0, 1) (seeded), rounded up to
    whole ciphertexts of a packed backend (so that its cost per value is that of full
    ciphertexts: BFV's 8,192 slots); multipliers in [0, 2^16] as the protocol's, one
    integer for a packed vector (a slot cannot be scaled alone)."""
    if name not in BACKENDS:
        raise ValueError(f"unknown crypto backend {name!r}; known: {sorted(BACKENDS)}")
    for label, value in (("n_values", n_values), ("repeats", repeats)):
        check_whole(value, label, 1)
    if key_bits is not None and not is_whole(key_bits):
        raise ValueError(f"key_bits must be a whole number, got {key_bits!r}")
    keys, evaluator = make_backend(name, **backend_options(name, key_bits,
                                                           one_per_ciphertext))
    n_values = -(-int(n_values) // keys.slots) * keys.slots
    rng = np.random.default_rng(seed)
    values = rng.standard_normal(n_values)
    # the protocol's multipliers are step weights in [0, 2^16] (hyfdca._round)
    multipliers = rng.integers(0, 2**16 + 1, size=n_values if keys.slots == 1 else 1)
    a, b = keys.encrypt(values), keys.encrypt(values[::-1].copy())
    jobs = {"encrypt": lambda: keys.encrypt(values),
            "decrypt": lambda: keys.decrypt(a),
            "add": lambda: evaluator.add(a, b),
            "multiply": lambda: evaluator.multiply(a, multipliers, 16)}
    wire = evaluator.nbytes(a) / n_values
    key_size = inspect.signature(BACKENDS[name]).parameters.get("n_length")
    used_bits = None if key_size is None else int(key_bits or key_size.default)
    costs = []
    for operation in OPERATIONS:
        jobs[operation]()   # untimed: a first call loads contexts and warms caches
        best = np.inf
        for _ in range(repeats):
            start = time.perf_counter()
            jobs[operation]()
            best = min(best, time.perf_counter() - start)
        costs.append(OperationCost(name, used_bits, operation, n_values, best, wire))
    return costs


def operations_table(costs):
    """Markdown table of :func:`measure_operations` results."""
    lines = ["| backend | key bits | operation | n | per value (ms) | per vector (s) | "
             "values/s | bytes/value |", "|---|---|---|---|---|---|---|---|"]
    for c in costs:
        lines.append(f"| {c.backend} | {c.key_bits or '-'} | {c.operation} | {c.n_values} | "
                     f"{1e3 * c.per_value:.4g} | {c.seconds:.4g} | {c.throughput:.4g} | "
                     f"{c.bytes_per_value:.0f} |")
    return "\n".join(lines)


# --- round breakdown ----------------------------------------------------------------------

class _CryptoTimer:
    """Times and counts every crypto operation of a run, charged to the acting client or
    the server.

    The acting client is known by wrapping each client's public methods (the protocol
    calls one client at a time); everything else is the server's. Secure-sum masking
    (line search, certificate) is not counted: a few values per round."""

    def __init__(self, run):
        self.acting = None
        self.client_seconds = np.zeros(len(run.clients))
        self.server_seconds = 0.0
        self.counts = run.counts
        # operations per party (clients, then the server), per ciphertext as run.counts
        self.operations = np.zeros((len(run.clients) + 1, len(OPERATIONS)), dtype=np.int64)
        key_holders = {id(c.keys): c.keys for c in run.clients}.values()
        targets = [(keys, ("encrypt", "decrypt", "refresh")) for keys in key_holders]
        targets.append((run.transport.evaluator, ("add", "multiply", "add_at")))
        for obj, names in targets:
            for op in names:
                setattr(obj, op, self._timed(getattr(obj, op)))
        for client in run.clients:
            for attr in dir(client):
                method = getattr(client, attr)
                if not attr.startswith("_") and inspect.ismethod(method):
                    setattr(client, attr, self._acting_as(client.id, method))

    def _timed(self, operation):
        def timed(*args, **kwargs):
            before = self.counts.as_dict()
            start = time.perf_counter()
            try:
                return operation(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - start
                after = self.counts.as_dict()
                party = -1 if self.acting is None else self.acting
                self.operations[party] += [after[op] - before[op] for op in OPERATIONS]
                if self.acting is None:
                    self.server_seconds += elapsed
                else:
                    self.client_seconds[self.acting] += elapsed
        return timed

    def _acting_as(self, client_id, method):
        def acting(*args, **kwargs):
            outer, self.acting = self.acting, client_id
            try:
                return method(*args, **kwargs)
            finally:
                self.acting = outer
        return acting

    def take(self):
        """(slowest client's crypto seconds, server's, everyone's, the operations per
        party) since the last call; reset."""
        out = (float(self.client_seconds.max()), self.server_seconds,
               float(self.client_seconds.sum()) + self.server_seconds,
               self.operations.copy())
        self.client_seconds[:] = 0.0
        self.server_seconds = 0.0
        self.operations[:] = 0
        return out


def charged_seconds(operations, costs):
    """Encryption seconds of a round charged from its operations per party (rows: the
    clients, then the server; columns: OPERATIONS) at per-operation ``costs``: the slowest
    client's encrypt + decrypt seconds plus the server's add + multiply seconds, the same
    split as the measured figure."""
    prices = np.array([costs[op] for op in OPERATIONS], dtype=np.float64)
    per_party = np.asarray(operations, dtype=np.float64) @ prices
    return float(per_party[:-1].max(initial=0.0)) + float(per_party[-1])


def charged_encryption(breakdown, costs):
    """Mean encryption seconds per round that a :func:`round_breakdown`'s operations per
    party cost at ``costs`` (seconds per operation; :func:`charged_seconds`). A plaintext
    run's operations are those of any backend with one value per ciphertext (the same
    protocol), so this prices paillier without running it."""
    return float(np.mean([charged_seconds(ops, costs) for ops in breakdown["operations"]]))


def round_breakdown(dataset, settings, *, crypto="plain", crypto_options=None, rounds=5,
                    warmup=1, seed=0, latencies=LATENCIES):
    """Mean seconds per round of HyFDCA on ``dataset`` over ``rounds`` rounds after
    ``warmup``: computation, encryption (measured), and communication at each latency.
    Returns a dict with the per-round means (also ``wall``: the one-process run's seconds,
    every client in turn; ``encryption_all``: every client's crypto seconds and the
    server's, the part of ``wall`` that is encryption; ``bytes``: up and down), the RTC
    per round and one row per latency; ``operations``: each measured round's operations
    per party (:func:`charged_encryption` prices them)."""
    from hyfdca._protocol import HyFDCARun

    for label, value, least in (("rounds", rounds, 1), ("warmup", warmup, 0)):
        check_whole(value, label, least)
    run = HyFDCARun(dataset, settings, crypto=crypto, crypto_options=crypto_options,
                    seed=seed)
    timer = _CryptoTimer(run)
    compute, encryption, rtc, wall, everyone, sent, counted = [], [], [], [], [], [], []
    for r in range(warmup + rounds):
        start = time.perf_counter()
        record = run.step()
        elapsed = time.perf_counter() - start
        client_s, server_s, all_s, operations = timer.take()
        if r >= warmup:  # the first round compiles kernels and fills caches
            counted.append(operations.tolist())  # JSON-ready (profile.json)
            compute.append(record["compute_seconds"])
            encryption.append(client_s + server_s)
            rtc.append(record["rtc"])
            wall.append(elapsed)
            everyone.append(all_s)
            sent.append(record["bytes_up"] + record["bytes_down"])
    out = dict(backend=crypto, rounds=rounds, computation=float(np.mean(compute)),
               encryption=float(np.mean(encryption)), rtc=float(np.mean(rtc)),
               wall=float(np.mean(wall)), encryption_all=float(np.mean(everyone)),
               bytes=float(np.mean(sent)), operations=counted)
    out["rows"] = [dict(latency=lat, computation=out["computation"],
                        encryption=out["encryption"], communication=lat * out["rtc"])
                   for lat in latencies]
    return out


def round_costs_table(breakdowns, reference="paillier"):
    """Markdown table of :func:`round_breakdown` results (``label`` or ``backend`` names
    a row): wall seconds per round, encryption seconds per round (slowest client +
    server), encryption's share of the wall time (everyone's crypto seconds), MB per round
    and the ratio of ``reference``'s encryption seconds to the row's (when measured). A
    row without a figure (a charged row has encryption seconds only) shows "-"."""
    ref = next((b for b in breakdowns if _label(b) == reference), None)
    lines = ["| backend | s per round | encryption s per round | encryption share | "
             "MB per round |" + (f" {reference}'s encryption / this |" if ref else ""),
             "|---|---|---|---|---|" + ("---|" if ref else "")]
    for b in breakdowns:
        measured = "wall" in b
        wall, share, mb = ((f"{b['wall']:.4g}", f"{b['encryption_all'] / b['wall']:.0%}",
                            f"{b['bytes'] / 1e6:.3f}") if measured else ("-", "-", "-"))
        row = f"| {_label(b)} | {wall} | {b['encryption']:.4g} | {share} | {mb} |"
        if ref:
            row += f" {encryption_ratio(ref, b):.1f}x |"
        lines.append(row)
    return "\n".join(lines)


def encryption_ratio(reference, breakdown):
    """reference's encryption seconds per round over the breakdown's."""
    e = breakdown["encryption"]
    return reference["encryption"] / e if e > 0 else float("inf")


def _label(breakdown):
    return breakdown.get("label", breakdown["backend"])


def breakdown_table(breakdowns):
    lines = ["| backend | latency (s/RTC) | RTC/round | computation (s) | encryption (s) | "
             "communication (s) | total (s) |", "|---|---|---|---|---|---|---|"]
    for b in breakdowns:
        for row in b["rows"]:
            total = row["computation"] + row["encryption"] + row["communication"]
            lines.append(f"| {b['backend']} | {row['latency']:g} | {b['rtc']:.1f} | "
                         f"{row['computation']:.4g} | {row['encryption']:.4g} | "
                         f"{row['communication']:.4g} | {total:.4g} |")
    return "\n".join(lines)


def plot_breakdown(breakdowns, path, *, title="HyFDCA time per round"):
    """Stacked bars (computation, encryption, communication), one group per latency and
    one bar per backend; log-free seconds on the y axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    latencies = [row["latency"] for row in breakdowns[0]["rows"]]
    width = 0.8 / len(breakdowns)
    colors = {"computation": "#4C72B0", "encryption": "#DD8452", "communication": "#55A868"}
    fig, ax = plt.subplots(figsize=(2.2 + 1.6 * len(latencies) * len(breakdowns) ** 0.5, 4),
                           constrained_layout=True)
    for j, b in enumerate(breakdowns):
        for i, row in enumerate(b["rows"]):
            x, bottom = i + (j - (len(breakdowns) - 1) / 2) * width, 0.0
            for part, color in colors.items():
                ax.bar(x, row[part], width * 0.9, bottom=bottom, color=color,
                       label=part if (i, j) == (0, 0) else None)
                bottom += row[part]
            ax.text(x, bottom, b["backend"], ha="center", va="bottom", fontsize=7,
                    rotation=90)
    ax.set_xticks(range(len(latencies)))
    ax.set_xticklabels([f"{lat:g} s/RTC" for lat in latencies])
    ax.set_xlabel("round-trip latency")
    ax.set_ylabel("seconds per outer iteration")
    ax.set_title(title)
    ax.legend()
    ax.margins(y=0.25)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
