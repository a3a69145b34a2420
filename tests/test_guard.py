"""Drift Guard (respec/pixels/guard/): outside the edit region the user's pixels come back, in
I_{t-1}'s frame; global edits, re-renders and untrusted alignments are left alone; the user's
mask wins; nothing is computed twice."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image
from scipy import ndimage

from synthetic_scenes import background, draw_rect, drift, moved, rect_mask, rerender_field, u8
from respec.history import CHANGE, History, StoredImage
from respec.pixels import change_mask as changes
from respec.pixels.verify import run as verify_run
from respec.pixels.alignment import Alignment, warp
from respec.controller.request_language import global_request
from respec.pixels.grade import into_grade
from respec.pixels.guard import GUARD_MASK, GuardParams
from respec.post_edit.guard_step import GuardStep, guard_images
from respec.turn import TurnParts, TurnSwitches, run_turn

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


def test_a_rerender_on_a_local_request_keeps_the_request_and_restores_the_rest(scene):
    prev = u8(scene)
    redrawn = u8(rerender_field(draw_rect(scene, BOX, RED), strength=0.3))     # texture re-drawn everywhere
    res = guard_images(prev, redrawn, request="add a red box")
    assert res.applied and "structure" in res.record          # read through the structure warp
    box = rect_mask(SHAPE, BOX)
    far = ~ndimage.binary_dilation(box, iterations=24)     # the region: the coarse change, 4 % of the side beyond
    assert psnr(res.image, prev, far) == 99.0 and psnr(redrawn, prev, far) < 30
    inner = ndimage.binary_erosion(box, iterations=4)
    assert np.abs(res.image[inner].astype(int) - np.array(RED) * 255).max(axis=1).mean() < 60   # the red box is kept
    # what the request does not name is not kept apart: a global request over a re-render is the editor's
    res = guard_images(prev, redrawn, request="give it a painterly look")
    assert not res.applied and np.array_equal(res.image, redrawn)


def test_above_the_working_size_a_structure_warp_steps_aside_rather_than_misplace_the_edit(scene):
    """The full-size composition follows the turn's similarity only: an edit read through a structure
    warp at the working size is not carried to full size (it would land in the wrong place)."""
    prev = u8(scene)
    redrawn = u8(rerender_field(draw_rect(scene, BOX, RED), strength=0.3))
    full = guard_images(prev, redrawn, request="add a red box")
    assert full.applied and "structure" in full.record
    small = guard_images(prev, redrawn, request="add a red box", work_pixels=96 * 112)
    assert not small.applied and "structure warp" in small.reason and small.record["stepped_aside"]
    assert np.array_equal(small.image, redrawn) and small.weight.shape == SHAPE
    # a plain drift at the same working size is still guarded at full size (another noise seed: the
    # working size's change record is remembered for these images, as History Append would read it)
    assert guard_images(prev, realistic(draw_rect(scene, BOX, RED), seed=9), request="add a red box",
                        work_pixels=96 * 112).applied


def no_verification(monkeypatch):
    """The guard's own structure rules, read without the verification that ends every step (respec/pixels/
    verify): these synthetic re-renders drift 71-84/255 where the guard keeps old, beyond fragments.RESTYLE_LEVEL,
    and the verification would step aside before the rule under test is seen."""
    monkeypatch.setattr(verify_run, "CHECKS", ())


def test_a_rerender_whose_structure_moved_keeps_the_editors_image(scene, monkeypatch):
    rng = np.random.default_rng(4)
    tex = ndimage.gaussian_filter(rng.random(SHAPE + (3,)), (2, 2, 0))
    base = np.clip(scene + (tex - tex.mean()) / tex.std() * 0.12, 0, 1)          # a textured scene
    yy, xx = np.mgrid[0:SHAPE[0], 0:SHAPE[1]].astype(np.float64)
    bend = [ndimage.gaussian_filter(np.random.default_rng(s).normal(0, 1, SHAPE), 10) for s in (1, 2)]

    def redrawn(amp):           # the editor bends the scene by up to `amp` px and adds the box
        f = [v / np.abs(v).max() * amp for v in bend]
        ed = draw_rect(base, BOX, RED)
        return u8(np.stack([ndimage.map_coordinates(ed[..., c], [yy + f[0], xx + f[1]], order=1, mode="nearest")
                            for c in range(3)], axis=2))

    followed = guard_images(u8(base), redrawn(6), request="add a red box")
    assert not followed.applied and followed.record["why"] == "verify" and "re-drew" in followed.reason
    no_verification(monkeypatch)
    assert guard_images(u8(base), redrawn(6), request="add a red box").applied      # the structure followed
    res = guard_images(u8(base), redrawn(15), request="add a red box")              # a new pose, not drift
    assert not res.applied and res.record["why"] == "moved" and "structure did not hold" in res.reason


def test_a_part_of_a_rerendered_scene_that_moved_on_its_own_keeps_the_editors_image(monkeypatch):
    """A new pose under a re-render (causal_ex1_qie2511: the arm that does not hold the new bag
    moved): the structure warp follows the rest of the scene, but restoring around the edit would
    put the old arm next to the new one. One area moving where the rest does not steps aside; an
    editor's zoom that differs per axis does not (it is affine)."""
    shape, box = (384, 448), (140, 160, 240, 280)
    rng = np.random.default_rng(4)
    tex = ndimage.gaussian_filter(rng.random(shape + (3,)), (2, 2, 0))
    base = np.clip(background(3, shape) + (tex - tex.mean()) / tex.std() * 0.12, 0, 1)
    yy, xx = np.mgrid[0:shape[0], 0:shape[1]].astype(np.float64)
    part = ndimage.gaussian_filter(((yy - 100) ** 2 + (xx - 340) ** 2 < 80 ** 2).astype(np.float64), 6)

    def redrawn(dy, dx):        # the box added, the field (dy, dx) applied, the texture re-drawn
        ed = draw_rect(base, box, RED)
        ed = np.stack([ndimage.map_coordinates(ed[..., c], [yy - dy, xx - dx], order=1, mode="nearest")
                       for c in range(3)], axis=2)
        return u8(rerender_field(ed, strength=0.3))

    no_verification(monkeypatch)
    moved_part = guard_images(u8(base), redrawn(0.0, 14 * part), request="add a red box")
    assert not moved_part.applied and moved_part.record["why"] == "moved"
    assert "moved on its own" in moved_part.reason and moved_part.record["structure"]["bent"] > 0.01
    assert np.array_equal(moved_part.image, redrawn(0.0, 14 * part))
    # the same area moved by less than BENT_FRAC of the side is followed, and so is a zoom of 1 % across
    # and 3 % down (10 px at the bottom edge, more than the moved area's largest motion)
    assert guard_images(u8(base), redrawn(0.0, 6 * part), request="add a red box").applied
    zoom = guard_images(u8(base), redrawn(0.03 * (yy - 191.5), 0.01 * (xx - 223.5)), request="add a red box")
    assert zoom.applied and zoom.record["structure"]["bent"] == 0.0


