"""Which clients take part in each round: full, a random fraction, or cyclic subsets.

Shared by HyFDCA and the baselines, so that with the same seed every method sees the same
clients in the same rounds. All draws come from ``default_rng([seed, 0])``.
"""

import numpy as np

from solvers import check_whole

KINDS = ("full", "fraction", "cyclic")


def cyclic_subsets(fraction):
    """How many subsets take turns under cyclic participation at ``fraction``: ceil(1/f),
    with 1/f's rounding error forgiven (1/(1/49) is 49.00000000000001 in floating point:
    49 subsets, not 50)."""
    if not 0 < fraction <= 1:
        raise ValueError(f"cyclic participation needs a fraction in (0, 1], got {fraction}")
    return max(1, int(np.ceil(1.0 / fraction - 1e-9)))


def draw_size(fraction, n_clients):
    """Clients drawn each round under participation ``fraction``: round(f K) (Python's
    round), at least one."""
    return max(1, int(round(fraction * n_clients)))


class Participation:
    """Available clients per round.

    ``fraction``: round(f K) clients (Python's round: halves to even, 4 of 9 at f = 0.5;
    at least one) drawn without replacement each round.
    ``cyclic``: the clients are split once into ceil(1/f) disjoint subsets (a seeded
    permutation) that take turns; at most one subset per client. ``full``: everyone, every round.
    """

    def __init__(self, kind, fraction, n_clients, seed):
        if kind not in KINDS:
            raise ValueError(f"participation must be one of {KINDS}, got {kind!r}")
        if not 0 < fraction <= 1:
            raise ValueError(f"fraction must be in (0, 1], got {fraction}")
        for name, value, least in (("n_clients", n_clients, 1), ("seed", seed, 0)):
            check_whole(value, name, least)
        self.kind, self.fraction, self.n_clients = kind, float(fraction), int(n_clients)
        self.rng = np.random.default_rng([int(seed), 0])
        self.cycles = None
        if kind == "cyclic":
            n_subsets = cyclic_subsets(fraction)
            if n_subsets > self.n_clients:
                raise ValueError(
                    f"cyclic participation at fraction {fraction:g} takes turns in "
                    f"ceil(1/f) = {n_subsets} subsets, more than the {self.n_clients} "
                    f"clients: some rounds would have no client; use a fraction >= "
                    f"1/{self.n_clients}")
            self.cycles = [np.sort(s) for s in
                           np.array_split(self.rng.permutation(n_clients), n_subsets)]

    @property
    def draw_size(self):
        """Clients drawn each round under ``fraction``: round(f K), at least one."""
        return draw_size(self.fraction, self.n_clients)

    @property
    def everyone_each_round(self):
        """Whether every client takes part in every round: full participation, a fraction
        that draws all K (f = 0.9 of 4 clients, any f of 1), or cyclic turns in one
        subset."""
        if self.kind == "cyclic":
            return len(self.cycles) == 1
        return self.kind == "full" or self.draw_size >= self.n_clients

    def available(self, round_):
        """Sorted ids of the clients available in round ``round_`` (call once per round,
        in order: the fraction model draws from the stream)."""
        if self.kind == "full":
            return np.arange(self.n_clients)
        if self.kind == "cyclic":
            return self.cycles[round_ % len(self.cycles)]
        return np.sort(self.rng.choice(self.n_clients, size=self.draw_size, replace=False))
