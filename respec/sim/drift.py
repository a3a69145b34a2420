"""Real-editor drift in the simulated world, and the untouched-pixel ground truth (beyond the paper;
the Drift Guard's measurement, docs/drift-guard.md). A SIMULATION, never a model of image quality.

`--sim-defects`:

    none       a perfect editor (SimDefects.none())
    default    today's sim editor (1 % colour gain, 0.5 px blur, a little noise): the paper's rows
    realistic  what real editors were measured doing (the real-editors issue, ../shared/realdata):
               per call a zoom-out of 0.5-1.5 %, a sub-pixel shift of up to ±1.5 px, a re-render
               texture field (spatially correlated, ±3/255), a colour gain of ±2 %, a 0.6 px blur
               and noise, all drawn from the edit's seed

`RealisticSimEditor` applies the geometric and texture defects before the sim editor's own VAE
drift (SimDefects' gain, blur, noise). The sim's ground truth is the scene state, so its masks
stay in I_0's frame while the images drift away from it: that is what a drifting editor does to
a conversation. (When SimDefects gains zoom / shift / re-render fields of its own, `realistic`
should become a preset of those.)

`untouched_region(scenario, size)`: the pixels no turn's ground-truth edit region touched (no
object in any state of the lineage, no tinted box, no style turn), shrunk by `GT_MARGIN_PX` so an
object's blurred rim is not counted; their exact ground truth is I_0's pixels.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import ndimage

from ..alignment import Alignment, warp
from ..errors import InputError
from .editor import SimDefects, SimEditor
from .world import BACKGROUND, WorldState, apply_actions, box_mask, layer_map

SIM_DEFECTS = ("none", "default", "realistic")
GT_MARGIN_PX = 2


@dataclass(frozen=True)
class RealisticDrift:
    """The per-call geometric and texture defects of `realistic` (see the module docstring)."""

    zoom: tuple[float, float] = (0.005, 0.015)   # zoom-out per call, drawn from this range
    shift_px: float = 1.5                        # sub-pixel shift per call, each axis in ±this
    texture: float = 3.0 / 255.0                 # re-render texture field amplitude
    texture_px: float = 4.0                      # its correlation length

    def alignment(self, seed: int) -> Alignment:
        """The call's zoom and shift (I_{t-1} -> I_t), from the edit's seed."""
        rng = np.random.default_rng([int(seed), 22])
        s = 1.0 - rng.uniform(*self.zoom)
        dx, dy = rng.uniform(-self.shift_px, self.shift_px, 2)
        return Alignment(float(dx), float(dy), float(s))

    def apply(self, out: np.ndarray, seed: int) -> np.ndarray:
        """Zoom, shift and the texture field applied to a float H×W×3 image."""
        out = warp(out.astype(np.float32), self.alignment(seed))
        rng = np.random.default_rng([int(seed), 23])
        h, w = out.shape[:2]
        f = ndimage.gaussian_filter(rng.normal(0, 1, (h, w, 3)).astype(np.float32), (self.texture_px, self.texture_px, 0))
        f *= self.texture / (np.abs(f).max() + 1e-9)
        return out + f


class RealisticSimEditor(SimEditor):
    """The sim editor with real editors' zoom, shift and re-render texture added (`realistic`)."""

    name = "sim"

    def __init__(self, drift: RealisticDrift | None = None, defects: SimDefects | None = None, **kw):
        super().__init__(defects or SimDefects(colour_shift=0.02, blur_sigma=0.6, noise_std=0.004), **kw)
        self.drift = drift or RealisticDrift()

    def describe(self) -> dict:
        from dataclasses import asdict
        return {**super().describe(), "realistic_drift": asdict(self.drift)}

    def _drift(self, out: np.ndarray, seed: int) -> np.ndarray:
        return super()._drift(self.drift.apply(out, seed), seed)


def sim_editor(defects: str = "default") -> SimEditor:
    """The sim editor of a `--sim-defects` level."""
    if defects == "default":
        return SimEditor()
    if defects == "none":
        return SimEditor(SimDefects.none())
    if defects == "realistic":
        return RealisticSimEditor()
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