def _chain(shape, width):
    """bool H×W: two strands from a pendant's top (220, 220) up to a neckline at row 110."""
    yy, xx = np.mgrid[0:shape[0], 0:shape[1]]
    out = np.zeros(shape, bool)
    for x_end in (140, 300):
        v = np.array([110 - 220, x_end - 220], float)
        t = np.clip(((yy - 220) * v[0] + (xx - 220) * v[1]) / (v @ v), 0, 1)
        out |= (np.hypot(yy - (220 + t * v[0]), xx - (220 + t * v[1])) <= width / 2) & (t > 0) & (t < 1)
    return out


def test_a_thin_line_the_edit_drew_next_to_its_change_is_kept():
    """causal_ex1_causal4: the necklace's 2 px chain is below the change mask's opening; only its
    pendant was kept. A line drift does not explain, touching the edit, standing out of what lies
    beside it, is part of the edit, followed beyond the tiles near the change."""
    shape = (384, 448)
    scene = background(3, shape)
    scene[100:300, 120:330] = (0.05, 0.05, 0.06)                      # a dark shirt
    worn = draw_rect(scene, (220, 200, 250, 240), (0.2, 0.4, 0.9))    # the pendant
    chain = _chain(shape, 2.0)
    worn[chain] = (0.85, 0.85, 0.88)
    res = guard_images(u8(scene), realistic(worn), request="put a necklace on her")
    assert res.applied and res.record["thin_lines_px_joined"] > 0
    inner = _chain(shape, 1.0) & ~_chain(shape, 0.0)
    inner &= np.mgrid[0:shape[0], 0:shape[1]][0] < 205                # the strands, away from the pendant
    assert (np.asarray(res.image)[inner].mean(axis=1) > 128).mean() > 0.95
    far = ~ndimage.binary_dilation(chain | rect_mask(shape, (220, 200, 250, 240)), iterations=12)
    assert psnr(res.image, u8(scene), far) == 99.0


