"""The simulated OCCUR world: layer bookkeeping, the editor's documented defects, and scores with
known answers (oracle R_restore, perfect restoration, re-invention bound, wrong reference)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from respec.occur.scenario import load_dataset, validate_dataset
from respec.errors import InputError
from respec.history import History
from respec.eval.metrics import DEFAULT_PSNR_CAP, occur_regions
from respec.pixels.alignment import warp
from respec.sim import REINVENTED, SimDefects, SimEditor, true_reference_turn

SIZE = 128


def _scenario(turns, rtype="remove", occluders=("crate",), ref=0, occludee_box=(0.3, 0.45, 0.6, 0.75)):
    raw = {"id": "t", "image": "skimage:astronaut", "revelation_type": rtype, "occluders": list(occluders),
           "occludee": "mission patch", "reference_turn": ref, "occludee_box": list(occludee_box), "turns": turns}
    return validate_dataset({"format": "occur-scenarios", "scenarios": [raw]})[0]


OCC = {"instruction": "Add a crate in the middle.", "stage": "O",
       "actions": [{"do": "add", "label": "crate", "box": [0.25, 0.4, 0.65, 0.8]}]}
REMOVE = {"instruction": "Remove the crate.", "stage": "R", "actions": [{"do": "remove", "label": "crate"}]}
RECOLOUR_OCCLUDEE = {"instruction": "Make the mission patch red.", "stage": "M",
                     "actions": [{"do": "recolor", "box": [0.3, 0.45, 0.6, 0.75], "color": "#cc2020"}]}
KITE = {"instruction": "Add a kite at the top right.", "stage": "M", "new_objects": ["kite"],
        "actions": [{"do": "add", "label": "kite", "box": [0.75, 0.05, 0.9, 0.2]}]}


def run(scenario, editor, ids_for_turn=None, seed=0) -> History:
    """Run every turn; ids_for_turn(t, history) gives the editor's image ids (default [t - 1])."""
    history = History.start(scenario.load_image(SIZE))
    for t in range(1, scenario.num_turns + 1):
        ids = ids_for_turn(t, history) if ids_for_turn else [t - 1]
        editor.begin_turn(scenario, t)
        out = editor.edit([history.image(i).rgb() for i in ids], scenario.turns[t - 1].instruction,
                          output_size=history.current.image.size, seed=seed + t)
        history = history.append(out, scenario.turns[t - 1].instruction)
    return history


def hrs(scenario, ref):
    """The editor images of a +HRS run: [ref, I_{N-1}] on the revelation turn, else [I_{t-1}]."""
    return lambda t, h: [ref, t - 1] if t == scenario.restoration_turn else [t - 1]


@pytest.fixture(scope="module")
def scorer():
    from respec.eval.metric_models import build_tiny_scorer
    return build_tiny_scorer(0)


def images(history):
    return [history.image(t).rgb() for t in range(1, len(history))]


# ------------------------------------------------------------------------------ bookkeeping

def test_the_editor_needs_the_turn_context_and_a_scenario_with_geometry():
    editor = SimEditor()
    s = _scenario([OCC, REMOVE])
    with pytest.raises(InputError, match="begin_turn"):
        editor.edit([s.load_image(SIZE)], "x", output_size=(SIZE, SIZE), seed=0)
    plain = load_dataset("occur_sample")[0]
    if not plain.has_geometry:
        with pytest.raises(InputError, match="geometry"):
            editor.begin_turn(plain, 1)


def test_the_editor_refuses_images_it_never_made_after_turn_one():
    editor = SimEditor()
    s = _scenario([OCC, REMOVE])
    editor.begin_turn(s, 2)
    with pytest.raises(InputError, match="recognises none"):
        editor.edit([s.load_image(SIZE)], "x", output_size=(SIZE, SIZE), seed=0)


def test_the_same_seed_and_inputs_give_the_same_pixels_and_another_seed_other_drift():
    s = _scenario([OCC, REMOVE])
    a, b = run(s, SimEditor()), run(s, SimEditor())
    c = run(s, SimEditor(), seed=100)
    assert a.image(2) == b.image(2)
    assert a.image(2) != c.image(2)


