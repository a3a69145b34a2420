"""Alignment per turn (respec/pixels/alignment.py) and what rests on it: change masks on aligned images,
the threshold-free stability record, composed alignments in provenance, the working resolution.
Synthetic scenes with the transforms real editors apply (zoom, sub-pixel shift, re-render)."""
from __future__ import annotations

import numpy as np
import pytest

from respec.history import CHANGE, History
from respec.pixels import work_images
from respec.pixels.alignment import Alignment, estimate_alignment, support, warp
from respec.pixels.change_mask import change_for, change_mask
from respec.pixels.provenance import provenance_of, turn_alignment, turn_change
from synthetic_scenes import background, draw_rect, drift, iou, moved, rect_mask, rerender_field, u8

SHAPE = (192, 256)
BOX = (60, 80, 110, 150)


def _scene():
    return background(4, SHAPE)


@pytest.mark.parametrize("dx,dy,scale", [(0.25, 0.0, 1.0), (0.5, -0.25, 1.0), (3.3, 1.7, 1.0), (8.0, 0.0, 1.0),
                                         (0.0, 0.0, 0.9975), (0.0, 0.0, 0.985), (1.2, -0.6, 0.975), (0.0, 0.0, 0.97)])
def test_a_sub_pixel_shift_and_a_zoom_out_are_recovered_despite_an_edit_and_drift(dx, dy, scale):
    scene = _scene()
    cur = drift(draw_rect(moved(scene, dx, dy, scale), BOX, (0.9, 0.1, 0.1)), noise=0.006)
    a = estimate_alignment(u8(scene), u8(cur))
    assert abs(a.dx - dx) < 0.08 and abs(a.dy - dy) < 0.08 and abs(a.scale - scale) < 5e-4
    assert a.residual_px < 0.3 and a.inliers > 0.8
    assert not a.untrusted_reason            # the fit beats the null model: trusted


def _noise(seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).random(SHAPE + (3,)) * 255).astype(np.uint8)


def test_a_fit_between_unrelated_images_is_untrusted_and_the_guard_steps_aside_naming_it():
    from respec.pixels.guard.params import DEFAULT_GUARD
    from respec.pixels.guard.trust import untrusted
    from respec.post_edit.guard_step import guard_images
    prev, cur = _noise(0), _noise(1)
    a = estimate_alignment(prev, cur)
    # block agreement alone calls unrelated noise aligned (every block's residual motion is small)
    assert a.is_identity and "unrelated pair" in a.untrusted_reason
    assert "not trusted" in untrusted(a, SHAPE, DEFAULT_GUARD)
    res = guard_images(prev, cur, request="add a red hat")
    assert not res.applied and "alignment is not trusted" in res.reason


@pytest.mark.parametrize("seed", [1, 4, 7])
def test_a_forty_percent_shift_is_untrusted(seed):
    scene = background(seed, SHAPE)
    cur = drift(draw_rect(moved(scene, 0.4 * min(SHAPE), 0.0, 1.0), BOX, (0.9, 0.1, 0.1)), noise=0.006)
    a = estimate_alignment(u8(scene), u8(cur))
    assert a.is_identity and a.untrusted_reason


def test_a_re_framing_that_leaves_the_previous_frame_is_untrusted():
    from respec.pixels.alignment import fit_refused
    size = (SHAPE[1], SHAPE[0])
    assert "shorter side" in fit_refused(Alignment(0.3 * SHAPE[0], 0.0, 1.0), size)
    assert "covers" in fit_refused(Alignment(0.0, 0.0, 0.8), size)          # 64 % of the picture has a source
    assert fit_refused(Alignment(9.0, -2.0, 0.97), size) == ""             # an editor's drift
    rec = Alignment(method="identity (untrusted fit: a reason)")
    assert Alignment.from_record(rec.record()).untrusted_reason == "a reason"


def test_an_editor_that_keeps_the_frame_gets_the_identity():
    scene = _scene()
    a = estimate_alignment(u8(scene), u8(drift(draw_rect(scene, BOX, (0.9, 0.1, 0.1)), noise=0.006)))
    assert a.is_identity and a.method == "identity"


def test_alignments_compose_and_invert_like_the_warps_they_describe():
    a, b = Alignment(2.0, -1.0, 0.98), Alignment(-0.5, 3.0, 1.01)
    img = _scene()
    two = warp(warp(img, a), b)
    one = warp(img, a.compose(b))
    inner = support(a.compose(b), SHAPE, margin=-4)
    assert np.abs(two - one)[inner].max() < 0.02
    back = a.compose(a.inverse())
    assert abs(back.dx) < 1e-9 and abs(back.dy) < 1e-9 and abs(back.scale - 1) < 1e-12
    assert Alignment.from_record(a.record()).scale == pytest.approx(0.98)


def test_a_zoomed_and_shifted_edit_marks_only_the_edit():
    scene = _scene()
    cur = drift(draw_rect(moved(scene, 2.4, -1.3, 0.98), BOX, (0.9, 0.1, 0.1)), noise=0.006)
    res = change_mask(u8(scene), u8(cur))
    assert iou(res.mask, rect_mask(SHAPE, BOX)) > 0.85
    assert res.info()["alignment"]["method"] != "identity"
    assert not res.stability.rerendered
    unaligned = change_mask(u8(scene), u8(cur), align=False)
    assert unaligned.stability.rerendered            # without alignment the whole texture moved