def test_the_moved_edge_of_an_area_is_not_a_line():
    """The thin strip where a dark area's edge moved has the area's colour on one side: not a
    ridge, not joined; a bright ridge of the same shape is."""
    from respec.pixels.guard import thin_lines
    shape = (160, 160)
    c = rect_mask(shape, (60, 60, 90, 90))                       # the edit
    strip = rect_mask(shape, (20, 90, 140, 92))                  # 2 px wide, touching it, 120 px long
    explained = ~strip
    E = np.full(shape + (3,), 0.8, np.float32)
    P = E.copy()
    E[:, :92] = 0.1                                              # a dark area whose edge moved by 2 px
    P[:, :90] = 0.1
    assert not thin_lines(c, explained, E, P).any()
    E[:] = 0.1
    P[:] = 0.1
    E[strip] = 0.9                                               # a bright line on the dark area
    assert np.array_equal(thin_lines(c, explained, E, P), strip)


def test_a_pale_wire_from_the_top_edge_to_the_edit_is_kept_whole():
    """A wire the edit hung from the top edge (Kontext's red ball): 3 px wide, its soft sides nearly
    the wall's colour, shorter than the reach (24 px at 400 px) but running out of the picture: it
    joins the edit. The same line ending inside the picture does not (a streak by the edit)."""
    from respec.pixels.guard import thin_lines
    shape = (400, 400)
    c = rect_mask(shape, (16, 180, 60, 220))                      # the ball, 16 px below the top edge
    wire = rect_mask(shape, (0, 199, 16, 202))
    P = np.full(shape + (3,), 0.5, np.float32)                    # the wall
    E = P.copy()
    E[rect_mask(shape, (0, 199, 16, 200))] = E[rect_mask(shape, (0, 201, 16, 202))] = 0.56   # soft sides
    E[rect_mask(shape, (0, 200, 16, 201))] = 0.75                                          # the core
    assert np.array_equal(thin_lines(c, ~wire, E, P), wire)
    inside = rect_mask(shape, (20, 199, 36, 202))                 # the same line 20 px lower, by a lower ball
    low = rect_mask(shape, (36, 180, 80, 220))
    E2, P2 = np.roll(E, 20, axis=0), P
    assert not thin_lines(low, ~inside, E2, P2).any()