def test_the_occluder_hides_the_occludee_and_the_true_reference_is_the_image_before():
    s = _scenario([RECOLOUR_OCCLUDEE, OCC, REMOVE], ref=1)
    editor = SimEditor()
    h = run(s, editor)
    truth = [editor.truth(s, im) for im in images(h)]
    assert not truth[0].hidden.any()
    assert truth[1].hidden.sum() > 0.9 * truth[1].occludee.sum()
    assert truth[2].hidden.sum() == 0
    assert truth[2].reference_turn == 1 == true_reference_turn(s, h.image(0).size)


@pytest.mark.parametrize("dataset", ["occur_sim", "occur_sample", "occur_conversation"])
def test_every_shipped_reference_is_the_worlds_true_reference(dataset):
    ds = load_dataset(dataset)
    assert all(s.has_geometry for s in ds)
    for s in ds:
        assert true_reference_turn(s, (96, 96)) == s.reference_turn, s.id


# ------------------------------------------------------------------------------ known answers

@pytest.mark.parametrize("rtype", ["remove", "move", "resize", "replace", "multi"])
def test_oracle_R_restore_equals_the_hidden_then_revealed_pixels_exactly(rtype):
    s = next(x for x in load_dataset("occur_sim") if x.revelation_type == rtype)
    editor = SimEditor()
    h = run(s, editor)
    masks = editor.oracle_masks(s, images(h))
    r_restore, _ = occur_regions(masks)
    truths = [editor.truth(s, im) for im in images(h)]
    hidden_before = np.zeros_like(r_restore)
    for tr in truths[:-1]:
        hidden_before |= tr.occluder
    revealed_now = truths[-1].revealed
    assert r_restore.any()
    assert np.array_equal(r_restore, revealed_now)
    assert not (revealed_now & ~hidden_before).any()    # only pixels an occluder hid come back


@pytest.mark.slow
def test_a_perfect_restoration_scores_S_restore_exactly_1(scorer):
    s = _scenario([KITE, OCC, REMOVE], ref=1)
    editor = SimEditor(SimDefects.none())
    h = run(s, editor, hrs(s, 1))
    masks = editor.oracle_masks(s, images(h))
    score = scorer.occur_score(h.image(3).rgb(), h.image(1).rgb(), masks)
    assert score["S_restore"] == 1.0
    assert score["restore"]["psnr_db"] == math.inf


def reinvention_bound(ref: np.ndarray, region: np.ndarray, cap: float = DEFAULT_PSNR_CAP) -> float:
    """An upper bound on S_restore of any fill that is constant on each connected component of the
    revealed region (the sim's re-invention without drift): for every constant c,
    mean((x - c)^2) >= Var(x) on the component, so MSE >= V := within-component variance, PSNR <=
    10 log10(1 / V), and with LPIPS and CLIP parts at most 1: S_restore <= (2 + PSNR_norm) / 3."""
    from scipy.ndimage import label
    x = ref.astype(np.float64) / 255.0
    comps, n = label(region)
    sq = 0.0
    for k in range(1, n + 1):
        px = x[comps == k]
        sq += float(((px - px.mean(axis=0)) ** 2).sum())
    v = sq / (3.0 * region.sum())
    psnr_norm = min(max(10.0 * math.log10(1.0 / v), 0.0), cap) / cap
    return (2.0 + psnr_norm) / 3.0


@pytest.mark.slow
def test_a_re_invented_restoration_scores_below_the_derived_bound(scorer):
    s = _scenario([OCC, REMOVE])
    editor = SimEditor(SimDefects.none())
    h = run(s, editor)                                   # the baseline: only the current image
    truth = editor.truth(s, h.image(2).rgb())
    assert (truth.filled_from[truth.revealed] == REINVENTED).all()
    masks = editor.oracle_masks(s, images(h))
    r_restore, _ = occur_regions(masks)
    bound = reinvention_bound(np.asarray(h.image(0).rgb()), r_restore)
    score = scorer.occur_score(h.image(2).rgb(), h.image(0).rgb(), masks)
    assert bound < 0.9                      # the photo's hidden texture makes the bound bite
    assert score["S_restore"] <= bound


