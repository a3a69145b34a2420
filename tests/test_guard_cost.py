"""The Drift Guard's cost (issue 43): each faster path gives the same numbers as the plain one it
replaced, so the guard's outputs do not move (the seconds are in scripts/bench/bench_cost.py, not
here)."""
from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from scipy import ndimage

from synthetic_scenes import background, draw_rect, u8
from respec.pixels import alignment
from respec.pixels.alignment import Alignment, warp, warp_float
from respec.pixels.guard import frame as guard_frame
from respec.pixels.guard import tiles as guard_tiles
from respec.pixels.guard.arrays import dot3, open_square, sq_mean, sq_sum
from respec.pixels.guard.drift import drift_explained
from respec.pixels.masks import dilate
from respec.post_edit.guard_step import guard_images


def _plain_resample(img, rows, cols, inv, oy, ox):
    """The separable bilinear resample as one expression (what alignment._resample computed before)."""
    h, w = img.shape[:2]
    iy0, iy1, wy = alignment._axis(rows, inv, oy, h, 1)
    ix0, ix1, wx = alignment._axis(cols, inv, ox, w, 1)
    ft = np.float64 if img.dtype == np.float64 else np.float32
    ey = (slice(None),) + (None,) * (img.ndim - 1)
    ex = (None, slice(None)) + (None,) * (img.ndim - 2)
    a, b = img[iy0].astype(ft, copy=False), img[iy1].astype(ft, copy=False)
    rws = a + (b - a) * wy[ey].astype(ft)
    left, right = rws[:, ix0], rws[:, ix1]
    return left + (right - left) * wx[ex].astype(ft)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.uint8])
@pytest.mark.parametrize("shape", [(97, 131, 3), (64, 80), (40, 50, 4)])
def test_the_in_place_warp_is_the_plain_expression(dtype, shape):
    rng = np.random.default_rng(0)
    img = (rng.random(shape) * (255 if dtype == np.uint8 else 1)).astype(dtype)
    for al in (Alignment(1.3, -0.7, 1.004), Alignment(-5.2, 3.1, 0.97)):
        inv, oy, ox = alignment._source_coords(al, shape[:2])
        want = _plain_resample(img, np.arange(shape[0]), np.arange(shape[1]), inv, oy, ox)
        got = warp_float(img, al) if dtype == np.uint8 else warp(img, al)
        if dtype == np.uint8:
            want = want * np.float32(1.0 / 255)
        assert got.dtype == want.dtype and np.array_equal(got, want)


def test_the_channel_sums_are_numpys_reductions():
    rng = np.random.default_rng(1)
    for dtype in (np.float32, np.float64):
        x, y = (rng.standard_normal((37, 53, 3)).astype(dtype) for _ in range(2))
        assert np.array_equal(sq_sum(x), (x ** 2).sum(axis=2))
        assert np.array_equal(sq_mean(x), (x ** 2).mean(axis=2)) and sq_mean(x).dtype == dtype
        assert np.array_equal(dot3(x, y), (x * y).sum(axis=2))


def test_open_square_is_a_binary_opening_with_the_border_unset():
    rng = np.random.default_rng(2)
    for _ in range(60):
        h, w = (int(v) for v in rng.integers(1, 60, 2))
        m = ndimage.binary_dilation(rng.random((h, w)) > rng.uniform(0.85, 1.0), iterations=int(rng.integers(0, 3)))
        for k in (3, 4, 5):
            assert np.array_equal(open_square(m, k), ndimage.binary_opening(m, np.ones((k, k), bool))), (h, w, k)


