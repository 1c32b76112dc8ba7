"""HyFDCA settings: the variants, their parameters, and the checks between them."""

from dataclasses import dataclass, fields, replace

import numpy as np

from feddata import PARTICIPATION_KINDS as PARTICIPATION
from feddata.participation import cyclic_subsets
from hyfdca._round import STEP_BITS
from hyfdca._sigma import partial_sigma, safe_sigma
from solvers import (CLASSIFICATION_LOSSES, LOSS_CODES, check_positive, loss_code,
                     loss_value)

# auto-partial's iic at lam >= AUTO_PARTIAL_LAM. Below it, auto-partial's and the capped
# line search's iic are scaled by (lam / AUTO_PARTIAL_LAM) ** IIC_LAM_POWER
# (_preset_values). Stale margins drift by about H (x_i . x_j) / (lam N) per round, so
# holding the drift of AUTO_PARTIAL_LAM would scale H with lam (docs/algorithm.md 5.3).
# Measured, that local work crawls; H proportional to the square root of lam ended lower
# in all but one auto-partial cell measured (a9a 3x3 cyclic in four subsets) and in all
# but one capped-line-search data set (Fashion-MNIST quadrants:500), and raised no
# certified point above its start (section 6, twenty-eighth and twenty-ninth rounds).
# The capped line search's stall fallback scales AUTO_PARTIAL_IIC the other way, by
# (lam / AUTO_PARTIAL_LAM) ** FALLBACK_LAM_POWER: below AUTO_PARTIAL_LAM the line search
# stalls far from the optimum (HyFDCASettings.after_stall; section 6, thirtieth round).
# The scaled line search keeps its iic at every lam. Settings changed after from_variant
# (dataclasses.replace) keep the iic resolved at the lam they were made with.
AUTO_PARTIAL_IIC, AUTO_PARTIAL_LAM = 0.03, 1e-4
IIC_LAM_POWER, FALLBACK_LAM_POWER = 0.5, -0.5
# The drift above grows with the data's coherence c (feddata.Layout.coherence, ||mean
# row||^2 / mean q_i; 1 for signed data): the lam scaling was calibrated on a9a (c =
# 0.447). With iic_coherence (auto-partial), bind() raises the iic of data less coherent
# than COHERENCE_REF by (COHERENCE_REF / c) ** IIC_LAM_POWER, at every lam, up to
# COHERENCE_IIC_CAP: iic = min(COHERENCE_IIC_CAP, AUTO_PARTIAL_IIC ((min(1, lam /
# AUTO_PARTIAL_LAM) max(1, COHERENCE_REF / c)) ** IIC_LAM_POWER), so nothing changes at c
# >= COHERENCE_REF. The cap is the capped line search's iic, the largest measured safe
# on incoherent data (docs/algorithm.md section 6, thirty-second and thirty-third rounds).
COHERENCE_REF = 0.4
COHERENCE_IIC_CAP = 0.3
IIC_LAM_SCALED = ("auto-partial", "capped-line-search")  # the presets _preset_values scales
# prox="auto": mu = lam + kappa is the mean q_i / N (the rounds' problem conditioned as
# SDCA likes it), but at most prox_cap lam (default PROX_CAP): the certificate's dual is
# the original problem's, which lags the proximal one by about mu / lam, and stale state
# under partial participation lags more (docs/algorithm.md section 6, ninth round)
PROX_CAP = 10.0
# second_inner_product="auto" (the capped line search): phase E runs where the rounds' mu
# is above PHASE_E_MU lam, i.e. where the proximal outer loop is strong; its kappa then
# amplifies stale stored parts, which phase E refreshes for the present clients at one
# more round trip (docs/algorithm.md section 6, tenth round). The capped line search's
# mu may then reach CAPPED_PROX_CAP lam; so may the scaled line search's, with phase E
# there too (section 6, eleventh round). prox="strong" (the scaled line search until the
# fortieth session, an option now) runs the outer loop only there, and none where mu
# would be at most PHASE_E_MU lam: the weak loop halves a9a's rounds at f = 0.9 (section
# 6, thirty-fifth round).
PHASE_E_MU = 3.0
CAPPED_PROX_CAP = 40.0
PROX_RULES = ("auto", "strong")  # prox values resolved on the data by bind()
SIGMA_RULES = ("safe", "partial")  # sigma values resolved on the data by bind()
# auto-full's line_search_relax theta: the server steps theta g*, not the exact g*. The
# exact step zig-zags (consecutive dw nearly opposite, g* small and large in turn); the
# relaxed step breaks the zig-zag and never lowers the dual (_round.choose_step), the
# relaxed steepest descent of Raydan and Svaiter (docs/algorithm.md section 6,
# twenty-fourth round). Only where the line search is exact (HyFDCASettings.
# exact_line_search): not for the logistic loss, whose grid search is not relaxed.
AUTO_FULL_RELAX = 0.9
# what HyFDCASettings.exact_line_search asks, for the checks of the options that need it
EXACT_LINE_SEARCH_NEEDS = ("the exact line search of a loss with a quadratic conjugate: it "
                           "needs line_search=True and a loss other than logistic")
