"""Per-round history of a HyFDCA run, with export to CSV and JSON."""

import csv
import json

import numpy as np

ROUND_FIELDS = ("round", "available", "step", "rtc", "bytes_up", "bytes_down",
                "encrypt", "decrypt", "add", "multiply", "compute_seconds", "compute_ops",
                "protocol_seconds", "encryption_seconds")
# encryption_seconds: filled in later by whoever measures it (the experiments' time model),
# 0 until then. compute_ops: the slowest present client's local work, sum over its local
# steps of (non-zeros of the row + 1), the unit of the deterministic time model; NaN for a
# method that does not count it.
OPTIONAL_ROUND_FIELDS = {"encryption_seconds": 0.0, "compute_ops": float("nan")}
EVAL_FIELDS = ("primal", "dual", "gap", "relative_loss", "validation_accuracy",
               "iterate_primal", "iterate_dual")
# primal: P of the model the evaluation certifies (HyFDCA: the certified point);
# iterate_primal: P of the method's current iterate (HyFDCA: the point its certificate
# offers, w(alpha) or its proximal iterate x_t; a method without a certified point: the
# same as primal); dual and iterate_dual the same for the lower
# bound (HyFDCA: D at the certified dual point, and D(alpha))
CERTIFICATE_FIELDS = ("available", "rtc", "encrypt", "decrypt", "add", "multiply",
                      "encryption_seconds")
# what a certificate evaluated at a round cost (HyFDCA, whose model and stopping test need
# it: every client, three round trips, four where it searches x_{t-1} as well): its
# clients, round trips and operation counts;
# encryption_seconds filled in by the time model as for a round, 0 until then


def local_work(indptr, steps):
    """A client's ``compute_ops`` for local steps at the CSR rows ``steps`` (repeats
    count): sum over the steps of (non-zeros of the row + 1)."""
    steps = np.asarray(steps, dtype=np.int64)
    return int(np.sum(indptr[steps + 1] - indptr[steps]) + steps.size)


def _finite_or_none(value):
    """A number as :func:`_plain` gives it; None for NaN and inf (JSON has neither)."""
    if not isinstance(value, (int, float, np.number, np.bool_)):
        return value   # None, or a value that is not a number (written as it is)
    value = _plain(value)
    return None if isinstance(value, float) and not np.isfinite(value) else value


def _plain(value):
    """A number as a Python int or float (JSON-able); None stays None."""
    if value is None or isinstance(value, (bool, np.bool_)):
        return None if value is None else bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    return float(value)


def best_pair(evaluations):
    """((P_best, its round), (D_best, its round)): the smallest finite primal and the
    largest finite dual of ``evaluations`` (round -> {"primal", "dual", ...}, as
    :attr:`History.evaluations`), each at its earliest round; (NaN, None) where none is
    finite."""
    def best(name, sign):
        finite = [(sign * e[name], r) for r, e in evaluations.items()
                  if np.isfinite(e[name])]
        if not finite:
            return np.nan, None
        value, round_ = min(finite)
        return float(sign * value), round_
    return best("primal", 1.0), best("dual", -1.0)


