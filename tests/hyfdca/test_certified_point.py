"""The certified point (hyfdca._certificate): the best point of the segment between the last
certified point and w(alpha), the same bits in both engines, kept by the clients, reset
when a client lost it."""

import numpy as np
import pytest

from feddata import partition as P
from hyfdca import BatchedHyFDCA, HyFDCARun, HyFDCASettings
from hyfdca import _messages as msg
from hyfdca._certificate import POINT_STEPS, choose_point, prox_iterate

LAM = 1e-3


@pytest.fixture(scope="module")
def grid(cancer):
    X, y = cancer
    return P.hybrid_grid(X / np.abs(X).max(axis=0), y, 3, 3)


def settings(**fields):
    return HyFDCASettings.from_variant("auto", lam=LAM, participation="fraction",
                                       fraction=0.5, **fields)


def pooled_primal(fed, w):
    X, y = fed.reassemble()
    return 0.5 * LAM * float(w @ w) + float(np.mean(np.maximum(0.0, 1.0 - y * (X @ w))))


def pooled_w(fed, alpha):
    X, _ = fed.reassemble()
    return X.T @ alpha / (LAM * X.shape[0])


def certificates(run, count, every=2):
    out = []
    for _ in range(count):
        for _ in range(every):
            run.step()
        out.append(run.certificate())
    return out


def test_the_point_never_rises_and_is_what_it_claims(grid):
    run = BatchedHyFDCA(grid, settings(iic=0.5), seed=3)
    first = run.certificate()
    assert first.primal == first.iterate_primal  # no point yet: w(alpha) itself
    previous, chose_inside = first.primal, False
    for _ in range(25):
        cert = certificates(run, 1)[0]
        assert cert.primal <= previous and cert.primal <= cert.iterate_primal
        chose_inside |= cert.primal < min(previous, cert.iterate_primal)
        previous = cert.primal
        # the primal claimed is the pooled primal of the point returned (fixed-point 2^-32)
        assert cert.primal == pytest.approx(pooled_primal(grid, cert.w), abs=1e-7)
        # the segment's other end: w(alpha), or the proximal iterate where prox > 0
        iterate = prox_iterate(run.settings, pooled_w(grid, run.alpha), run.prox_centre)
        assert cert.iterate_primal == pytest.approx(pooled_primal(grid, iterate), abs=1e-7)
    assert chose_inside  # the segment found points better than both ends


def test_both_engines_certify_the_same_points(grid):
    s = settings(iic=0.5)
    a, b = HyFDCARun(grid, s, seed=3), BatchedHyFDCA(grid, s, seed=3)
    for ca, cb in zip(certificates(a, 12), certificates(b, 12)):
        assert (ca.primal, ca.dual, ca.iterate_primal) == (cb.primal, cb.dual,
                                                           cb.iterate_primal)
        np.testing.assert_array_equal(ca.w, cb.w)


def test_a_client_that_lost_the_point_margins_resets_the_point(grid):
    run = HyFDCARun(grid, settings(iic=0.5), seed=3)
    certificates(run, 4)
    lost = run.clients[4]
    lost._point_margins, lost._point_version, lost._point_trial = None, 0, None
    reset = certificates(run, 1)[0]
    assert reset.primal == reset.iterate_primal  # c = 1: the point is w(alpha)
    assert reset.primal == pytest.approx(pooled_primal(grid, reset.w), abs=1e-7)
    # every client holds the same point again: later points are what they claim
    for _ in range(6):
        cert = certificates(run, 1)[0]
        assert cert.primal == pytest.approx(pooled_primal(grid, cert.w), abs=1e-7)
        assert cert.primal <= cert.iterate_primal


def half_certificate(run, reached):
    """A certificate whose last exchange reaches only the clients ``reached`` (the
    others' replies are lost, so the server settles nothing)."""
    server, everyone = run.server, np.arange(len(run.clients))
    v = {k: run.clients[k].handle(server.dual_sync(k, commit=False)).v for k in everyone}
    w = server.aggregate_primal([v[k] for k in everyone])
    parts = {k: run.clients[k].handle(msg.WeightsAndRequest(
        w[server.feature_ids[k]], np.arange(server.sample_ids[k].size), stored=False)).parts
        for k in everyone}
    margins = server.full_margins(parts)
    for k in reached:
        run.clients[k].handle(server.eval_message(k, margins, everyone, "lost"))


def test_a_certificate_lost_halfway_leaves_the_point_consistent(grid):
    """Clients that answered a certificate the server could not settle, and clients
    that never saw it, settle the same point at the next certificate."""
    run = HyFDCARun(grid, settings(iic=0.5), seed=3)
    reference = HyFDCARun(grid, settings(iic=0.5), seed=3)
    certificates(run, 3), certificates(reference, 3)
    run.step(), reference.step()
    half_certificate(run, reached=[0, 2, 4, 6])
    run.step(), reference.step()
    for ca, cb in zip(certificates(run, 3), certificates(reference, 3)):
        assert (ca.primal, ca.dual) == (cb.primal, cb.dual)
        np.testing.assert_array_equal(ca.w, cb.w)


def test_choose_point_takes_the_best_step_and_the_larger_on_ties():
    w, w_point = np.array([2.0, 0.0]), np.array([0.0, 0.0])
    flat = np.zeros(POINT_STEPS.size)
    # equal losses: the regulariser alone, smallest at c = 0
    step, primal, point, iterate = choose_point(1.0, w, w_point, flat)
    assert step == 0.0 and primal == 0.0 and iterate == 2.0
    np.testing.assert_array_equal(point, w_point)
    # a loss that makes every c equal: ties go to c = 1
    tied = -0.5 * (POINT_STEPS * 2.0) ** 2
    step, primal, point, _ = choose_point(1.0, w, w_point, tied)
    assert step == 1.0 and primal == 0.0
    np.testing.assert_array_equal(point, w)
    # no point yet: c = 1 whatever the sums say
    assert choose_point(1.0, w, None, flat)[0] == 1.0
    # a non-finite sum is never chosen
    bad = flat.copy()
    bad[0] = np.nan
    assert choose_point(1.0, w, w_point, bad)[0] == 1.0 / 32