# prox_rounds="auto": the centre moves every STRONG_PROX_ROUNDS rounds where the outer
# loop is strong (mu > PHASE_E_MU lam), every WEAK_PROX_ROUNDS rounds elsewhere. A strong
# outer loop amplifies its inner solves' error kappa / lam times (the dual at an alpha of
# the proximal problem), and under partial participation 25 rounds left an error floor
# that the dual bound could not pass; 50 rounds (each client present about 25 times at
# f = 0.5) lower it, while a weak loop (SMS 3x3 at lam 1e-4, mu = 1.8 lam) is slowed by
# them (docs/algorithm.md section 6, twelfth round).
STRONG_PROX_ROUNDS, WEAK_PROX_ROUNDS = 50, 25

VARIANTS = {
    # The paper's published method: sigma = 1, rho = 1, no line search, independent draws
    # (Algorithm 5 draws uniformly at random), mean-over-holders aggregation.
    "paper": dict(sigma=1.0, rho="one", line_search=False, sampling="independent",
                  draw="random", aggregation="mean", iic=0.01),
    # CoCoA+-safe curvature: sigma = the number of sample groups whose updates add up.
    "sigma-safe": dict(sigma="safe", rho="one", line_search=False, sampling="shared",
                       draw="permuted", aggregation="mean", iic=0.1),
    # Local margin correction scaled by rho_i = q_i / ||x_i^k||^2.
    "rho": dict(sigma=1.0, rho="norm", line_search=False, sampling="shared",
                draw="permuted", aggregation="mean", iic=0.1),
    # Dual line search on the aggregated update (docs/algorithm.md section 5, lesson (c)).
    "line-search": dict(sigma=1.0, rho="one", line_search=True, sampling="shared",
                        draw="permuted", aggregation="mean", iic=1.0),
    # All three together.
    "combined": dict(sigma="safe", rho="norm", line_search=True, sampling="shared",
                     draw="permuted", aggregation="mean", iic=1.0),
    # Per regime (docs/algorithm.md section 5), chosen by benchmarks/hyfdca_variants.py.
    # When every round's update is fully known to the server (full participation, or
    # horizontal data where each sample has one holder, so absent clients' state is never
    # stale): rho + line search + a full local pass, each round an ascent step (the
    # line search's step relaxed to AUTO_FULL_RELAX g*).
    # Otherwise, where the line search overshoots on stale state (fewer than half of the
    # clients present): the "partial" sigma (hyfdca._sigma: the safe value of the sample
    # groups present plus a staleness term) with rho and short rounds (iic 0.03 at
    # lam >= 1e-4, less below: IIC_LAM_POWER), but at least 10 steps, so that small
    # clients do not spend a round on one or two.
    # All the auto presets weight each holder's update by its share of the row's norm
    # (holder_weights="norm-share", docs/algorithm.md section 5.3).
    # auto-full and the line-search presets run the accelerated proximal outer loop
    # (prox="auto"; under partial participation's staleness the centre moved every 25
    # rounds, not 10, every 50 under the capped step where the loop is strong, and phase
    # E where mu > PHASE_E_MU lam: without phase E the scaled line search's dual fell by
    # 40 P* on SMS at lam 1e-5 and f = 0.9): docs/algorithm.md
    # section 6, ninth to eleventh and thirty-fifth rounds. prox_adapt (weaken the outer
    # loop where the original dual falls) is an option, not in a preset: it takes SMS at
    # lam 1e-5 from 110 to 80 rounds and news20-like from 400 to 860 (section 6,
    # sixteenth round).
    # auto-full's loop is warm-started (prox_warm_start): its first period runs kappa 0
    # and its first centre is the w reached, not c = 0, where SMS's dual fell by 44 P*
    # (section 6, seventeenth round). Its certificates certify the outer loop's iterate
    # (certify_outer_iterate; section 6, eighteenth round), and search the line between
    # its last two rounds' iterates as well, which the line search's zig-zag leaves on
    # either side of the optimum (certify_two_iterates; section 6, twenty-sixth round),
    # and where x_{t-1} was searched already (a certificate every round) the running mean
    # of the points certificates offered (certify_running_mean; section 6, thirty-first
    # round).
    "auto-full": dict(sigma=1.0, rho="norm", line_search=True, sampling="shared",
                      draw="permuted", aggregation="mean", iic=1.0,
                      holder_weights="norm-share", prox="auto", prox_warm_start=True,
                      certify_outer_iterate=True, certify_two_iterates=True,
                      certify_running_mean=True, line_search_relax=AUTO_FULL_RELAX),
    # (its iic is scaled with the square root of lam below AUTO_PARTIAL_LAM by
    # _preset_values)
    "auto-partial": dict(sigma="partial", rho="norm", line_search=False, sampling="shared",
                         draw="permuted", aggregation="mean", iic=AUTO_PARTIAL_IIC, min_H=10,
                         holder_weights="norm-share", iic_coherence=True),
    # Issue 14's prototype without its rollback: rho, and the line search kept on with
    # its curvature scaled by the absent holders' share of the moved rows' norms. "auto"
    # when most clients take part (fraction >= AUTO_SCALED_FRACTION): there auto-partial,
    # which adds nearly every client's update with no line search, diverged on a9a 5x5
    # and 12x12, and this certified (docs/algorithm.md section 4). Its curvature is
    # auto-full's sigma = 1, not the prototype's "safe": the line search bounds the step
    # either way, and sigma = 1 certified faster in the regime matrix at f = 0.9 (hinge;
    # squared and smoothed hinge in a probe: docs/algorithm.md section 6, "Sigma 1").
    # Its outer loop starts at c = 0: warm-started as auto-full's it was faster on SMS at
    # lam 1e-5 but did not certify news20-like 12x12 (section 6, nineteenth round).
    "scaled-line-search": dict(sigma=1.0, rho="norm", line_search=True,
                               sampling="shared", draw="permuted", aggregation="mean",
                               iic=0.3, curvature_scaling="absent-share",
                               holder_weights="norm-share", prox="auto",
                               prox_cap=CAPPED_PROX_CAP, prox_rounds=25,
                               second_inner_product="auto"),
    # The same with its step capped at 0.3 and its iic scaled as auto-partial's (by
    # _preset_values); once its line search stalls (g = 0 in half of the last 100
    # rounds, under cyclic participation in half of each subset's: _round.stalls) the run
    # goes on with auto-partial's rounds for good, at auto-partial's iic of lam >=
    # AUTO_PARTIAL_LAM, more below it (HyFDCASettings.after_stall). "auto" where half of
    # the clients or more take part (below AUTO_SCALED_FRACTION) and under cyclic
    # participation with at most 3 subsets (docs/algorithm.md section 4).
    # Its proximal outer loop takes mu up to CAPPED_PROX_CAP lam, and with mu above
    # PHASE_E_MU lam phase E as well (second_inner_product="auto"); at or below it (mu is
    # min(mean q_i / N, cap lam)), the rounds are those of the seventh session's cap 3.
    "capped-line-search": dict(sigma="safe", rho="norm", line_search=True,
                               sampling="shared", draw="permuted", aggregation="mean",
                               iic=0.3, curvature_scaling="absent-share", step_cap=0.3,
                               holder_weights="norm-share", stall_fallback=True,
                               prox="auto", prox_cap=CAPPED_PROX_CAP, prox_rounds="auto",
                               second_inner_product="auto"),
}
# what after_stall takes from auto-partial; it also turns the line search off (g = 1)
# and keeps the rest of the capped preset, its outer loop and phase E included
FALLBACK_PRESET, FALLBACK_FIELDS = "auto-partial", ("iic", "min_H")
HOLDER_WEIGHTS = ("equal", "norm-share")  # _round.aggregation_weights
DEFAULT_VARIANT = "auto"
AUTO_SCALED_FRACTION = 0.75  # "auto" under participation "fraction" >= this: scaled line search
AUTO_CAPPED_FRACTION = 0.5  # ... >= this: the capped line search
AUTO_CAPPED_CYCLE = 3  # ... and cyclic participation in at most this many subsets
VARIANT_NAMES = (DEFAULT_VARIANT, *VARIANTS)  # what from_variant accepts