@pytest.mark.slow
def test_the_wrong_reference_scores_lower_than_the_right_one(scorer):
    # I_1 repaints the occludee, so I_ref = I_1; I_0 shows the old colours: its content is wrong.
    s = _scenario([RECOLOUR_OCCLUDEE, OCC, REMOVE], ref=1)
    right_editor, wrong_editor = SimEditor(), SimEditor()
    right = run(s, right_editor, hrs(s, 1))
    wrong = run(s, wrong_editor, hrs(s, 0))
    assert right.image(2) == wrong.image(2)              # identical up to the revelation turn
    masks = right_editor.oracle_masks(s, images(right))
    ref = right.image(1).rgb()
    s_right = scorer.occur_score(right.image(3).rgb(), ref, masks)["S_restore"]
    s_wrong = scorer.occur_score(wrong.image(3).rgb(), ref, masks)["S_restore"]
    assert s_wrong < s_right
    assert set(np.unique(wrong_editor.truth(s, wrong.image(3).rgb()).filled_from[masks.occ[1]])) <= {0, -1}


def test_copying_follows_the_image_ids_order_and_skips_images_that_do_not_show_the_pixel():
    s = _scenario([KITE, OCC, REMOVE], ref=1)
    editor = SimEditor()
    # [I_2 (shows the crate), I_0]: I_2 does not show the hidden pixels, so they come from I_0.
    h = run(s, editor, lambda t, hist: [2, 0] if t == 3 else [t - 1])
    tr = editor.truth(s, h.image(3).rgb())
    assert tr.revealed.any() and (tr.filled_from[tr.revealed] == 0).all()
    assert editor.last_run["copied_px"] == {"I_0": int(tr.revealed.sum())}


@pytest.mark.slow
def test_the_right_reference_beats_re_invention_with_the_default_defects(scorer):
    s = _scenario([KITE, OCC, REMOVE], ref=1)
    base_editor, hrs_editor = SimEditor(), SimEditor()
    base = run(s, base_editor)
    with_ref = run(s, hrs_editor, hrs(s, 1))
    masks = hrs_editor.oracle_masks(s, images(with_ref))
    ref = with_ref.image(1).rgb()
    assert (scorer.occur_score(with_ref.image(3).rgb(), ref, masks)["S_restore"]
            > scorer.occur_score(base.image(3).rgb(), ref, masks)["S_restore"])


def test_defect_parameters_are_checked():
    with pytest.raises(InputError, match="copy_fidelity"):
        SimDefects(copy_fidelity=1.5)
    with pytest.raises(InputError, match="colour_shift"):
        SimDefects(colour_shift=-0.1)


def test_a_zooming_shifting_editor_moves_the_frame_and_the_truth_follows():
    from dataclasses import replace as _replace
    from respec.pixels.alignment import Alignment, estimate_alignment
    s = _scenario([OCC, REMOVE])
    exact = SimEditor(SimDefects.none())
    moving = SimEditor(_replace(SimDefects.none(), zoom_pct=2.0, shift_px=1.5))
    h0, h1 = run(s, exact), run(s, moving)
    step = Alignment(1.5, 0.75, 0.98)
    f1, f2 = moving.frame(s, h1.image(1).rgb()), moving.frame(s, h1.image(2).rgb())
    assert f1.alignment.scale == pytest.approx(0.98) and f1.alignment.dx == pytest.approx(1.5)
    assert f2.alignment.scale == pytest.approx(0.98 ** 2) and f2.alignment.dx == pytest.approx(step.compose(step).dx)
    # the image is the perfect editor's, moved by that alignment; the truth masks moved with it
    al = estimate_alignment(h0.image(1).array, h1.image(1).array)
    assert al.scale == pytest.approx(0.98, abs=2e-3) and al.dx == pytest.approx(1.5, abs=0.3)
    t0, t1 = exact.truth(s, h0.image(1).rgb()), moving.truth(s, h1.image(1).rgb())
    assert (warp(t0.occluder, f1.alignment, order=0) != t1.occluder).mean() < 0.002
    # the occluder's colour sits where the moved truth says
    crate = np.asarray(h1.image(1).rgb(), np.float64)[t1.occluder].mean(axis=0)
    crate0 = np.asarray(h0.image(1).rgb(), np.float64)[t0.occluder].mean(axis=0)
    assert np.abs(crate - crate0).max() < 6


