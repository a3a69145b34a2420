"""The shared pixel helpers: the one mask coercion (respec/pixels/masks.py) and the one colour-fit
application (respec/pixels/colour_fit.py)."""
from __future__ import annotations

import numpy as np
import pytest

from respec.errors import InputError
from respec.history import History, TurnMask
from respec.pixels.colour_fit import ColourFit, grey_of
from respec.pixels.grade import into_grade
from respec.pixels.masks import history_size, mask_at


def test_mask_at_reads_every_scale_by_one_rule():
    want = np.array([[False, True], [True, False]])
    for m in (want, want.astype(np.uint8), want.astype(np.uint8) * 255, want * 200.0, want * 0.9,
              want[None], want[:, :, None].astype(np.float32)):
        assert mask_at(m, (2, 2)).tolist() == want.tolist(), m
    # a soft 0..1 mask counts above one half, a 0..255 one above 127
    assert mask_at(np.array([[0.3, 0.6]]), (1, 2)).tolist() == [[False, True]]
    assert mask_at(np.array([[127, 128]], np.uint8), (1, 2)).tolist() == [[False, True]]


def test_mask_at_resizes_to_the_shape_and_unwraps_a_turn_mask():
    m = np.zeros((4, 6), bool)
    m[:2, :3] = True
    big = mask_at(TurnMask.from_mask(m, {}), (8, 12))
    assert big.shape == (8, 12) and big[:4, :6].all() and not big[4:].any() and not big[:, 6:].any()


def test_mask_at_names_the_mask_it_refuses():
    with pytest.raises(InputError, match="the user's mask"):
        mask_at(np.zeros((4, 4, 3)), (4, 4), "the user's mask")


def test_history_size_is_the_first_images():
    h = History.start(np.zeros((30, 40, 3), np.uint8)).append(np.zeros((60, 80, 3), np.uint8), "zoom out")
    assert history_size(h) == (40, 30)


def test_a_records_colour_fit_is_applied_and_undone_by_one_map():
    info = {"gain": [1.1, 0.9, 1.0], "bias": [0.02, -0.01, 0.0]}
    P = np.random.default_rng(0).uniform(0.1, 0.9, (8, 8, 3)).astype(np.float32)
    fit = ColourFit.from_info(info)
    E = fit.apply(P)
    assert np.allclose(E, P * np.float32([1.1, 0.9, 1.0]) + np.float32([0.02, -0.01, 0.0]))
    assert np.allclose(into_grade(E, info), P, atol=1e-6)
    assert np.allclose(fit.apply_grey(P), grey_of(E), atol=1e-6)
    assert ColourFit.from_info({}).apply(P).tolist() == P.tolist()
