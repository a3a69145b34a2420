"""The picture's grade: a whole-picture colour or tone shift on a local request is drift (beyond the
paper).

Some editors move every colour of the picture on every call (FLUX.2 [klein] by 30-85/255 on a
request for a hat and a jacket). On a request for a global change (a new light, a style) that
shift is the edit; on a local request it is drift: the Drift Guard restores the previous image
outside the edit region and maps the edit region's colours into the previous image's grade, so the
hat and the jacket sit in the picture's own colours.

The map is the turn's colour fit (the change record's per-channel `gain`, `bias`: edit ~ gain ·
previous + bias, fitted robustly on the pixels that did not change), inverted: the same map the
change record and the seam compare with. `colour_shift` says how far it moves a grey level.

No compounding (issue 43): the map is measured against the picture the guard restores (I_{t-1}),
on this turn, and undone on every local edit, however small: a cast left in the edit region would
be the next turn's input there, and the next turn's cast would be chained onto it.
"""
from __future__ import annotations

import numpy as np

from .colour_fit import ColourFit

GRADE_FROM = 1.0 / 255.0      # a shift of a grey level beyond one 8-bit level (below: the fit's own noise) is mapped
                              # back. It was 10/255, the rest left to the seam: a cast kept in the edit region is
                              # re-drawn from on the next turn, so up to 10/255 a turn piled up where turns keep
                              # re-drawing (issue 43: hair maroon by turn 6)
MIN_GAIN = 0.2                # a channel's gain below this cannot be inverted without blowing up noise
SHIFT_PROBES = (0.1, 0.5, 0.9)  # the grey levels colour_shift moves: dark, middle, light


def colour_shift(info: dict) -> float:
    """How far the change record's whole-picture colour map moves a grey level (0..1): the largest
    |gain · v + bias - v| over channels at v = 0.1, 0.5, 0.9."""
    g, b = _fit(info)
    return float(max(np.abs((g - 1.0) * v + b).max() for v in SHIFT_PROBES))


def _fit(info: dict) -> tuple[np.ndarray, np.ndarray]:
    fit = ColourFit.from_info(info)
    return np.asarray(fit.gain, np.float64), np.asarray(fit.bias, np.float64)


def invertible(info: dict) -> bool:
    """Whether the record's colour map can be undone (every gain at least MIN_GAIN)."""
    g, _ = _fit(info)
    return bool(np.all(g >= MIN_GAIN))


def into_grade(E: np.ndarray, info: dict) -> np.ndarray:
    """The editor's pixels E (float H×W×3, 0..1) in the previous image's grade: (E - bias) / gain,
    clipped to 0..1."""
    g, b = _fit(info)
    g = np.maximum(g, MIN_GAIN)
    return np.clip((np.asarray(E, np.float32) - b.astype(np.float32)) / g.astype(np.float32), 0.0, 1.0)


def grade_record(info: dict) -> dict:
    """The map that was undone, for the guard's record: {"gain": [...], "bias": [...]} (rounded)."""
    g, b = _fit(info)
    return {"gain": [round(float(v), 5) for v in g], "bias": [round(float(v), 5) for v in b]}
