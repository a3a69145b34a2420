"""Drift Guard (respec/guard.py): outside the edit region the user's pixels come back, in
I_{t-1}'s frame; global edits, re-renders and untrusted alignments are left alone; the user's
mask wins; nothing is computed twice."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image
from scipy import ndimage

from synthetic_scenes import background, draw_rect, drift, moved, rect_mask, rerender_field, u8
from respec import provenance
from respec.alignment import Alignment, warp
from respec.guard import GUARD_MASK, GuardStep, global_request, guard_images
from respec.history import CHANGE, History
from respec.turn import run_turn

SHAPE = (192, 224)
BOX = (70, 80, 120, 140)
RED = (0.9, 0.1, 0.1)


def psnr(a, b, m=None) -> float:
    d = (np.asarray(a, np.float64) - np.asarray(b, np.float64)) ** 2
    mse = float(d[m].mean() if m is not None else d.mean())
    return 99.0 if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)


def realistic(img, dx=0.6, dy=-0.4, scale=0.988, gain=(1.02, 0.99, 1.01), seed=1):
    """An editor's drift as measured on real editors: a zoom-out, a sub-pixel shift, a blur, a
    gain and noise."""
    out = ndimage.gaussian_filter(moved(img, dx, dy, scale), (0.6, 0.6, 0))
    return u8(drift(out, gain=gain, bias=(0, 0, 0), noise=0.004, seed=seed))


@pytest.fixture
def scene():
    return background(3, SHAPE)


def test_outside_the_edit_the_previous_pixels_come_back_in_their_frame(scene):
    prev = u8(scene)
    edited = realistic(draw_rect(scene, BOX, RED))
    res = guard_images(prev, edited, request="add a red box")
    assert res.applied and not res.record["stepped_aside"]
    far = ~ndimage.binary_dilation(rect_mask(SHAPE, BOX), iterations=10)
    assert psnr(res.image, prev, far) == 99.0          # exactly the user's pixels
    assert psnr(edited, prev, far) < 35                 # the editor drifted there
    # inside: the editor's own pixels, in I_{t-1}'s frame (the zoom-out undone)
    back = warp(edited, Alignment.from_record(res.record["alignment"]).inverse())
    assert psnr(res.image, back, rect_mask(SHAPE, BOX)) >= 40
    assert abs(res.record["alignment"]["scale"] - 0.988) < 0.003
    assert 0.05 < res.record["edit_fraction"] < 0.15 and res.record["band_px"] >= 2


def test_a_lighting_change_is_a_global_edit_left_alone(scene):
    prev = u8(scene)
    night = u8(drift(scene, gain=(0.55, 0.6, 0.8), bias=(0.0, 0.0, 0.05), noise=0.003))
    res = guard_images(prev, night, request="make the room cosy")     # no keyword: the colours say it
    assert not res.applied and "global colour" in res.reason
    assert np.array_equal(res.image, night)
    assert not guard_images(prev, night, request="make it night").applied


def test_a_style_change_is_a_global_edit_left_alone(scene):
    from respec.sim.world import apply_style
    prev = u8(scene)
    styled = u8(apply_style(scene.astype(np.float32), "comic"))
    res = guard_images(prev, styled, request="give it some punch")
    assert not res.applied and res.record["why"] in ("global", "rerender")
    assert np.array_equal(res.image, styled)
    assert global_request("turn it into a watercolor painting") and not global_request("add a red lamp")


def test_an_added_object_keeps_its_shadow_and_reflection(scene):
    prev = u8(scene)
    obj = draw_rect(scene, BOX, RED)
    y0, x0, y1, x1 = BOX
    shadow = obj.copy()
    shadow[y1:y1 + 14, x0 + 8:x1 + 8] *= 0.6                    # a cast shadow, soft-edged
    shadow = np.where(rect_mask(SHAPE, (y1, x0 + 8, y1 + 14, x1 + 8))[..., None],
                      ndimage.gaussian_filter(shadow, (1.5, 1.5, 0)), shadow)
    refl = shadow.copy()
    refl[y1 + 20:y1 + 40, x0:x1] = 0.7 * refl[y1 + 20:y1 + 40, x0:x1] + 0.3 * np.array(RED)   # a reflection
    edited = realistic(refl)
    res = guard_images(prev, edited, request="add a red box on the wet floor")
    assert res.applied
    back = warp(edited, Alignment.from_record(res.record["alignment"]).inverse())
    for part in (BOX, (y1, x0 + 8, y1 + 14, x1 + 8), (y1 + 20, x0, y1 + 40, x1)):
        inner = ndimage.binary_erosion(rect_mask(SHAPE, part), iterations=1)
        assert psnr(res.image, back, inner) >= 35, part


def test_the_users_mask_wins_over_the_change_mask(scene):
    prev = u8(scene)
    other = (20, 20, 50, 60)
    edited = realistic(draw_rect(draw_rect(scene, BOX, RED), other, (0.1, 0.2, 0.9)))
    user = rect_mask(SHAPE, (BOX[0] - 4, BOX[1] - 4, BOX[2] + 4, BOX[3] + 4))
    res = guard_images(prev, edited, user_mask=user)
    assert res.applied and res.record["region_from"] == "the user's mask"
    assert psnr(res.image, prev, rect_mask(SHAPE, other)) == 99.0   # the change the user did not ask for goes
    back = warp(edited, Alignment.from_record(res.record["alignment"]).inverse())
    assert psnr(res.image, back, rect_mask(SHAPE, BOX)) >= 40
    # a user's mask over an area the editor kept unchanged keeps the editor's pixels there too
    assert res.weight[user].min() == 1.0
    # and it overrides the global rules (the user says the edit is local)
    assert guard_images(prev, edited, user_mask=user, request="make it night").applied


def test_a_rerender_it_cannot_separate_keeps_the_editors_image(scene):
    prev = u8(scene)
    redrawn = u8(rerender_field(draw_rect(scene, BOX, RED), strength=0.3))
    res = guard_images(prev, redrawn, request="add a red box")
    assert not res.applied and np.array_equal(res.image, redrawn)


def test_an_untrusted_alignment_keeps_the_editors_image(scene):
    prev = u8(scene)
    zoomed = u8(moved(draw_rect(scene, BOX, RED), 0.0, 0.0, 0.8))      # a reframing, not drift
    res = guard_images(prev, zoomed, request="add a red box")
    assert not res.applied and res.record["why"] in ("alignment", "global", "rerender")
    assert np.array_equal(res.image, zoomed)


class _DriftingEditor:
    """Adds the red box and drifts like a real editor."""

    name = "drifting"

    def __init__(self, scene):
        self.scene = scene
        self.last_run = {}

    def edit(self, images, instruction, *, output_size, seed, steps=None, guidance=None):
        base = np.asarray(images[-1], np.float64) / 255.0
        return Image.fromarray(realistic(draw_rect(base, BOX, RED), seed=seed))


def test_run_turn_guard_step_shares_the_turns_change_record(scene, monkeypatch):
    calls = []
    real = provenance.change_mask
    monkeypatch.setattr(provenance, "change_mask", lambda *a, **k: calls.append(1) or real(*a, **k))
    history = History.start(Image.fromarray(u8(scene)))
    record, new = run_turn(history, "add a red box", editor=_DriftingEditor(scene), use_controller=False,
                           post_edit=[GuardStep()], seed=3)
    assert len(calls) == 1                                   # the edit's change record, once
    entry = record.post_edit[0]
    assert entry["step"] == "drift_guard" and entry["applied"]
    turn = new.turns[1]
    assert GUARD_MASK in turn.masks and "drift-guard" in turn.masks[CHANGE].info["method"]
    assert turn.meta["alignment"]["scale"] == 1.0            # I_1 is in I_0's frame
    far = ~ndimage.binary_dilation(rect_mask(SHAPE, BOX), iterations=10)
    assert psnr(new.current.image.array, u8(scene), far) == 99.0
    assert record.edited is not record.image


def test_the_node_after_any_editor(pack, scene):
    import json
    import torch
    node = pack.NODE_CLASS_MAPPINGS["ReSpecDriftGuard"]()
    prev = u8(scene)
    edited = realistic(draw_rect(scene, BOX, RED))
    t = lambda a: torch.from_numpy(a).float()[None] / 255.0      # noqa: E731
    image, mask, report, guard = node.guard(t(prev), t(edited), True, instruction="add a red box")
    out = np.round(image[0].numpy() * 255).astype(np.uint8)
    far = ~ndimage.binary_dilation(rect_mask(SHAPE, BOX), iterations=10)
    assert psnr(out, prev, far) == 99.0 and mask[0].numpy()[BOX[0] + 10, BOX[1] + 10] == 1.0
    assert report.startswith("Drift Guard kept") and json.loads(report.split("\n", 1)[1])["applied"]
    image, _, report, _ = node.guard(t(prev), t(edited), False)
    assert "switched off" in report and np.allclose(image.numpy(), t(edited).numpy())
    _, _, report, _ = node.guard(t(prev), t(edited), True, instruction="make it a watercolor painting")
    assert "stepped aside" in report
    # History Append keeps the guard's record (meta.post_edit) and its kept-edit mask with the turn.
    Store = pack.NODE_CLASS_MAPPINGS["ReSpecHistoryStore"]()
    Append = pack.NODE_CLASS_MAPPINGS["ReSpecHistoryAppend"]()
    hist = Store.run("in-graph", "s", -1, "", "", image=t(prev))[0]
    h, _ = Append.append(hist, image, "add a red box", guard=guard)
    entry = h.current.meta["post_edit"][-1]
    assert entry["step"] == "drift_guard" and entry["applied"] and "result" not in entry
    kept = h.current.masks[GUARD_MASK].mask
    assert kept[BOX[0] + 10, BOX[1] + 10] and not kept[far].any()
    with pytest.raises(Exception, match="Drift Guard node"):
        Append.append(hist, image, "add a red box", guard={"step": "reveal"})


def test_realistic_sim_defects_are_a_preset_of_the_sim_editors_fields():
    from respec.sim.drift import sim_editor
    from respec.sim.editor import SimDefects
    d = sim_editor("realistic").defects
    assert d == SimDefects.realistic() and d.real_defects and d.rerender > 0
    assert (d.colour_shift, d.blur_sigma, d.noise_std) == (0.02, 0.6, 0.004)
    steps = [d.step(seed) for seed in range(40)]
    zooms = [(1.0 - s.scale) * 100.0 for s in steps]
    assert 0.5 <= min(zooms) < max(zooms) <= 1.5          # a zoom-out of 0.5-1.5 % per call
    assert all(abs(s.dx) <= 1.5 and abs(s.dy) <= 1.5 for s in steps)
    assert len({(s.dx, s.dy) for s in steps}) == 40        # each call its own shift, from its seed
    assert d.step(7) == d.step(7)
    fixed = SimDefects(zoom_pct=1.0, shift_px=1.0).step(3)  # not jittered: the fixed move of every call
    assert (fixed.dx, fixed.dy, fixed.scale) == (1.0, 0.5, 0.99)
    assert sim_editor("default").defects == SimDefects() and not SimDefects().real_defects