@dataclass(frozen=True)
class HyFDCASettings:
    """Everything that defines a HyFDCA run except the data and the crypto keys.

    ``H`` (inner steps per client and round) or ``iic`` (the paper's inner-iterations
    constant: H_k = max(min(min_H, |I_k|), round(iic * |I_k|))) must be given.
    ``step_cap`` bounds the server's step g (the line search's g* is clipped to
    [0, step_cap]; without line search g = step_cap: a damped step).
    ``line_search_relax`` = theta in (0, 1]: the exact line search's step is theta g*
    (before the cap; ``_round.choose_step`` says what the dual keeps); theta < 1 needs
    :attr:`exact_line_search`, and a preset's theta falls to 1 where that is off.
    ``curvature_scaling="absent-share"`` scales the line search's curvature
    lam ||dw||^2 by the share of the moved rows' norms that present holders carry
    (``_round.line_search_step``). ``sigma`` is a number, "safe"
    (``_sigma.safe_sigma``) or "partial" (the groups present in expectation plus a
    staleness term, ``_sigma.partial_sigma``); ``rho`` is "one" (the paper) or "norm";
    ``aggregation`` is "mean"
    (alpha_i moves by the weighted mean of its present holders' updates, absent ones
    counting as 0) or "consistent" (only samples whose holders are all present are drawn);
    ``holder_weights`` gives the mean's weights: "equal" (1/|C_i|, the paper) or
    "norm-share" (||x_i^k||^2 / q_i: the share of the row that holder k sees).
    ``draw_block`` = b: a client draws its H samples as whole blocks of b samples of one
    holder set (``hyfdca._draws``; 1: sample by sample). Set it to a packed backend's
    slots and, under shared sampling, a round moves about H / b ciphertexts per vector
    instead of nearly all of them.
    ``stall_fallback``: under partial participation, once the line search stalls
    (``_round.stalls``) the run goes on with :meth:`after_stall` for good.
    ``prox`` = kappa > 0 runs the rounds on the proximal problem P(w) + (kappa/2)
    ||w - c||^2 (regularisation mu = lam + kappa, better conditioned) and moves its
    centre c every ``prox_rounds`` rounds by Nesterov's extrapolation
    (``_round.next_prox_centre``: an accelerated proximal outer loop, docs/algorithm.md
    section 6); the certificate stays that of the original problem. 0: off. "auto":
    mu = min(mean_i q_i / N, prox_cap lam), kappa = max(0, mu - lam): the rounds' mu N
    is the mean squared row norm where that is at most prox_cap lam N (:meth:`bind`,
    from the layout's ``sq_norm_total``). "strong": the same kappa where mu > PHASE_E_MU
    lam, else 0 (no outer loop). ``prox_rounds`` "auto": STRONG_PROX_ROUNDS where mu >
    PHASE_E_MU lam, else WEAK_PROX_ROUNDS (:meth:`bind`). ``prox_adapt``: at each move
    of the centre where the original problem's dual D(alpha), which the server tracks
    from the line search's sums, is below -P(0) / 10, mu falls to mu conj / Q
    (``_round.weakened_outer_loop``; the engines keep the kappa it leaves as state).
    ``prox_warm_start``: the outer loop's first ``prox_rounds`` rounds run the original
    problem (kappa 0) and its first centre is the w they reach, not c = 0
    (``_round.starts_outer_loop``). ``certify_outer_iterate``: a certificate offers the
    iterate of the proximal problem the last round solved (before a move of the centre
    at its end: the outer loop's x_k), not that of the rounds' problem after the move
    (``_certificate.certified_problem``). ``certify_two_iterates`` (needs
    certify_outer_iterate; a preset's falls to False where that is off): the certified
    point is the best of the triangle of the last one, that iterate x_t and the one of
    the round before, x_{t-1}, where both rounds solved the same problem and the round
    before ended without a certificate (``_certificate.offered_points``; the
    certificate computes x_{t-1}'s margins as well: one more round trip).
    ``certify_running_mean`` (needs certify_two_iterates; a preset's falls to False
    where that is off): where x_{t-1} is not searched, the triangle's second vertex is
    the running mean of the points certificates offered since the doubling epoch before
    the last (``_certificate.offered_mean``; each client keeps the mean of its margins:
    no more round trips or encryptions).
    ``iic_coherence``: :meth:`bind` multiplies iic by max(1, COHERENCE_REF / c) **
    IIC_LAM_POWER (c the layout's coherence; 1 where the layout lacks it), at most up to
    COHERENCE_IIC_CAP, and sets the flag to False, so bound settings hold the iic the
    rounds use (a preset's falls to False where iic or H is given).
    """

    loss: str = "hinge"
    lam: float = 1e-4
    smoothing: float = 1.0
    H: int | None = None
    iic: float | None = None
    min_H: int = 1
    variant: str = DEFAULT_VARIANT
    sigma: float | str = 1.0
    rho: str = "one"
    line_search: bool = False
    sampling: str = "shared"
    draw: str = "permuted"
    draw_block: int = 1
    aggregation: str = "mean"
    participation: str = "full"
    fraction: float = 1.0
    second_inner_product: bool | str = False
    step_cap: float = 1.0
    line_search_relax: float = 1.0
    curvature_scaling: str = "none"
    holder_weights: str = "equal"
    stall_fallback: bool = False
    prox: float | str = 0.0
    prox_rounds: int = 10
    prox_cap: float = PROX_CAP
    prox_adapt: bool = False
    prox_warm_start: bool = False
    certify_outer_iterate: bool = False
    certify_two_iterates: bool = False
    certify_running_mean: bool = False
    iic_coherence: bool = False
    # fields given explicitly to from_variant (kept when bind() re-resolves "auto")
    overridden: tuple = ()
    # filled in by bind(); read through lam_n and sigma_bound, which refuse unbound settings
    n_samples: int = 0
    sigma_value: float | None = None

    @classmethod
    def from_variant(cls, variant=DEFAULT_VARIANT, **overrides):
        """Settings of a named variant, with any field overridden (None = keep).

        "auto" is "auto-full" under full participation; for losses other than logistic,
        "scaled-line-search" under participation "fraction" with fraction >=
        AUTO_SCALED_FRACTION and "capped-line-search" with fraction >=
        AUTO_CAPPED_FRACTION or under cyclic participation in at most AUTO_CAPPED_CYCLE
        subsets; "auto-partial" otherwise; :meth:`bind` turns the partial-participation
        presets into "auto-full" on horizontal data. A variant's default ``iic`` applies
        unless ``H`` or ``iic`` is given.
        """
        overrides = {k: v for k, v in overrides.items() if v is not None}
        name = variant
        if variant == "auto":
            name = _auto_preset(overrides.get("participation", "full"),
                                overrides.get("fraction", 1.0), overrides.get("loss", "hinge"))
        return cls._preset(variant, name, overrides)

    @classmethod
    def _preset(cls, variant, name, overrides):
        if name not in VARIANTS:
            raise ValueError(f"unknown variant {variant!r}; known: "
                             f"{sorted(set(VARIANTS) | {'auto'})}")
        values = dict(_preset_values(name, overrides.get("lam", cls.lam)), variant=variant,
                      overridden=tuple(sorted(overrides)))
        if "H" in overrides:
            values.pop("iic")
        values.update(overrides)
        settings = cls(**values)
        if "line_search_relax" not in overrides and not settings.exact_line_search:
            settings = replace(settings, line_search_relax=1.0)
        if "certify_two_iterates" not in overrides and not settings.certify_outer_iterate:
            settings = replace(settings, certify_two_iterates=False)
        if "certify_running_mean" not in overrides and not settings.certify_two_iterates:
            settings = replace(settings, certify_running_mean=False)
        if "iic_coherence" not in overrides and ("iic" in overrides or "H" in overrides):
            settings = replace(settings, iic_coherence=False)
        settings.validate()
        return settings

    def validate(self):
        loss_code(self.loss)
        checks = [
            (_positive_number(self.lam), f"lam must be positive, got {self.lam!r}"),
            (0 < self.smoothing < np.inf,
             f"smoothing must be a finite number > 0, got {self.smoothing}"),
            ((self.H is None) != (self.iic is None), "give exactly one of H and iic"),
            (self.H is None or (_whole(self.H) and self.H >= 1),
             f"H must be a whole number >= 1, got {self.H!r}"),
            (self.iic is None or 0 < self.iic < np.inf,
             f"iic must be a finite number > 0, got {self.iic}"),
            (_whole(self.min_H) and self.min_H >= 1,
             f"min_H must be a whole number >= 1, got {self.min_H!r}"),
            (self.sigma in SIGMA_RULES or (isinstance(self.sigma, (int, float))
                                           and not isinstance(self.sigma, bool)
                                           and 0 < self.sigma < np.inf),
             f"sigma must be a finite number > 0, 'safe' or 'partial', got "
             f"{self.sigma!r}"),
            (self.rho in ("one", "norm"), f"rho must be 'one' or 'norm', got {self.rho!r}"),
            (self.sampling in ("shared", "independent"),
             f"sampling must be 'shared' or 'independent', got {self.sampling!r}"),
            (self.draw in ("permuted", "random"),
             f"draw must be 'permuted' or 'random', got {self.draw!r}"),
            (type(self.draw_block) is int and self.draw_block >= 1,
             f"draw_block must be an integer >= 1, got {self.draw_block!r}"),
            (self.aggregation in ("mean", "consistent"),
             f"aggregation must be 'mean' or 'consistent', got {self.aggregation!r}"),
            (self.participation in PARTICIPATION,
             f"participation must be one of {PARTICIPATION}, got {self.participation!r}"),
            (0 < self.fraction <= 1, f"fraction must be in (0, 1], got {self.fraction}"),
            (_SMALLEST_STEP <= self.step_cap <= 1,
             f"step_cap must be in [2^-{STEP_BITS}, 1] (a step below rounds to 0 at the "
             f"step's {STEP_BITS} bits), got {self.step_cap}"),
            (isinstance(self.line_search_relax, (int, float))
             and _SMALLEST_STEP <= self.line_search_relax <= 1,
             f"line_search_relax must be in [2^-{STEP_BITS}, 1] (a step below rounds to "
             f"0 at the step's {STEP_BITS} bits), got {self.line_search_relax!r}"),
            (self.line_search_relax == 1 or self.exact_line_search,
             "line_search_relax < 1 relaxes " + EXACT_LINE_SEARCH_NEEDS),
            (self.curvature_scaling in ("none", "absent-share"),
             f"curvature_scaling must be 'none' or 'absent-share', got "
             f"{self.curvature_scaling!r}"),
            (self.holder_weights in HOLDER_WEIGHTS,
             f"holder_weights must be one of {HOLDER_WEIGHTS}, got {self.holder_weights!r}"),
            (self.curvature_scaling == "none" or self.exact_line_search,
             "curvature_scaling='absent-share' scales " + EXACT_LINE_SEARCH_NEEDS),
            (not self.stall_fallback or self.line_search,
             "stall_fallback watches the line search: it needs line_search=True"),
            (self.prox in PROX_RULES or (isinstance(self.prox, (int, float))
                                         and np.isfinite(self.prox) and self.prox >= 0),
             f"prox must be a number >= 0, 'auto' or 'strong', got {self.prox!r}"),
            (self.prox_rounds == "auto"
             or (type(self.prox_rounds) is int and self.prox_rounds >= 1),
             f"prox_rounds must be an integer >= 1 or 'auto', got {self.prox_rounds!r}"),
            (isinstance(self.prox_cap, (int, float)) and self.prox_cap >= 1,
             f"prox_cap must be a number >= 1, got {self.prox_cap!r}"),
            (self.line_search in (True, False),
             f"line_search must be True or False, got {self.line_search!r}"),
            (self.prox_adapt in (True, False),
             f"prox_adapt must be True or False, got {self.prox_adapt!r}"),
            (self.prox_warm_start in (True, False),
             f"prox_warm_start must be True or False, got {self.prox_warm_start!r}"),
            (self.certify_outer_iterate in (True, False),
             "certify_outer_iterate must be True or False, got "
             f"{self.certify_outer_iterate!r}"),
            (self.certify_two_iterates in (True, False),
             "certify_two_iterates must be True or False, got "
             f"{self.certify_two_iterates!r}"),
            (not self.certify_two_iterates or self.certify_outer_iterate,
             "certify_two_iterates searches between the iterates of the problem the last "
             "two rounds solved: it needs certify_outer_iterate=True"),
            (self.certify_running_mean in (True, False),
             "certify_running_mean must be True or False, got "
             f"{self.certify_running_mean!r}"),
            (not self.certify_running_mean or self.certify_two_iterates,
             "certify_running_mean searches the triangle in place of x_{t-1}: it needs "
             "certify_two_iterates=True"),
            (self.iic_coherence in (True, False),
             f"iic_coherence must be True or False, got {self.iic_coherence!r}"),
            (not self.iic_coherence or self.iic is not None,
             "iic_coherence scales iic: it needs iic, not H"),
            (not self.prox_adapt or self.loss in CLASSIFICATION_LOSSES,
             "prox_adapt compares the dual with P(0) = l(0), which the server knows for "
             f"the classification losses {CLASSIFICATION_LOSSES} only, not {self.loss!r}"),
            (not self.prox_adapt or (self.line_search and not self.stall_fallback),
             "prox_adapt tracks the dual through the line search's sums: it needs "
             "line_search=True and no stall_fallback (which turns the line search off)"),
            (not self.prox_adapt or self.loss != "logistic" or self.step_cap == 1,
             "prox_adapt with the logistic loss reads the line search's grid at the step: "
             "it needs step_cap=1"),
            (self.second_inner_product in (True, False, "auto"),
             f"second_inner_product must be True, False or 'auto', got "
             f"{self.second_inner_product!r}"),
        ]
        problems = [text for ok, text in checks if not ok]
        if problems:
            raise ValueError("invalid HyFDCA settings: " + "; ".join(problems))

    def bind(self, data):
        """Settings with the data-dependent values (N, sigma for its rules) filled in, from
        a FederatedDataset or its public Layout (they read only the layout).

        Variant "auto" under partial participation becomes "auto-full" when every sample
        has a single holder: absent clients then hold no stale state, w = w(alpha) after
        every round, and the line search is exact.
        """
        layout = data.layout() if hasattr(data, "layout") else data
        if self._is_untouched_partial_preset() and int(np.max(layout.holder_counts)) == 1:
            overrides = {name: getattr(self, name) for name in self.overridden}
            return self._preset("auto", "auto-full", overrides).bind(layout)
        sigma, iic = self.sigma, self._iic_on(layout)
        if sigma == "safe":
            sigma = safe_sigma(layout)
        elif sigma == "partial":
            sigma = partial_sigma(layout, self.participation, self.fraction,
                                  replace(self, iic=iic).inner_steps,
                                  1.0 / _lam_factor(self.lam, IIC_LAM_POWER))
        kappa = self._prox_on(layout)
        strong = self._is_strong(self.lam + kappa)
        phase_e = strong if self.second_inner_product == "auto" else self.second_inner_product
        rounds = self.prox_rounds
        if rounds == "auto":
            rounds = STRONG_PROX_ROUNDS if strong else WEAK_PROX_ROUNDS
        return replace(self, n_samples=layout.n_samples, sigma_value=float(sigma),
                       prox=kappa, second_inner_product=bool(phase_e), prox_rounds=rounds,
                       iic=iic, iic_coherence=False)

    def _iic_on(self, layout):
        """iic as the rounds use it: raised for data less coherent than COHERENCE_REF
        under ``iic_coherence`` (to at most COHERENCE_IIC_CAP), else as it is."""
        if not self.iic_coherence or layout.coherence is None:
            return self.iic
        raise_by = max(1.0, COHERENCE_REF / max(layout.coherence, 1e-300))
        return max(self.iic, min(COHERENCE_IIC_CAP, self.iic * raise_by ** IIC_LAM_POWER))

    def _prox_on(self, layout):
        """kappa as a number: ``prox`` resolved on the layout where it is "auto" or
        "strong"."""
        if self.prox not in PROX_RULES:
            return self.prox
        if layout.sq_norm_total is None:
            raise ValueError(f"prox={self.prox!r} sets kappa from the clients' total "
                             "squared norm ||X||_F^2, which this layout lacks "
                             "(Layout.sq_norm_total); give prox as a number")
        n = max(layout.n_samples, 1)
        mu = min(float(layout.sq_norm_total) / n / n, self.prox_cap * self.lam)
        if self.prox == "strong" and not self._is_strong(mu):
            return 0.0
        return max(0.0, mu - self.lam)

    def _is_strong(self, mu):
        """Whether the rounds' regularisation mu makes the outer loop strong (mu >
        PHASE_E_MU lam): where prox="strong" runs it, phase E runs and T is
        STRONG_PROX_ROUNDS."""
        return mu > PHASE_E_MU * self.lam

    @property
    def watches_stall(self):
        """The line search may fall back (``stall_fallback``), which it does only under
        partial participation: the fallback reaches the clients with the round's dual sync
        (phase A), and with everyone present the line search sees the exact dual."""
        return self.stall_fallback and self.participation != "full"

    @property
    def stall_turns(self):
        """The groups of rounds whose line search must each stall (:func:`hyfdca._round.
        stalls`): the ceil(1/f) subsets that take turns under cyclic participation, where
        one subset may stall far from the optimum while the others progress; else 1."""
        return cyclic_subsets(self.fraction) if self.participation == "cyclic" else 1

    def for_round(self, stalled, kappa=None):
        """The settings a round runs: :meth:`after_stall` once the line search stalled;
        with ``kappa`` (not None) the outer loop's kappa as ``prox_adapt`` left it."""
        settings = self.after_stall() if stalled else self
        if kappa is not None and kappa != settings.prox:
            settings = replace(settings, prox=float(kappa))
        return settings

    def after_stall(self):
        """The settings of the rounds after the line search stalled: no line search and
        g = 1, with auto-partial's local work (its min_H, and its iic of lam >= 1e-4
        times min(1, lam / 1e-4) ** FALLBACK_LAM_POWER, at most the capped line search's
        0.3, unless given: 0.03 at lam >= 1e-4; 0.095 at 1e-5, the capped line search's
        own, where it stalls far from the optimum (SMS 3x3: round 933, the certified point
        0.33 P* above P*); 0.3 at 1e-6 and below; docs/algorithm.md section 6,
        twenty-eighth and thirtieth rounds). The step keeps its fixed-point bits
        (``_round.step_bits``), so alpha's scale is unchanged."""
        if not self.stall_fallback:
            raise ValueError("after_stall: these settings have no stall_fallback")
        fallback = dict(VARIANTS[FALLBACK_PRESET])
        fallback["iic"] = min(fallback["iic"] * _lam_factor(self.lam, FALLBACK_LAM_POWER),
                              VARIANTS["capped-line-search"]["iic"])
        values = {k: fallback[k] for k in FALLBACK_FIELDS
                  if k not in self.overridden and not (k == "iic" and self.H)}
        return replace(self, line_search=False, step_cap=1.0, curvature_scaling="none",
                       line_search_relax=1.0, **values)

    def _is_untouched_partial_preset(self):
        """True for from_variant("auto") under partial participation, unbound and
        untouched since (what from_variant gives for the fields it was given, including
        what it derives from them, such as iic_coherence off where H or iic is given).
        Such settings name their participation among the fields given to from_variant
        (its default is "full"), which settings built directly do not: those keep their
        fields whatever they hold."""
        if (self.variant != "auto" or self.participation == "full"
                or "participation" not in self.overridden):
            return False
        given = {name: getattr(self, name) for name in self.overridden}
        return self == HyFDCASettings.from_variant("auto", **given)

    def _require_bound(self, what):
        if not self.n_samples:
            raise RuntimeError(f"HyFDCASettings.{what} depends on the data: use "
                               f"settings.bind(dataset) first")

    @property
    def lam_n(self):
        """lam N (bound settings only)."""
        self._require_bound("lam_n")
        return self.lam * self.n_samples

    @property
    def kappa(self):
        """``prox`` as a number (bound settings where it is "auto" or "strong")."""
        if self.prox in PROX_RULES:
            self._require_bound("kappa")
        return float(self.prox)

    @property
    def round_lam(self):
        """mu = lam + kappa: the regularisation the rounds solve for (lam without prox)."""
        return self.lam + self.kappa

    @property
    def round_lam_n(self):
        """mu N (bound settings only): the rounds' lam N."""
        self._require_bound("round_lam_n")
        return self.round_lam * self.n_samples

    @property
    def sigma_bound(self):
        """sigma as a number, 'safe' and 'partial' resolved on the data (bound
        settings only)."""
        self._require_bound("sigma_bound")
        return self.sigma_value

    @property
    def loss_code(self):
        return LOSS_CODES[self.loss]

    @property
    def loss_at_zero(self):
        """P(0) = l(0) for a classification loss (labels +-1): every sample's loss at
        w = 0."""
        return float(loss_value(self.loss_code, 0.0, 1.0, self.smoothing))

    @property
    def exact_line_search(self):
        """True where the server's step maximises D exactly along the round's update:
        the line search of a loss with a quadratic conjugate (not the logistic's grid)."""
        return self.line_search and self.loss != "logistic"

    @property
    def curvature_of_conjugate(self):
        """gamma with -l*(-a) = a y - (gamma/2) a^2 on its domain (quadratic losses)."""
        return {"hinge": 0.0, "smoothed_hinge": self.smoothing, "squared_hinge": 0.5,
                "squared": 1.0}[self.loss]

    def inner_steps(self, n_local):
        if self.H is not None:
            return int(self.H)
        return max(min(int(self.min_H), n_local), int(round(self.iic * n_local)))

    def as_dict(self):
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, values):
        """The settings :meth:`as_dict` described (also after a JSON round trip)."""
        values = dict(values)
        values["overridden"] = tuple(values.get("overridden", ()))
        settings = cls(**values)
        settings.validate()
        return settings


