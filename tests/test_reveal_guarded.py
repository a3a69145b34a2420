"""Reveal Composite inside a guarded chain (issue 32): with the Drift Guard on, the pasted core is
I_{k-1}'s own pixels (aligned into the guard's frame), the seam is made against what the guard
keeps; without the guard, the colour-matched paste stays."""
from __future__ import annotations

import numpy as np
from PIL import Image

from respec.controller.provenance_selector import selector_parts
from respec.history import REVEAL_SOURCE, History
from respec.pixels.guard import GUARD_MASK
from respec.pixels.masks import erode
from respec.pixels.reveal import exact_patch
from respec.post_edit.guard_step import GuardStep
from respec.post_edit.reveal_step import RevealStep
from respec.turn import TurnParts, run_turn
from synthetic_scenes import background, draw_rect, drift, moved, rect_mask, u8

SHAPE = (120, 160)
BOARD = (35, 50, 85, 110)
BOX = (90, 10, 110, 40)


class DriftingEditor:
    """Paints what a request adds (a red board, a blue box), re-invents a removed board's area as
    the mean colour around it; every call tints the whole picture by a few per cent, adds noise
    and (shift=True) moves the frame by a sub-pixel shift, as real editors do."""

    name = "drifting"

    def __init__(self, shift: bool = False):
        self.shift, self.last_run = shift, {}

    def edit(self, images, instruction, *, output_size, seed, steps=None, guidance=None):
        cur = np.asarray(images[-1]).astype(np.float64) / 255.0
        text = instruction.lower()
        if text.startswith("add a red board"):
            cur = draw_rect(cur, BOARD, (0.85, 0.2, 0.15))
        elif text.startswith("add a blue box"):
            cur = draw_rect(cur, BOX, (0.1, 0.2, 0.8))
        elif text.startswith("remove the red board"):
            y0, x0, y1, x1 = BOARD
            ring = np.zeros(cur.shape[:2], bool)
            ring[y0 - 3:y1 + 3, x0 - 3:x1 + 3] = True
            ring[y0:y1, x0:x1] = False
            cur = draw_rect(cur, BOARD, cur[ring].mean(axis=0))
        if self.shift:
            cur = moved(cur, 0.4, -0.3)
        out = drift(cur, gain=(1.04, 0.97, 1.02), bias=(0.01, -0.01, 0.0), noise=0.004, seed=seed)
        return Image.fromarray(u8(out))


def _chain(post_edit, shift=False):
    planner, selector = selector_parts("provenance")
    parts = TurnParts(editor=DriftingEditor(shift), planner=planner, selector=selector, post_edit=post_edit)
    h = History.start(u8(background(11, SHAPE)))
    for t, text in enumerate(("add a red board in the middle", "add a blue box at the bottom"), 1):
        _, h = run_turn(h, text, parts, is_restoration=False, seed=t)
    return run_turn(h, "remove the red board", parts, is_restoration=True, seed=3)


def test_in_a_guarded_chain_the_paste_is_the_sources_own_pixels_beyond_the_seam_band():
    for shift in (False, True):
        record, h = _chain([RevealStep(), GuardStep()], shift=shift)
        reveal, guard = record.post_edit
        assert reveal["applied"] and guard["applied"], (reveal, guard)
        assert guard["exact_inside"]["source_id"] == 0 and guard["exact_inside"]["core_px"] > 0
        out, i0 = h.current.image.array, h.image(0).array
        inside = erode(rect_mask(SHAPE, BOARD), 2)
        # the guarded chain keeps I_0's frame: the core is I_0's bytes exactly, drift and shift undone
        assert np.array_equal(out[inside], i0[inside])
        assert GUARD_MASK in h.current.masks and REVEAL_SOURCE in h.current.masks


def test_without_the_guard_the_paste_stays_colour_matched_to_the_edit():
    record, h = _chain([RevealStep()])
    assert record.post_edit[0]["applied"]
    out, i0 = h.current.image.array.astype(int), h.image(0).array.astype(int)
    inside = erode(rect_mask(SHAPE, BOARD), 2)
    diff = np.abs(out[inside] - i0[inside]).mean(axis=0)
    assert diff.max() > 2.0           # the editor's tint is followed (here +4 % red), not I_0's bytes


def test_the_patch_is_none_when_nothing_was_pasted_and_keeps_the_guards_untouched_pixels():
    scene = background(3, SHAPE)
    h = History.start(u8(scene))
    img = u8(draw_rect(scene, BOARD, (0.85, 0.2, 0.15)))
    h = h.append(img, "add a red board")
    assert exact_patch(h, np.zeros(SHAPE, np.float32), {"source_id": 0}) is None
    # applied only where the guard kept the edit: elsewhere the guard's output is left as it is
    img = u8(drift(draw_rect(scene, BOARD, (0.85, 0.2, 0.15)), noise=0.01, seed=5))
    w = np.zeros(SHAPE, np.float32)
    w[40:80, 55:75] = 1.0
    patch = exact_patch(h, w, {"source_id": 0, "turn_alignment": None})
    allowed = np.zeros(SHAPE, bool)
    allowed[40:80, 55:65] = True
    out = patch.apply(img, allowed=allowed)
    assert np.array_equal(out[40:80, 55:65], h.image(0).array[40:80, 55:65])
    assert np.array_equal(out[40:80, 65:75], img[40:80, 65:75])
