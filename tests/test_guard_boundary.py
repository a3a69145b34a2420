"""The Drift Guard's kept edit ends where the two pictures agree (respec/pixels/guard/boundary.py):
an object the editor changed that the edit region cuts is taken whole; a piece of disagreement
that runs on beyond the reach is not cut at the reach."""
from __future__ import annotations

import numpy as np

from respec.pixels.colour_fit import ColourFit
from respec.pixels.guard.boundary import agreed_region, reach_px

SHAPE = (400, 400)          # the region grows at most reach_px = 16 px here
PX = {"margin": 2, "band": 2}
FIT = ColourFit((1.0, 1.0, 1.0), (0.0, 0.0, 0.0))


def _scene(seed: int = 0) -> np.ndarray:
    """A grey picture with a little noise (an editor's drift)."""
    rng = np.random.default_rng(seed)
    return np.clip(0.5 + 0.01 * rng.standard_normal(SHAPE + (3,)), 0, 1).astype(np.float32)


def _region(P, E, K):
    checks: dict = {}
    return agreed_region(P, E, K, np.ones(SHAPE, bool), FIT, PX, min(SHAPE), checks), checks


def test_an_object_the_region_cuts_is_taken_whole():
    P, E = _scene(0), _scene(1)
    E[60:86, 70:90] = (0.2, 0.3, 0.8)           # a new object (a blue vase) ...
    K = np.zeros(SHAPE, bool)
    K[40:80, 40:80] = True                      # ... that the edit region cuts
    grown, checks = _region(P, E, K)
    assert grown[60:86, 70:90].all()            # the whole vase, not its upper part
    assert grown[K].all()
    assert not grown[100:, :].any() and not grown[:, 100:].any()    # and nothing where the pictures agree
    assert checks["boundary_grown_px"] > 0


def test_a_thin_old_line_the_editor_dropped_is_not_cut():
    P, E = _scene(0), _scene(1)
    P[50:52, 60:92] = 0.05                      # an old 2-px outline the editor removed, partly in the region
    K = np.zeros(SHAPE, bool)
    K[40:70, 40:80] = True
    grown, _ = _region(P, E, K)
    assert grown[50:52, 60:92].all()           # the whole line goes, no stub of it is left


def test_a_stripe_that_runs_on_beyond_the_reach_is_not_cut_at_it():
    P, E = _scene(0), _scene(1)
    E[:, 75:85] = (0.9, 0.1, 0.1)               # a stripe re-drawn over the whole picture, through the edit
    K = np.zeros(SHAPE, bool)
    K[160:200, 60:100] = True
    grown, checks = _region(P, E, K)
    assert checks["boundary_open_px"] > 0
    assert (grown == K).all()                   # no new cut 16 px out: the verification reads the old edge


def test_drift_alone_does_not_grow_the_region():
    P = _scene(0)
    E = np.clip(P + 0.03 * np.random.default_rng(2).standard_normal(P.shape), 0, 1).astype(np.float32)
    K = np.zeros(SHAPE, bool)
    K[160:200, 60:100] = True
    grown, _ = _region(P, E, K)
    assert grown.sum() - K.sum() < 0.02 * K.sum()


def test_the_reach_follows_the_picture_size():
    assert reach_px(PX, 400) == 16 and reach_px({"margin": 12, "band": 12}, 1024) == 41
