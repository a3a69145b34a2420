"""Real-editor drift in the simulated world, and the untouched-pixel ground truth (beyond the paper;
the Drift Guard's measurement, docs/drift-guard.md). A SIMULATION, never a model of image quality.

`--sim-defects`:

    none       a perfect editor (SimDefects.none())
    default    today's sim editor (1 % colour gain, 0.5 px blur, a little noise): the paper's rows
    realistic  what real editors were measured doing (the real-editors issue, ../shared/realdata):
               per call a zoom-out of 0.5-1.5 %, a sub-pixel shift of up to ±1.5 px, a re-render
               texture field (spatially correlated, ±3/255), a colour gain of ±2 %, a 0.6 px blur
               and noise, all drawn from the edit's seed

`realistic` is a preset of SimDefects' real-editor fields (SimDefects.realistic()): the sim
editor moves the frame per call (its ground truth follows the frame) and re-renders the texture
before its own VAE drift. The untouched-pixel truth below stays in I_0's frame: a conversation
whose images drift away from I_0 loses untouched PSNR, which is what the Drift Guard measures.

`untouched_region(scenario, size)`: the pixels no turn's ground-truth edit region touched (no
object in any state of the lineage, no tinted box, no style turn), shrunk by `GT_MARGIN_PX` so an
object's blurred rim is not counted; their exact ground truth is I_0's pixels.
"""
from __future__ import annotations

import numpy as np
from scipy import ndimage

from ..errors import InputError
from .editor import SimDefects, SimEditor
from .world import BACKGROUND, WorldState, apply_actions, box_mask, layer_map

SIM_DEFECTS = ("none", "default", "realistic")
GT_MARGIN_PX = 2


def sim_editor(defects: str = "default") -> SimEditor:
    """The sim editor of a `--sim-defects` level."""
    if defects == "default":
        return SimEditor()
    if defects == "none":
        return SimEditor(SimDefects.none())
    if defects == "realistic":
        return SimEditor(SimDefects.realistic())
    raise InputError(f"unknown --sim-defects {defects!r}; use one of {', '.join(SIM_DEFECTS)}")


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