class History:
    """Rounds (traffic, crypto counts, slowest client's compute) and evaluations
    (primal, dual, gap, relative loss (P - P*)/P* when P* is known, validation accuracy).

    ``rows()`` merges them: one row per round, evaluation columns NaN where not evaluated.
    Row 0 is the starting point (alpha = 0). ``certificates``: round -> what the
    evaluation at that round cost the protocol (:meth:`add_certificate_cost`; HyFDCA's
    certificates, which :meth:`simulated_time` charges).
    """

    def __init__(self, p_star=None):
        self.p_star = p_star
        self.rounds = []
        self.evaluations = {}
        self.certificates = {}

    def add_round(self, record):
        record = {**OPTIONAL_ROUND_FIELDS, **record}
        self.rounds.append({f: record[f] for f in ROUND_FIELDS})

    def add_evaluation(self, round_, primal, dual, accuracy=None, iterate_primal=None,
                       iterate_dual=None):
        rel = (primal - self.p_star) / self.p_star if self.p_star else np.nan
        self.evaluations[round_] = dict(primal=primal, dual=dual, gap=primal - dual,
                                        relative_loss=rel,
                                        validation_accuracy=np.nan if accuracy is None
                                        else accuracy,
                                        iterate_primal=primal if iterate_primal is None
                                        else iterate_primal,
                                        iterate_dual=dual if iterate_dual is None
                                        else iterate_dual)

    def add_certificate_cost(self, round_, cost):
        """Record what the certificate at ``round_`` cost (``CERTIFICATE_FIELDS`` of
        ``cost``, encryption_seconds 0 unless given)."""
        cost = {"encryption_seconds": 0.0, **cost}
        self.certificates[round_] = {f: cost[f] for f in CERTIFICATE_FIELDS}

    @property
    def last_evaluation(self):
        return self.evaluations[max(self.evaluations)]

    def certified(self):
        """(P_best, D_best): the smallest finite primal and the largest finite dual over
        the evaluations (NaN where there is none). Since D(alpha) <= P* <= P(w) for every
        alpha and w, P_best - D_best is a certified gap of the model with the smallest
        primal."""
        if not self.evaluations:
            raise ValueError("History.certified: no evaluation recorded yet")
        (primal, _), (dual, _) = best_pair(self.evaluations)
        return primal, dual

    def rows(self):
        start = dict.fromkeys(ROUND_FIELDS, 0)
        rows = []
        for record in [start] + self.rounds:
            row = dict(record)
            row.update(self.evaluations.get(record["round"], dict.fromkeys(EVAL_FIELDS, np.nan)))
            rows.append(row)
        return rows

    def column(self, name):
        return np.array([row[name] for row in self.rows()], dtype=float)

    def simulated_time(self, latency=0.0):
        """Cumulative wall time as if clients ran in parallel: per round the slowest
        client's compute, the encryption time (when measured) and RTC x latency, and at a
        round with a certificate its encryption time and RTC x latency (index r: after
        round r and its certificate; index 0 holds round 0's)."""
        per_round = (self.column("compute_seconds") + self.column("encryption_seconds")
                     + latency * self.column("rtc"))
        for round_, cost in self.certificates.items():
            if round_ < per_round.size:
                per_round[round_] += cost["encryption_seconds"] + latency * cost["rtc"]
        return np.cumsum(per_round)

    def state(self):
        """Everything the history holds, as JSON-able values (floats exact, NaN kept)."""
        return dict(p_star=self.p_star,
                    rounds=[{k: _plain(v) for k, v in r.items()} for r in self.rounds],
                    evaluations=[[int(t), {k: _plain(v) for k, v in e.items()}]
                                 for t, e in self.evaluations.items()],
                    certificates=[[int(t), {k: _plain(v) for k, v in c.items()}]
                                  for t, c in self.certificates.items()])

    @classmethod
    def from_state(cls, state):
        """The History :meth:`state` described."""
        history = cls(p_star=state["p_star"])
        history.rounds = [dict(r) for r in state["rounds"]]
        # states saved before the iterate's fields existed: the iterate is the model;
        # the fields in EVAL_FIELDS' order, as add_evaluation writes them
        history.evaluations = {
            int(t): {name: e.get(name, e[name.removeprefix("iterate_")])
                     for name in EVAL_FIELDS}
            for t, e in state["evaluations"]}
        history.certificates = {int(t): dict(c) for t, c in state.get("certificates", [])}
        return history

    def to_csv(self, path):
        rows = self.rows()
        with open(path, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)

    def to_json(self, path):
        """The rows as JSON (NaN and inf as null); the text is made before the file is
        opened, so a value JSON cannot hold leaves no partial file."""
        clean = [{k: _finite_or_none(v) for k, v in row.items()} for row in self.rows()]
        text = json.dumps({"p_star": _finite_or_none(self.p_star), "rows": clean}, indent=1)
        with open(path, "w") as handle:
            handle.write(text)