def test_re_render_and_pose_change_leave_the_frame_and_change_the_pixels():
    from dataclasses import replace as _replace
    s = _scenario([OCC, REMOVE])
    base = run(s, SimEditor(SimDefects.none())).image(1).array.astype(float)
    for knobs in ({"rerender": 0.02, "rerender_shading": 0.03}, {"pose_px": 3.0}, {"local_warp_px": 1.0}):
        ed = SimEditor(_replace(SimDefects.none(), **knobs))
        img = run(s, ed).image(1)
        assert ed.frame(s, img.rgb()).alignment.is_identity
        diff = np.abs(img.array.astype(float) - base).max(axis=2)
        assert (diff > 4).mean() > 0.01, knobs
    with pytest.raises(InputError):
        SimDefects(zoom_pct=-1.0)


def test_an_image_in_the_previous_frame_is_registered_with_that_frame():
    # The Drift Guard returns the edit in I_(t-1)'s frame: the sim keeps the edit's scene state
    # and truth for it, with I_(t-1)'s alignment (else the next turn mis-warps its base).
    from dataclasses import replace as _replace
    s = _scenario([OCC, REMOVE])
    moving = SimEditor(_replace(SimDefects.none(), zoom_pct=2.0, shift_px=1.5))
    h = run(s, moving)
    out = h.image(1).rgb()
    i0 = h.image(0).rgb()
    guarded = np.asarray(i0).copy()
    guarded[0, 0] = 255 - guarded[0, 0]         # some other image
    fr = moving.register_derived(s, guarded, out, frame_of=i0)
    assert fr.alignment.is_identity and fr.state == moving.frame(s, out).state
    assert moving.frame(s, guarded).alignment.is_identity
    assert not moving.register_derived(s, guarded, out).alignment.is_identity   # the edit's frame by default
    with pytest.raises(InputError, match="frame"):
        moving.register_derived(s, guarded, out, frame_of=np.zeros_like(guarded))


def test_the_subject_warp_moves_the_picture_around_the_subject_and_not_far_from_it():
    from respec.pixels.flow import estimate_flow
    s = load_dataset("occur_conversation").scenarios[0]
    still = run(s, SimEditor(SimDefects.none()), seed=5)
    warped = run(s, SimEditor(replace_defects(SimDefects.none(), subject_warp_px=1.5)), seed=5)
    a, b = still.image(1).array, warped.image(1).array
    h, w = a.shape[:2]
    flow = estimate_flow(a, b)
    x0, y0, x1, y1 = s.occludee_box
    cy, cx = int((y0 + y1) / 2 * h), int((x0 + x1) / 2 * w)
    yy, xx = np.mgrid[0:h, 0:w]
    r = np.hypot(yy - cy, xx - cx)
    length = flow.length()
    near, far = length[(r < min(h, w) / 8) & flow.evidence], length[(r > 0.75 * min(h, w)) & flow.evidence]
    assert 0.3 < np.percentile(near, 90) <= 1.6 and (far.size == 0 or np.median(far) < 0.1)
    with pytest.raises(InputError, match="subject_warp_px"):
        SimDefects(subject_warp_px=-1.0)


def replace_defects(d, **changes):
    from dataclasses import replace
    return replace(d, **changes)
