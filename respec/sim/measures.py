"""The simulated world's ground-truth measurements of a conversation (beyond the paper; the Drift
Guard's measurement, docs/drift-guard.md). A SIMULATION, never a model of image quality.

`untouched_region(scenario, size)`: the pixels no turn's ground-truth edit region touched (no
object in any state of the lineage, no tinted box, no style turn), shrunk by `GT_MARGIN_PX` so an
object's blurred rim is not counted; their exact ground truth is I_0's pixels, in I_0's frame.
`untouched_psnr` compares an image with I_0 there. `turn_edit_region` is what one turn changes;
`EditFidelity`, a post-edit step that only measures, compares the Drift Guard's output with the
editor's own output on it.

The benchmark reaches these through the SimEditor (`edit_fidelity_step`, `untouched_psnr`), the
same way as its other ground-truth hooks (`truth`, `oracle_masks`): the runner imports nothing of
respec/sim. This module imports no SimEditor (the editor imports it).
"""
from __future__ import annotations

import numpy as np
from scipy import ndimage

from ..errors import InputError
from ..post_edit.result import StepResult
from .world import BACKGROUND, WorldState, apply_actions, box_mask, layer_map

GT_MARGIN_PX = 2


def untouched_region(scenario, size: tuple[int, int], turns: int | None = None) -> np.ndarray:
    """bool H×W (size = (w, h)): pixels no ground-truth edit of turns 1..turns (default: all)
    touched (see the module docstring)."""
    w, h = size
    touched = np.zeros((h, w), bool)
    state = WorldState()
    for turn in scenario.turns[: turns if turns is not None else len(scenario.turns)]:
        new, effect = apply_actions(state, turn.actions, scenario.occluders)
        if effect.style:
            return np.zeros((h, w), bool)
        for s in (state, new):
            touched |= layer_map(s, size) != BACKGROUND
        for box, _ in effect.tints:
            touched |= box_mask(box, size)
        state = new
    return ~ndimage.binary_dilation(touched, iterations=GT_MARGIN_PX) if touched.any() else ~touched


def untouched_psnr(original, image, region: np.ndarray) -> float | None:
    """PSNR (dB, 8-bit) of `image` against I_0 (`original`) on `region`; None when the region is
    empty; 100.0 when they agree exactly."""
    if not region.any():
        return None
    a = np.asarray(original, np.float64)[..., :3]
    b = np.asarray(image, np.float64)[..., :3]
    if a.shape != b.shape:
        raise InputError(f"untouched PSNR needs images of one size, got {a.shape} and {b.shape}")
    mse = float(((a - b) ** 2)[region].mean())
    return 100.0 if mse == 0 else round(float(10 * np.log10(255.0 ** 2 / mse)), 4)


def turn_edit_region(scenario, t: int, size: tuple[int, int]) -> np.ndarray:
    """bool H×W (size = (w, h)), in the world's frame: the pixels turn t's ground truth changes
    (every pixel of an object it adds, removes, moves, resizes, replaces or gives another tint,
    before and after; its tinted boxes; the whole picture on a style turn). An object recoloured
    to the tint it already has is unchanged."""
    w, h = size
    state = WorldState()
    for turn in scenario.turns[: t - 1]:
        state, _ = apply_actions(state, turn.actions, scenario.occluders)
    new, effect = apply_actions(state, scenario.turns[t - 1].actions, scenario.occluders)
    if effect.style:
        return np.ones((h, w), bool)

    def labels(s: WorldState) -> np.ndarray:
        names = np.array([""] + s.labels(), dtype=object)
        return names[layer_map(s, size).astype(np.int64) + 1]

    before, after = labels(state), labels(new)
    out = before != after
    kept_before = {o.label: o for o in state.objects}
    for o in new.objects:
        if kept_before.get(o.label) != o:      # added, moved, resized, replaced or given another tint
            out |= (after == o.label) | (before == o.label)
    for box, _ in effect.tints:
        out |= box_mask(box, size)
    return out


class EditFidelity:
    """A measuring post-edit step for the benchmark after the Drift Guard (the sim only; it never
    changes the image): the PSNR of the guard's output against the editor's own output on turn t's
    ground-truth edit region (`turn_edit_region`, carried into each image's frame by the sim's
    exact frames, shrunk by GT_MARGIN_PX so the object's blurred rim is not counted). High: the
    guard kept the edit as the editor made it; low: it reverted or recoloured part of it."""

    name = "sim_edit_fidelity"

    def __init__(self, editor, scenario):
        self.editor = editor    # the SimEditor that made the images (its exact frames)
        self.scenario = scenario

    def __call__(self, history, record) -> StepResult:
        from ..pixels.alignment import support, warp
        from ..pixels.masks import erode
        guarded = any(e.get("step") == "drift_guard" and e.get("applied") for e in record.post_edit)
        if not guarded:
            return StepResult(self.name, {"edit_region_psnr": None, "reason": "no guarded output to measure"})
        f_edit = self.editor.frame(self.scenario, record.edited)
        f_out = self.editor.frame(self.scenario, history.current.image)   # the guard returns I_(t-1)'s frame
        if f_edit is None or f_out is None:
            return StepResult(self.name, {"edit_region_psnr": None, "reason": "the sim does not know these images"})
        out = np.asarray(getattr(record.image, "array", record.image))[..., :3].astype(np.float64)
        h, w = out.shape[:2]
        region = turn_edit_region(self.scenario, record.turn, (w, h))
        to_out = f_edit.alignment.inverse().compose(f_out.alignment)
        if not f_out.alignment.is_identity:
            region = warp(region, f_out.alignment, order=0)
        region = erode(region, GT_MARGIN_PX) & support(to_out, (h, w))
        if not region.any():
            return StepResult(self.name, {"edit_region_psnr": None, "reason": "no edit region"})
        edited = np.asarray(record.edited.array, np.float64)[..., :3]
        edited = warp(edited, to_out) if not to_out.is_identity else edited
        mse = float(((out - edited) ** 2)[region].mean())
        psnr = 100.0 if mse == 0 else round(10 * np.log10(255.0 ** 2 / mse), 2)
        return StepResult(self.name, {"edit_region_psnr": psnr, "edit_region_px": int(region.sum())})
