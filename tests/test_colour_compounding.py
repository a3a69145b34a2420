"""No compounding (issue 43): a colour fit is measured against the picture it restores, not chained
turn on turn. The Drift Guard maps every local edit into I_{t-1}'s grade (respec/pixels/grade.py
GRADE_FROM), so an editor's small cast per turn does not pile up where turns keep re-drawing; the
verification's colour check (respec/pixels/verify/colour.py) fails written pixels off the colour of
the picture they restore beyond this turn's fit."""
from __future__ import annotations

import numpy as np
import pytest

from PIL import Image

from respec.controller.provenance_selector import selector_parts
from respec.errors import InputError
from respec.history import History
from respec.pixels.colour_fit import ColourFit
from respec.pixels.verify import Composite, verify
from respec.pixels.verify.colour import FIT_TOL, NAME, check_colour, map_distance
from respec.pixels.verify.run import CHECKS
from respec.post_edit.guard_step import GuardStep
from respec.turn import TurnParts, run_turn
from synthetic_scenes import background, draw_rect, drift, rect_mask, u8

SHAPE = (120, 160)
BOARD = (35, 50, 85, 110)
HAIR = (85, 50, 97, 110)           # under the board: every turn re-draws it a little
CAST = (6 / 255, 0.0, -4 / 255)   # the editor's cast per call, below what the seam alone used to be left with
TURNS = 6


class CastingEditor:
    """Adds a red board or takes it away (re-inventing the scene behind it), re-draws the strip under
    it (a faint pattern whose sign alternates, so the strip is in the change every turn), and casts
    the whole picture by CAST on every call, as an editor working on the pack's own output does."""

    name = "casting"

    def __init__(self, scene: np.ndarray):
        self.scene, self.last_run = scene, {}

    def edit(self, images, instruction, *, output_size, seed, steps=None, guidance=None):
        cur = np.asarray(images[-1]).astype(np.float64) / 255.0
        y0, x0, y1, x1 = BOARD
        if instruction.lower().startswith("add"):
            cur = draw_rect(cur, BOARD, (0.85, 0.2, 0.15))
        else:
            ring = np.zeros(cur.shape[:2], bool)
            ring[y0 - 3:y1 + 3, x0 - 3:x1 + 3] = True
            ring[y0:y1, x0:x1] = False
            cur = draw_rect(cur, BOARD, self.scene[y0:y1, x0:x1] * 0.9 + cur[ring].mean(axis=0) * 0.1)
        hy0, hx0, hy1, hx1 = HAIR
        stripes = 0.08 * np.sin(np.arange(hx1 - hx0) / 2.0)[None, :, None]
        cur = cur.copy()
        cur[hy0:hy1, hx0:hx1] += stripes * (1 if seed % 2 else -1)
        out = drift(np.clip(cur, 0, 1), gain=(1.0, 1.0, 1.0), bias=CAST, noise=0.004, seed=seed)
        return Image.fromarray(u8(out))


def _hair_cast_by_turn() -> list[tuple[np.ndarray, bool]]:
    scene = background(11, SHAPE)
    planner, selector = selector_parts("provenance")
    parts = TurnParts(editor=CastingEditor(scene), planner=planner, selector=selector, post_edit=[GuardStep()])
    h = History.start(u8(scene))
    i0 = h.current.image.array.astype(np.float64)
    hair = rect_mask(SHAPE, HAIR)
    casts = []
    for t in range(1, TURNS + 1):
        add = t % 2 == 1
        record, h = run_turn(h, "add a red board in the middle" if add else "remove the red board", parts,
                             is_restoration=not add, seed=t)
        guarded = next(e for e in record.post_edit if e.get("step") == "drift_guard").get("applied", False)
        # the strip's mean over two turns cancels the pattern: what is left is the colour drift
        casts.append(((h.current.image.array.astype(np.float64) - i0)[hair].mean(axis=0) / 255.0, guarded))
    return casts


def test_a_six_turn_chain_with_a_small_cast_per_turn_does_not_compound_beyond_one_turns_fit():
    read = _hair_cast_by_turn()
    casts = [c for c, _ in read]
    one_turn = float(np.abs(CAST).max())
    assert all(np.abs(c).max() <= one_turn + 2 / 255 for c in casts), [np.round(c * 255, 1) for c in casts]
    # and where the guard applied it does not grow: no guarded turn drifts more than the first. (A turn where
    # it stepped aside hands back the editor's picture, one call's cast: turn 6's removal leaves a 43 px rim
    # of the board, final since a rim of 40 px or more is, verify/islands.RIM_FINAL_PX.)
    guarded = [c for c, applied in read if applied]
    assert read[0][1] and len(guarded) >= TURNS - 1
    assert all(np.abs(c).max() <= np.abs(casts[0]).max() + 2 / 255 for c in guarded)