def test_a_stretch_of_a_removed_line_the_change_missed_between_two_it_caught_joins_the_change():
    """A removed red annotation line (3 px): the change mask caught both ends but not 17 px between
    them, which drift does not explain: that gap joins the change (left to I_(t-1) it stays as a red
    fragment, longcat_annot3). A piece touching the change at one place only does not."""
    from respec.pixels.guard.thin_lines import change_gaps
    shape = (512, 512)
    line = rect_mask(shape, (484, 300, 487, 420))
    gap = rect_mask(shape, (484, 369, 487, 386))
    c = line & ~gap
    assert np.array_equal(change_gaps(c, ~line), gap)
    spur = rect_mask(shape, (470, 380, 484, 383))                # a stub off the line: one contact
    assert not change_gaps(line, ~spur).any()
    big = rect_mask(shape, (400, 369, 487, 386))                 # a large area between the ends: not a gap
    assert not change_gaps(c & ~big, ~(line | big)).any()


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
    real = changes.change_mask
    monkeypatch.setattr(changes, "change_mask", lambda *a, **k: calls.append(1) or real(*a, **k))
    history = History.start(Image.fromarray(u8(scene)))
    record, new = run_turn(history, "add a red box",
                           TurnParts(editor=_DriftingEditor(scene), post_edit=[GuardStep()]),
                           TurnSwitches(use_controller=False), seed=3)
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
    node = pack.NODE_CLASS_MAPPINGS["ReSpecDriftGuard"]
    prev = u8(scene)
    edited = realistic(draw_rect(scene, BOX, RED))
    t = lambda a: torch.from_numpy(a).float()[None] / 255.0      # noqa: E731
    image, mask, report, guard = node.execute(t(prev), t(edited), True, instruction="add a red box").result
    out = np.round(image[0].numpy() * 255).astype(np.uint8)
    far = ~ndimage.binary_dilation(rect_mask(SHAPE, BOX), iterations=10)
    assert psnr(out, prev, far) == 99.0 and mask[0].numpy()[BOX[0] + 10, BOX[1] + 10] == 1.0
    assert report.startswith("Drift Guard kept") and json.loads(report.split("\n", 1)[1])["applied"]
    image, _, report, _ = node.execute(t(prev), t(edited), False).result
    assert "switched off" in report and np.allclose(image.numpy(), t(edited).numpy())
    _, _, report, _ = node.execute(t(prev), t(edited), True, instruction="make it a watercolor painting").result
    assert "stepped aside" in report
    # History Append keeps the guard's record (meta.post_edit) and its kept-edit mask with the turn.
    Store = pack.NODE_CLASS_MAPPINGS["ReSpecHistoryStore"]
    Append = pack.NODE_CLASS_MAPPINGS["ReSpecHistoryAppend"]
    hist = Store.execute("in-graph", "s", -1, "", "", image=t(prev)).result[0]
    h, _ = Append.execute(hist, image, "add a red box", guard=guard).result
    entry = h.current.meta["post_edit"][-1]
    assert entry["step"] == "drift_guard" and entry["applied"] and "result" not in entry
    kept = h.current.masks[GUARD_MASK].mask
    assert kept[BOX[0] + 10, BOX[1] + 10] and not kept[far].any()
    with pytest.raises(Exception, match="Drift Guard node"):
        Append.execute(hist, image, "add a red box", guard={"step": "reveal"}).result


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


def test_no_pixel_outside_the_edit_region_is_touched(scene):
    prev = u8(scene)
    edited = realistic(draw_rect(scene, BOX, RED))
    res = guard_images(prev, edited, request="add a red box")
    outside = res.weight == 0
    assert np.array_equal(res.image[outside], prev[outside])          # not blended, not colour-matched: I_(t-1)
    near = ndimage.binary_dilation(rect_mask(SHAPE, BOX), iterations=res.record["margin_px"] + 2)
    assert (res.weight > 0).sum() > 0.9 * rect_mask(SHAPE, BOX).sum() and not (res.weight[~near] > 0).any()


def test_an_old_objects_faint_outline_beside_the_change_is_not_left_behind():
    """A removed box's 1-px outline differs from the editor's background by 6/255, under drift's level:
    the rim rule keeps the editor's pixels there, where I_(t-1) has an edge the editor's image has not
    (without it the outline stays, a visible line)."""
    side = (240, 240)
    flat = np.full((*side, 3), 0.45)
    box = (90, 90, 150, 150)
    ring = ndimage.binary_dilation(rect_mask(side, box), iterations=1) & ~rect_mask(side, box)
    prev = flat.copy()
    prev[rect_mask(side, box)] = RED
    prev[ring] -= 6 / 255
    edited = drift(flat, gain=(1, 1, 1), bias=(0, 0, 0), noise=0.003, seed=4)
    res = guard_images(u8(prev), u8(edited), request="remove the red box")
    off = guard_images(u8(prev), u8(edited), request="remove the red box", params=GuardParams(rim_frac=0.0))
    assert res.applied and off.applied
    outline = np.abs(res.image[ring].astype(int) - u8(edited)[ring].astype(int)).max(axis=-1)
    left = np.abs(off.image[ring].astype(int) - u8(edited)[ring].astype(int)).max(axis=-1)
    assert np.median(outline) <= 2 and np.median(left) >= 5