def test_dilate_on_the_masks_box_is_the_whole_pictures_maximum_filter():
    rng = np.random.default_rng(3)
    for _ in range(60):
        h, w = (int(v) for v in rng.integers(1, 60, 2))
        m = rng.random((h, w)) > rng.uniform(0.9, 1.0)
        soft = m * rng.random((h, w)) * 1.5       # a float mask: read as uint8, as before (below 1 is unset)
        for r in (1, 2, 7):
            want = ndimage.maximum_filter(m.astype(np.uint8), 2 * r + 1, mode="nearest") > 0
            assert np.array_equal(dilate(m, r), want) and np.array_equal(dilate(m.astype(np.uint8), r), want)
            assert np.array_equal(dilate(soft, r),
                                  ndimage.maximum_filter(np.asarray(soft, np.uint8), 2 * r + 1, mode="nearest") > 0)


def test_the_tiles_read_run_by_run_are_the_tiles_read_one_by_one():
    """Tiles.warp reads a run of neighbouring tiles as one box: the warped pixels and the drift test
    are those of each tile read alone (drift_explained's filters reach less than TILE_PAD px)."""
    shape = (256, 320)
    prev = u8(background(1, shape))
    cur = u8(draw_rect(background(1, shape) * 0.97 + 0.01, (60, 70, 140, 200), (0.9, 0.1, 0.1)))
    info = {"gain": [1.01, 0.98, 1.0], "bias": [0.0, 0.01, 0.0]}
    fr = mock.Mock(info=info, sample=lambda img, box: warp_float(img, Alignment(0.6, -0.4, 0.995), box=box),
                   support=lambda s: np.ones(s, bool))
    test = guard_tiles.tiles_near(np.pad(np.ones((100, 150), bool), ((50, 106), (60, 110))), 8)
    t = guard_tiles.Tiles(prev, cur, fr, 10 / 255, set(test))
    t.warp(guard_tiles.tiles_near(np.pad(np.ones((100, 150), bool), ((50, 106), (60, 110))), 40))
    for tile in t.done:
        (Y0, Y1, X0, X1), inner = guard_tiles.padded(tile, shape)
        y0, y1, x0, x1 = tile
        E_t = fr.sample(cur, (Y0, Y1, X0, X1))
        assert np.array_equal(t.E[y0:y1, x0:x1], E_t[inner])
        if tile in test:
            ex, fa = drift_explained(prev[Y0:Y1, X0:X1].astype(np.float32) / 255.0, E_t, info, 10 / 255)
            assert np.array_equal(t.explained[y0:y1, x0:x1], ex[inner]) and np.array_equal(t.faint[y0:y1, x0:x1], fa[inner])
    assert len(guard_tiles._runs(sorted(t.done), set(test))) < len(t.done)     # runs were read, not single tiles


def test_a_scene_that_moved_steps_aside_before_the_local_flow_is_measured():
    """The structure warp alone decides a new pose (held, bent): the local motion field, which
    would change neither, is not measured, and the record says so."""
    shape, box = (192, 224), (70, 80, 120, 140)
    rng = np.random.default_rng(4)
    tex = ndimage.gaussian_filter(rng.random(shape + (3,)), (2, 2, 0))
    base = np.clip(background(0, shape) + (tex - tex.mean()) / tex.std() * 0.12, 0, 1)
    yy, xx = np.mgrid[0:shape[0], 0:shape[1]].astype(np.float64)
    bend = [ndimage.gaussian_filter(np.random.default_rng(s).normal(0, 1, shape), 10) for s in (1, 2)]
    f = [v / np.abs(v).max() * 15 for v in bend]
    ed = draw_rect(base, box, (0.9, 0.1, 0.1))
    moved = u8(np.stack([ndimage.map_coordinates(ed[..., c], [yy + f[0], xx + f[1]], order=1, mode="nearest")
                         for c in range(3)], axis=2))
    with mock.patch.object(guard_frame, "with_local_flow", side_effect=AssertionError("measured")):
        res = guard_images(u8(base), moved, request="add a red box")
    assert not res.applied and res.record["why"] == "moved"
    assert res.record["structure"]["local_flow"] == {"used": False, "why": "not measured: the structure warp decided"}