def test_a_re_rendered_scene_is_flagged_whatever_the_adaptive_threshold_says():
    scene = _scene()
    res = change_mask(u8(scene), u8(rerender_field(scene)))
    assert res.stability.rerendered and res.stability.stable_fraction < 0.7
    kept = change_mask(u8(scene), u8(drift(draw_rect(scene, BOX, (0.9, 0.1, 0.1)), noise=0.006)))
    assert not kept.stability.rerendered and kept.stability.stable_fraction > 0.9


def _hist(*images):
    h = History.start(u8(images[0]))
    for i, img in enumerate(images[1:], start=1):
        tm = change_for(h, u8(img))
        h = h.append(u8(img), f"edit {i}", meta={"alignment": tm.info["alignment"]}, masks={CHANGE: tm})
    return h


def test_unchanged_since_never_calls_a_re_rendered_region_stable():
    scene = _scene()
    i1 = drift(draw_rect(scene, BOX, (0.9, 0.1, 0.1)), noise=0.004)
    i2 = rerender_field(i1)
    prov = provenance_of(_hist(scene, i1, i2))
    assert prov.rerendered(2)
    stable = prov.unchanged_since(0)
    assert stable.mean() < 0.4       # the mask alone would call most of the moved scene stable
    assert (~prov.changes[2]).mean() > 0.5


def test_each_turn_keeps_its_alignment_and_any_image_warps_into_the_latest_frame():
    scene = _scene()
    flat = dict(gain=(1, 1, 1), bias=(0, 0, 0), noise=0.004)
    i1 = drift(moved(scene, 1.5, 0.0, 0.99), **flat)
    i2 = drift(moved(i1, -0.5, 2.0, 0.99), **flat)
    h = _hist(scene, i1, i2)
    a1, a2 = turn_alignment(h, 1), turn_alignment(h, 2)
    assert a1.scale == pytest.approx(0.99, abs=5e-4) and a2.dy == pytest.approx(2.0, abs=0.1)
    assert turn_change(h, 2).info["alignment"]["scale"] == pytest.approx(a2.scale)
    total = provenance_of(h).alignment(0, 2)
    assert total.scale == pytest.approx(0.99 * 0.99, abs=1e-3)
    w0 = warp(scene, total)
    inner = support(total, SHAPE, margin=-6)
    assert np.abs(w0 - i2)[inner].mean() < 0.03


def test_a_large_image_is_analysed_at_the_working_resolution(monkeypatch):
    monkeypatch.setattr(work_images, "WORK_PIXELS", 128 * 96)
    scene = _scene()
    cur = drift(draw_rect(scene, BOX, (0.9, 0.1, 0.1)), noise=0.004)
    res = change_mask(u8(scene), u8(cur))
    assert res.mask.shape == SHAPE and res.working_size == (128, 96)
    assert iou(res.mask, rect_mask(SHAPE, BOX)) > 0.85


def test_a_cubic_warp_for_pastes_is_sharper_than_bilinear_and_exact_at_the_identity():
    from scipy import ndimage
    from respec.pixels.alignment import warp_float
    img = u8(_scene())
    a = Alignment(1.5, -0.5, 0.99)       # half-pixel offsets: where bilinear low-passes most
    h, w = img.shape[:2]
    cy, cx = (h - 1) / 2.0, (w - 1) / 2.0
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    sy, sx = (yy - cy - a.dy) / a.scale + cy, (xx - cx - a.dx) / a.scale + cx
    ref = np.stack([ndimage.map_coordinates(img[:, :, c] / 255.0, [sy, sx], order=5, mode="nearest")
                    for c in range(3)], axis=2)                     # a high-order spline as the truth
    inner = (slice(8, -8), slice(8, -8))
    err_cubic = np.abs(warp_float(img, a, order=3) - ref)[inner].mean()
    err_linear = np.abs(warp_float(img, a) - ref)[inner].mean()
    assert err_cubic < 0.5 * err_linear
    box = (10, 40, 20, 70)
    assert np.array_equal(warp_float(img, a, box=box, order=3), warp_float(img, a, order=3)[10:40, 20:70])
    same = warp_float(img, Alignment(), order=3)          # the identity: the pixels themselves, no kernel
    assert np.array_equal(same, warp_float(img, Alignment())) and np.abs(same - img / 255.0).max() < 1e-6


def test_a_fit_the_unaligned_pair_beats_is_replaced_by_no_motion():
    from respec.pixels.alignment import beats_null, grey
    ref = grey(u8(_scene()))
    cur = grey(u8(drift(draw_rect(_scene(), BOX, (0.9, 0.1, 0.1)), noise=0.006)))      # the frame was kept
    wrong = Alignment(1.5, -0.5, 0.998)                                                    # a fit that followed noise
    held, why = beats_null(ref, warp(ref, wrong), cur, wrong, None)
    assert held == "identity" and "unaligned pair matches better" in why
    right, _ = beats_null(ref, ref, cur, Alignment(), None)
    assert right == "fit"