def _stepped(edited, res):
    """The colour step the composite adds across its region's edge, against the editor's own
    image (mean RMS over channels, 0..255): where the editor's picture is continuous, a paste whose
    colours do not match what is around it is not."""
    back = warp(edited.astype(np.float64), Alignment.from_record(res.record["alignment"]).inverse())
    inside = res.weight >= 1.0
    steps = []
    for axis in (0, 1):
        a = np.take(np.arange(inside.shape[axis]), range(inside.shape[axis] - 1))
        i0 = np.take(inside, a, axis=axis)
        i1 = np.take(inside, a + 1, axis=axis)
        cross = i0 != i1
        o = res.image.astype(np.float64)
        d_out = np.take(o, a + 1, axis=axis) - np.take(o, a, axis=axis)
        d_ed = np.take(back, a + 1, axis=axis) - np.take(back, a, axis=axis)
        steps.append(np.sqrt(((d_out - d_ed) ** 2).mean(axis=-1))[cross])
    return float(np.concatenate(steps).mean())


def test_the_seam_has_no_colour_step(scene):
    prev = u8(scene)
    edited = realistic(draw_rect(scene, BOX, RED), gain=(1.05, 0.96, 1.04))     # an editor that warms the picture
    res = guard_images(prev, edited, request="add a red box")
    assert res.applied
    back = warp(edited.astype(np.float64), Alignment.from_record(res.record["alignment"]).inverse())
    inside = res.weight >= 1.0
    pasted = np.where(inside[..., None], np.clip(np.round(back), 0, 255), prev).astype(np.uint8)   # a plain paste
    plain = _stepped(edited, type(res)(pasted, res.weight, True, "", res.record))
    assert plain > 4.0                                   # the editor's colours meet the previous image's: a step
    assert _stepped(edited, res) < 0.4 * plain
    # and the edit deep inside keeps the editor's colours exactly (the correction fades out), in the
    # previous image's grade: this editor warmed the whole picture, which on a local request is drift
    deep = ndimage.binary_erosion(inside, iterations=res.record["margin_px"] + res.record["band_px"] + 1)
    ref = into_grade(back / 255.0, res.record["grade"]) * 255.0
    assert deep.sum() > 100 and np.abs(res.image[deep].astype(int) - np.round(ref[deep])).max() <= 1


