"""Colour: written pixels keep the colour of the picture they restore (issue 43, "no compounding").

A step that writes `old`'s pixels into the editor's picture may move their colours by one map: the
colour fit measured for this turn (Reveal's T_src puts I_{k-1} into I_t's colours; the Drift Guard
and the undo write `old`'s own pixels, the identity). A fit measured against an intermediate
picture and chained turn on turn moves them further, and a correction that is not one map at all
(a local tint, the purple patch where a brim was) moves part of them. So the check reads the
written pixels against `old`:

1. One map. T, fitted robustly old -> kept on the wholly written cells, must be within FIT_TOL of the
   identity or of this turn's fit F (old -> fallback, fitted robustly on the whole picture: where the
   two agree, the editor's drift), at the grey levels grade.SHIFT_PROBES.
2. No patch. Each written cell's colour must be within PATCH_TOL of T(old) there; a connected run of
   PATCH_MIN_CELLS cells beyond it is an off-colour patch.

Either is a Finding ("colour"). It runs on a grid of block means (at most GRID_SIDE cells a side):
colour is what a block's mean keeps, and noise and sub-pixel shifts are what it drops.
"""
from __future__ import annotations

import numpy as np
from scipy import ndimage

from ..colour_fit import IDENTITY_FIT, ColourFit, fit_colour
from ..grade import SHIFT_PROBES
from .seams import block_mean, block_of
from .values import CheckRead, Composite, Finding

NAME = "colour"
GRID_SIDE = 128          # colour is coarse: 8×8 blocks at 1024²
WRITTEN_FULL = 0.99      # a cell whose mean weight of `old` is at least this is wholly written
FIT_CELLS = 4096         # cells a fit samples (evenly): plenty for 6 numbers
MIN_CELLS = 16           # fewer wholly written cells than this: nothing to fit, nothing to check
FIT_TOL = 0.04           # 10/255 at a probe grey level: the written pixels' map beyond both allowed ones
PATCH_TOL = 0.06         # 15/255 RMS over channels of a cell's mean beyond T(old): a local tint; above the
                         # 10/255 Reveal's seam correction reaches on real turns, below SPREAD_CLIP (25/255)
PATCH_MIN_CELLS = 16     # a connected run of off-colour cells this large is a patch (at 1024², 32×32 px)


def map_distance(a: ColourFit, b: ColourFit) -> float:
    """How far two colour maps disagree (0..1): the largest |a(v) - b(v)| over channels at the grey
    levels SHIFT_PROBES."""
    ga, ba = np.asarray(a.gain), np.asarray(a.bias)
    gb, bb = np.asarray(b.gain), np.asarray(b.bias)
    return float(max(np.abs((ga - gb) * v + ba - bb).max() for v in SHIFT_PROBES))


def _grid(x: np.ndarray, b: int) -> np.ndarray:
    """Block means (b×b) of a uint8 H×W×3 picture (0..1) or a float H×W plane, float32."""
    g = block_mean(x, b)
    return g / np.float32(255.0) if x.ndim == 3 else g


def _sample(src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """At most FIT_CELLS evenly spaced rows of two N×3 cell lists, as N×1×3 images for fit_colour."""
    step = max(1, int(np.ceil(len(src) / FIT_CELLS)))
    return src[::step, None, :], dst[::step, None, :]


def check_colour(c: Composite) -> CheckRead:
    """The colour check (module docstring): the wholly written cells' colours are old's up to one map
    (the identity or this turn's fit old -> fallback), with no off-colour patch."""
    b = block_of(c.kept.shape[:2], GRID_SIDE)
    full = _grid(np.asarray(c.written, np.float32), b) >= WRITTEN_FULL     # (a NaN cell compares False)
    if c.old_valid is not None:
        full &= _grid(np.asarray(c.old_valid, np.float32), b) >= 1.0
    n = int(full.sum())
    if n < MIN_CELLS:
        return CheckRead({"written_cells": n, "block": b})
    K, O, E = _grid(c.kept, b), _grid(c.old, b), _grid(c.fallback, b)
    T = fit_colour(*_sample(O[full], K[full]), sampled=True)
    F = fit_colour(*_sample(O.reshape(-1, 3), E.reshape(-1, 3)), sampled=True)
    fit_off = min(map_distance(T, IDENTITY_FIT), map_distance(T, F))
    d = K - T.apply(O)
    r = np.sqrt((d * d).mean(axis=2))
    off = full & (r > PATCH_TOL)
    patch = 0
    if off.any():
        labels, m = ndimage.label(off, np.ones((3, 3), bool))
        patch = int(np.bincount(labels.ravel())[1:].max()) if m else 0
    measured = {"written_cells": n, "block": b, "fit_off": round(fit_off, 4),
                "from_identity": round(map_distance(T, IDENTITY_FIT), 4), "turn_fit_shift": round(map_distance(F, IDENTITY_FIT), 4),
                "patch_cells": patch, "max_off": round(float(r[full].max()), 4)}
    if fit_off > FIT_TOL:
        return CheckRead(measured, Finding(NAME, f"the written pixels' colours are {fit_off * 255:.0f}/255 off the "
                                                 "picture they restore, beyond this turn's colour fit (a fit chained "
                                                 "over turns)"))
    if patch >= PATCH_MIN_CELLS:
        return CheckRead(measured, Finding(NAME, f"an off-colour patch of {patch} cells of {b} px among the written "
                                                 f"pixels, up to {r[full].max() * 255:.0f}/255 from the picture they "
                                                 "restore"))
    return CheckRead(measured)