def _preset_values(name, lam):
    """The fields of preset ``name`` at ``lam``: below AUTO_PARTIAL_LAM the iic of the
    presets in IIC_LAM_SCALED is scaled by (lam / AUTO_PARTIAL_LAM) ** IIC_LAM_POWER (a
    lam that is not a positive number is left for ``validate`` to name)."""
    values = dict(VARIANTS[name])
    if name in IIC_LAM_SCALED and _positive_number(lam):
        values["iic"] *= _lam_factor(lam, IIC_LAM_POWER)
    return values


_SMALLEST_STEP = 2.0 ** -STEP_BITS   # m = 1: a cap below lets every step round to 0


def _whole(value):
    """An int, or a float with no fractional part (never a bool)."""
    return (not isinstance(value, bool) and isinstance(value, (int, np.integer, float))
            and float(value).is_integer())


def _positive_number(value):
    """A finite number > 0, not a bool or a string (``solvers.check_positive``)."""
    try:
        check_positive(value, "value")
    except ValueError:
        return False
    return True


def _lam_factor(lam, power):
    """min(1, lam / AUTO_PARTIAL_LAM) ** power: 1 at lam >= AUTO_PARTIAL_LAM."""
    return min(1.0, lam / AUTO_PARTIAL_LAM) ** power


def _auto_preset(participation, fraction, loss):
    """The preset behind variant "auto" (docs/algorithm.md section 4). The line-search
    presets need a quadratic conjugate: not for the logistic loss."""
    if participation == "full":
        return "auto-full"
    if loss == "logistic":
        return "auto-partial"
    if participation == "fraction" and fraction >= AUTO_SCALED_FRACTION:
        return "scaled-line-search"
    if ((participation == "fraction" and fraction >= AUTO_CAPPED_FRACTION)
            or (participation == "cyclic" and cyclic_subsets(fraction) <= AUTO_CAPPED_CYCLE)):
        return "capped-line-search"
    return "auto-partial"