def test_a_drifted_emblem_far_from_the_edit_is_not_an_edit(scene):
    emblem = (20, 150, 44, 180)                 # fine, high-contrast detail an editor's resampling changes
    yy, xx = np.mgrid[:24, :30]
    chk = (((yy // 3) + (xx // 3)) % 2).astype(float)[..., None]
    base = draw_rect(scene, emblem, chk * np.array([0.95, 0.85, 0.3]) + (1 - chk) * 0.05)
    prev = u8(base)
    em = rect_mask(SHAPE, emblem)
    for dx in (0.9, 1.2):
        edited = realistic(draw_rect(base, BOX, RED), dx=dx, seed=2)
        assert changes.change_between(*map(StoredImage.of, (prev, edited)), (SHAPE[1], SHAPE[0])).mask[em].mean() > 0.5
        res = guard_images(prev, edited, request="add a red box")
        assert res.applied and np.array_equal(res.image[em], prev[em])   # the change mask's emblem is drift


def _striped(box):
    y0, x0, y1, x1 = box
    yy, xx = np.mgrid[y0:y1, x0:x1]
    s = (((yy + xx) // 4) % 2).astype(float)[..., None]
    return s * np.array([0.2, 0.4, 0.9]) + (1 - s) * np.array([0.55, 0.6, 0.7])


def test_a_moved_object_is_kept_whole_over_its_old_place(scene):
    old = (60, 60, 120, 150)
    for dy, dx in ((6, 2), (2, 9)):             # stripes over its old stripes: in places the old pixels match
        new = (old[0] + dy, old[1] + dx, old[2] + dy, old[3] + dx)
        prev = u8(draw_rect(scene, old, _striped(old)))
        edited = realistic(draw_rect(scene, new, _striped(new)))
        res = guard_images(prev, edited, request="move the box a little")
        back = warp(edited, Alignment.from_record(res.record["alignment"]).inverse())
        region = ndimage.binary_erosion(rect_mask(SHAPE, old) | rect_mask(SHAPE, new), iterations=2)
        assert res.applied and psnr(res.image, back, region) >= 40, (dy, dx)


def test_a_local_request_with_a_global_word_is_guarded_and_a_global_one_is_not(scene):
    prev = u8(scene)
    edited = realistic(draw_rect(scene, BOX, RED))
    assert guard_images(prev, edited, request="add a red lamp that lights the whole picture").applied
    # what the user asks to keep is not what the user asks to change
    assert guard_images(prev, edited, request="add a red lamp, keep the same golden hour lighting").applied
    assert global_request("turn it into a watercolor painting") and not global_request("add a red lamp")
    res = guard_images(prev, edited, request="add a red lamp and make it night")
    assert not res.applied and "keyword rule ('night')" in res.reason


def test_a_pose_change_around_the_edit_is_left_alone(scene):
    from dataclasses import replace
    from respec.pixels.change_record import ChangeRecord
    from respec.pixels.guard import drift_guard
    from respec.post_edit.guard_step import edit_scope
    prev = u8(scene)
    edited = realistic(draw_rect(scene, BOX, RED))
    p, e = StoredImage.of(prev), StoredImage.of(edited)
    change = changes.change_between(p, e, (SHAPE[1], SHAPE[0]))
    rows = change.info["unstable_grid"]
    assert drift_guard(p, e, ChangeRecord.of(change), scope=edit_scope("add a red hat")).applied            # the scene around it held
    # the editor moved what the hat sits on: the blocks around the edit no longer match I_(t-1)
    gh, gw = len(rows), len(rows[0])
    y0, x0, y1, x1 = BOX
    grid = [["1" if (y0 - 30) / SHAPE[0] * gh <= i < (y1 + 30) / SHAPE[0] * gh
             and (x0 - 30) / SHAPE[1] * gw <= j < (x1 + 30) / SHAPE[1] * gw else "0" for j in range(gw)] for i in range(gh)]
    moved = replace(change, info={**change.info, "unstable_grid": ["".join(r) for r in grid]})
    res = drift_guard(p, e, ChangeRecord.of(moved), scope=edit_scope("add a red hat"))
    assert not res.applied and res.record["why"] == "moved" and res.record["moved_around"] > 0.3
    assert np.array_equal(res.image, edited)


def test_a_filled_hole_far_from_the_change_keeps_the_editors_pixels():
    shape = (512, 512)
    base = background(4, shape)
    framed = draw_rect(base, (128, 128, 384, 384), RED)        # a frame: only its ring changes ...
    framed[136:376, 136:376] = base[136:376, 136:376]          # ... its inside is a hole of the region
    prev = u8(base)
    edited = realistic(framed)
    res = guard_images(prev, edited, request="add a red frame")
    inside = rect_mask(shape, (150, 150, 362, 362))
    assert res.applied and res.weight[inside].min() == 1.0     # the hole is filled: the editor's pixels
    back = warp(edited, Alignment.from_record(res.record["alignment"]).inverse())
    assert psnr(res.image, back, inside) >= 40                  # warped there too, not left empty


TINT_BOX = (60, 140, 130, 200)      # right of BOX, touching it
TINT = np.array([6.0, 3.0, -6.0]) / 255.0   # a faint tint: a few /255, one way over the whole box


def test_a_faint_tint_next_to_a_stronger_edit_is_kept(scene):
    """The change mask finds the red box, not the tint next to it (a few /255, below its threshold
    and within the drift limit); the tint is coherent (one colour shift over an area), so the guard
    keeps it with the box instead of restoring I_(t-1) there."""
    prev = u8(scene)
    truth = draw_rect(scene, BOX, RED)
    tint = rect_mask(SHAPE, TINT_BOX) & ~rect_mask(SHAPE, BOX)
    truth[tint] = np.clip(truth[tint] + TINT, 0, 1)
    edited = realistic(truth)
    res = guard_images(prev, edited, request="add a red box and tint the right of it")
    assert res.applied and res.record.get("coherent_px_joined", 0) > 0
    back = warp(edited, Alignment.from_record(res.record["alignment"]).inverse())
    inner = ndimage.binary_erosion(tint, iterations=3)
    assert psnr(res.image, back, inner) >= 35           # the editor's tinted pixels
    far = ~ndimage.binary_dilation(rect_mask(SHAPE, BOX) | tint, iterations=10)
    assert psnr(res.image, prev, far) == 99.0           # elsewhere still exactly the user's
    old = guard_images(prev, edited, request="add a red box", params=GuardParams(coherent=False))
    assert psnr(old.image, back, inner) < 35            # without the rule the tint was restored


@pytest.mark.parametrize("kind", ["wave", "noise"])
def test_drift_of_the_tints_amplitude_everywhere_is_still_restored(scene, kind):
    """The same few /255 over the whole picture, a slow colour wave (coherent, but everywhere: the
    drift around the change raises the level a tint must pass) or pixel noise (not coherent), is
    drift: it is restored around the edit."""
    prev = u8(scene)
    truth = draw_rect(scene, BOX, RED)
    h, w = SHAPE
    if kind == "wave":
        yy, xx = np.mgrid[0:h, 0:w]
        truth = truth + np.sin(2 * np.pi * xx / w)[..., None] * np.cos(np.pi * yy / h)[..., None] * TINT
    else:
        truth = truth + np.random.default_rng(3).normal(0, 1, truth.shape) * np.abs(TINT).max()
    edited = realistic(np.clip(truth, 0, 1))
    res = guard_images(prev, edited, request="add a red box")
    assert res.applied and not res.record.get("coherent_px_joined")
    if kind == "wave":
        assert res.record["coherent_level"] > 255 * np.abs(TINT).max()
    far = ~ndimage.binary_dilation(rect_mask(SHAPE, BOX), iterations=10)
    assert psnr(res.image, prev, far) == 99.0
    assert psnr(edited, prev, far) < 40                 # the editor drifted there


def test_the_seam_lives_in_the_edits_outermost_band():
    """Without drift, an added object with a faint glow beyond it (below the drift limit, so outside
    the edit region): the membrane reads the glow on the rim, and corrects at most the region's
    outermost band; inside it the output is the editor's pixels exactly."""
    scene = background(5, SHAPE)
    obj = draw_rect(scene, BOX, RED)
    glow = ndimage.binary_dilation(rect_mask(SHAPE, BOX), iterations=12) & ~rect_mask(SHAPE, BOX)
    edited = u8(np.clip(obj + 6.0 / 255.0 * glow[..., None], 0, 1))      # a 6/255 halo, not drift
    res = guard_images(u8(scene), edited, request="add a red box")
    assert res.applied
    K = res.weight >= 1.0
    inner = ndimage.binary_erosion(K, iterations=res.record["band_px"] + 1)
    assert inner.sum() > 0.5 * K.sum()
    assert np.array_equal(res.image[inner], edited[inner])       # the interior: the editor's pixels
    outside = res.weight == 0
    assert np.array_equal(res.image[outside], u8(scene)[outside])


@pytest.mark.parametrize("gain", [1.01, 1.02, 1.03, 1.04, 1.05])
def test_a_global_gain_on_a_flat_photo_is_not_a_change(gain):
    """Sky and water (a flat, low-texture photo), a boat added, the whole picture 1-5 % brighter: the
    colour fit tries the gain model as well as the offset one, so the water stays in the fit and the
    change mask is the boat (IoU >= 0.95), not the water."""
    from synthetic_scenes import iou, sky_and_water
    scene = sky_and_water((256, 384), horizon=0.85)
    box = (168, 110, 228, 280)                                   # the boat, on the horizon
    edited = ndimage.gaussian_filter(draw_rect(scene, box, (0.35, 0.2, 0.1)), (0.6, 0.6, 0))
    edited = u8(drift(edited, gain=(gain,) * 3, bias=(0, 0, 0), noise=0.004, seed=3))
    prev = u8(scene)
    change = changes.change_between(StoredImage.of(prev), StoredImage.of(edited), (384, 256))
    truth = rect_mask((256, 384), box)
    assert iou(change.mask, truth) >= 0.95
    res = guard_images(prev, edited, request="add a brown boat on the horizon")
    assert res.applied and iou(res.weight >= 0.5, truth) >= 0.9
    assert np.array_equal(res.image[res.weight == 0], prev[res.weight == 0])


def _subject_on(bg: np.ndarray) -> np.ndarray:
    """A striped subject (an ellipse) in front of the background `bg`."""
    yy, xx = np.mgrid[0:SHAPE[0], 0:SHAPE[1]]
    inside = ((yy - 100) / 60.0) ** 2 + ((xx - 112) / 45.0) ** 2 <= 1.0
    stripes = (((yy + xx) // 5) % 2).astype(float)[..., None] * np.array([0.6, 0.3, 0.2]) + 0.25
    return np.where(inside[..., None], stripes, bg), inside


def test_a_new_background_keeps_the_subject_exactly(scene):
    prev_f, subject = _subject_on(scene)
    beach, _ = _subject_on(background(11, SHAPE) * 0.5 + np.array([0.45, 0.40, 0.2]))   # sand and sea
    edited = realistic(beach)
    prev = u8(prev_f)
    for request_ in ("change the background to a sunny beach scene", "put her on a beach"):
        res = guard_images(prev, edited, request=request_)
        assert res.applied and res.record["route"] == "background", res.reason
        core = ndimage.binary_erosion(subject, iterations=4)
        assert np.array_equal(res.image[core], prev[core])          # the subject: the user's own pixels
        back = warp(edited, Alignment.from_record(res.record["alignment"]).inverse())
        bg = ~ndimage.binary_dilation(subject, iterations=res.record["band_px"] + 3)
        bg &= ndimage.binary_erosion(np.ones(SHAPE, bool), iterations=6)      # (not the zoom's new border)
        assert psnr(res.image, back, bg) >= 40                      # the new background: the editor's
    # the editor re-drew the subject too: nothing to keep apart, the editor's image is kept
    redrawn = u8(rerender_field(beach, strength=0.35, corr_px=3.0))
    res = guard_images(prev, redrawn, request="change the background to a sunny beach scene")
    assert not res.applied and np.array_equal(res.image, redrawn)


def test_a_users_mask_of_zeros_and_ones_in_uint8_is_read_as_the_bool_mask(scene):
    # one mask rule for every step (respec/pixels/masks.mask_at): a 0/1 uint8 mask marks its ones
    prev = u8(scene)
    edited = realistic(draw_rect(draw_rect(scene, BOX, RED), (20, 20, 50, 60), (0.1, 0.2, 0.9)))
    user = rect_mask(SHAPE, (BOX[0] - 4, BOX[1] - 4, BOX[2] + 4, BOX[3] + 4))
    as_bool = guard_images(prev, edited, user_mask=user)
    as_01 = guard_images(prev, edited, user_mask=user.astype(np.uint8))
    assert as_01.record["region_from"] == "the user's mask"
    assert np.array_equal(as_01.image, as_bool.image) and np.array_equal(as_01.weight, as_bool.weight)


def test_the_request_is_read_once_into_an_edit_scope():
    from respec.pixels.guard import BACKGROUND, GLOBAL, LOCAL
    from respec.post_edit.guard_step import edit_scope
    assert edit_scope("make it night").kind == GLOBAL and edit_scope("make it night").words == "night"
    assert edit_scope("change the background to a beach").kind == BACKGROUND
    local = edit_scope("add a red box and a blue lamp")
    assert local.kind == LOCAL and local.places == 2 and local.named
    assert not edit_scope("").named and edit_scope("").kind == LOCAL


def test_the_guards_change_record_comes_with_its_step_result(scene):
    from respec.pixels.guard import METHOD
    history = History.start(Image.fromarray(u8(scene)))
    record = type("Record", (), {})()
    record.image = StoredImage.of(realistic(draw_rect(scene, BOX, RED)))
    record.masks, record.request, record.plan = {}, "add a red box", None
    result = GuardStep()(history, record)
    assert result.entry["applied"] and result.change is not None
    assert result.change.info["derived_by"] == METHOD and result.change.mask.shape == SHAPE


def test_history_append_keeps_the_change_record_the_guard_node_derived(pack, scene):
    import torch
    node = pack.NODE_CLASS_MAPPINGS["ReSpecDriftGuard"]
    t = lambda a: torch.from_numpy(a).float()[None] / 255.0      # noqa: E731
    prev = u8(scene)
    image, _, _, guard = node.execute(t(prev), t(realistic(draw_rect(scene, BOX, RED))), True,
                                      instruction="add a red box").result
    hist = pack.NODE_CLASS_MAPPINGS["ReSpecHistoryStore"].execute("in-graph", "s", -1, "", "", image=t(prev)).result[0]
    h, _ = pack.NODE_CLASS_MAPPINGS["ReSpecHistoryAppend"].execute(hist, image, "add a red box", guard=guard).result
    # the guard's output is in I_0's frame and changed only inside the kept edit: its record says so
    change = h.current.masks[CHANGE].info
    assert change["derived_by"] == "drift-guard-v2" and change["alignment"]["scale"] == 1.0
