"""Faults: lost, duplicated or forged shares are named errors, never convergence."""

import numpy as np
import pytest

from crypto import SecureSumError
from feddata import partition as P
from hyfdca import CertificateError, HyFDCARun, HyFDCASettings, InProcessTransport, run_hyfdca


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
    lose = tampering(lambda phase, k, reply: None
                     if phase.startswith("certificate: loss") and k == 2 else reply)
    run = HyFDCARun(grid, settings(), crypto="mask", transport=lose)
    with pytest.raises(SecureSumError, match=r"no share from client\(s\) \[2\]"):
        run.certificate()


def test_a_lost_line_search_share_is_an_error(grid):
    lose = tampering(lambda phase, k, reply: None
                     if phase == "primal aggregation" and k == 1 else reply)
    run = HyFDCARun(grid, settings(), crypto="mask", transport=lose)
    with pytest.raises(SecureSumError, match=r"line-search sums, round-0: no share from "
                                             r"client\(s\) \[1\]"):
        run.step()


def test_a_forged_share_that_makes_the_gap_negative_is_an_error(grid):
    def forge(phase, k, reply):
        if phase.startswith("certificate: loss") and k == 0:
            reply.shares[0] -= np.uint64(1 << 40)  # the loss sum falls by 2^8
        return reply
    run = HyFDCARun(grid, settings(), crypto="mask", transport=tampering(forge))
    with pytest.raises(CertificateError, match="duality gap is -2"):
        run.certificate()


@pytest.mark.parametrize("frac_bits", [16, 32])
def test_honest_runs_to_tiny_gaps_pass_the_weak_duality_check(grid, frac_bits):
    """Near the optimum the gap is within rounding of 0: the allowance must cover it."""
    run, history = run_hyfdca(grid, settings(), max_rounds=300, rel_tol=1e-9,
                              crypto="mask", frac_bits=frac_bits)
    assert min(e["gap"] for e in history.evaluations.values()) < 1e-4