# ---- the verification's colour check -------------------------------------------------------------

def _scene(shape=(256, 320), seed=4) -> np.ndarray:
    return background(seed, shape)


def _disk(shape=(256, 320), r=80) -> np.ndarray:
    yy, xx = np.mgrid[:shape[0], :shape[1]]
    return (yy - shape[0] // 2) ** 2 + (xx - shape[1] // 2) ** 2 < r * r


TURN_FIT = ColourFit((1.04, 0.97, 1.0), (0.02, -0.01, -0.02))


def _composite(written_pixels: np.ndarray, scene: np.ndarray, step: str = "reveal") -> Composite:
    """The editor's picture is TURN_FIT(scene) (its drift); `old` is the scene; the disk is written
    with `written_pixels`."""
    disk = _disk(scene.shape[:2])
    fallback = u8(np.clip(TURN_FIT.apply(scene.astype(np.float32)), 0, 1))
    kept = fallback.copy()
    kept[disk] = u8(np.clip(written_pixels, 0, 1))[disk]
    return Composite(step, kept, fallback, u8(scene), disk.astype(np.float32))


def test_old_pixels_written_as_they_are_pass():
    scene = _scene()
    read = check_colour(_composite(scene, scene, "guard"))
    assert read.finding is None and read.measured["fit_off"] < 1e-3


def test_old_pixels_through_this_turns_fit_pass():
    scene = _scene()
    read = check_colour(_composite(TURN_FIT.apply(scene.astype(np.float32)), scene))
    assert read.finding is None and read.measured["fit_off"] < FIT_TOL


def test_a_fit_chained_over_turns_fails():
    scene = _scene()
    twice = TURN_FIT.apply(TURN_FIT.apply(TURN_FIT.apply(scene.astype(np.float32))))
    assert map_distance(TURN_FIT, ColourFit((1, 1, 1), (0, 0, 0))) > FIT_TOL / 2
    read = check_colour(_composite(twice, scene))
    assert read.finding is not None and read.finding.check == NAME and "chained" in read.finding.detail


def test_written_pixels_off_colour_from_old_fail():
    # a purple patch where a brim was: part of the written pixels tinted, the rest old's own
    scene = _scene()
    tinted = scene.copy()
    tinted[90:150, 120:190] += (0.1, -0.06, 0.12)
    read = check_colour(_composite(tinted, scene, "guard"))
    assert read.finding is not None and "patch" in read.finding.detail


def test_an_off_colour_composite_makes_the_step_step_aside():
    scene = _scene()
    tinted = scene + np.asarray((0.12, -0.02, -0.1))
    c = _composite(tinted, scene)
    verdict = verify(c, checks=tuple((n, f) for n, f in CHECKS if n == NAME))
    assert not verdict.passed and verdict.failed_check == NAME and np.array_equal(verdict.image, c.fallback)


def test_the_colour_check_is_registered():
    assert NAME in dict(CHECKS)


@pytest.mark.parametrize("written", ["none", "few"])
def test_too_few_written_pixels_are_not_judged(written):
    scene = _scene()
    c = _composite(scene + 0.2, scene)
    w = {"none": np.zeros(scene.shape[:2], np.float32),
         "few": rect_mask(scene.shape[:2], (0, 0, 4, 4)).astype(np.float32)}[written]
    read = check_colour(Composite("reveal", c.kept, c.fallback, c.old, w))
    assert read.finding is None and read.measured["written_cells"] < 16


def test_nan_weights_are_refused_before_any_check():
    scene = _scene()
    c = _composite(scene + 0.2, scene)
    with pytest.raises(InputError, match="written"):
        Composite("reveal", c.kept, c.fallback, c.old, np.full(scene.shape[:2], np.nan, np.float32))


def test_tiny_pictures_are_read():
    for shape in ((1, 1), (5, 3), (33, 47)):
        scene = _scene(shape)
        c = Composite("undo", u8(scene), u8(scene), u8(scene), np.ones(shape, np.float32))
        assert check_colour(c).finding is None
