"""Procedural object sprites for the simulated world: an RGB patch and a hard alpha mask.

A sprite is drawn from its label alone (a CRC of the label picks the shape, colour, pattern and
shading), so the same object looks the same in every turn and every run, and nothing is
downloaded. A colour word in the label ("red roses", "blue mug") sets the base colour. Alpha is
binary on purpose: a pixel is either covered or not, so "hidden" and "revealed" are exact.
"""
from __future__ import annotations

import zlib

import numpy as np

from ..pixels.analysis_cache import CACHE

COLOURS = {
    "red": (0.80, 0.12, 0.12), "orange": (0.95, 0.55, 0.10), "yellow": (0.95, 0.85, 0.15),
    "green": (0.20, 0.62, 0.22), "blue": (0.15, 0.35, 0.85), "purple": (0.50, 0.22, 0.65),
    "pink": (0.95, 0.55, 0.70), "brown": (0.50, 0.32, 0.16), "white": (0.93, 0.93, 0.90),
    "black": (0.10, 0.10, 0.12), "grey": (0.55, 0.55, 0.57), "gray": (0.55, 0.55, 0.57),
    "silver": (0.75, 0.76, 0.80), "golden": (0.85, 0.68, 0.20), "gold": (0.85, 0.68, 0.20),
}
_PALETTE = list(COLOURS.values())
SHAPES = ("roundrect", "superellipse", "ellipse")
PATTERNS = ("plain", "stripes", "dots", "checker")


def hex_colour(value: str) -> tuple[float, float, float]:
    """'#rrggbb' -> (r, g, b) in 0..1."""
    v = value.lstrip("#")
    return tuple(int(v[i:i + 2], 16) / 255.0 for i in (0, 2, 4))  # type: ignore[return-value]


def label_colour(label: str) -> tuple[float, float, float]:
    """The base colour of an object: a colour word in its label, else one picked by the label's CRC."""
    for word in label.lower().replace("-", " ").split():
        if word in COLOURS:
            return COLOURS[word]
    return _PALETTE[zlib.crc32(label.encode()) % len(_PALETTE)]


def draw_sprite(label: str, width: int, height: int, occluder: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """`label` drawn into a width × height box (_drawn_sprite), drawn once and kept in the analysis
    cache's `sprites` (shared: callers copy before they change them)."""
    key = ("sprite", label, int(width), int(height), bool(occluder))
    hit = CACHE.sprites.get(key)
    if hit is None:
        hit = _drawn_sprite(label, width, height, occluder)
        CACHE.sprites.put(key, hit)
    return hit


def _drawn_sprite(label: str, width: int, height: int, occluder: bool) -> tuple[np.ndarray, np.ndarray]:
    """(rgb float32 H×W×3 in 0..1, alpha bool H×W) of `label` drawn into a width × height box.

    Occluders use the shapes that fill their box (rounded rectangle, superellipse: > 90 % of the
    box), so an occluder box over the occludee really hides it; other objects may be ellipses."""
    w, h = max(1, int(width)), max(1, int(height))
    code = zlib.crc32(label.encode())
    shapes = SHAPES[:2] if occluder else SHAPES
    shape = shapes[code % len(shapes)]
    pattern = PATTERNS[(code >> 4) % len(PATTERNS)]
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    u = (xx + 0.5) / w * 2.0 - 1.0          # -1..1 across the box
    v = (yy + 0.5) / h * 2.0 - 1.0
    if shape == "ellipse":
        alpha = u * u + v * v <= 1.0
    elif shape == "superellipse":
        alpha = u ** 4 + v ** 4 <= 1.0
    else:
        r = 0.25
        cu, cv = np.clip(np.abs(u) - (1 - r), 0, None), np.clip(np.abs(v) - (1 - r), 0, None)
        alpha = cu * cu + cv * cv <= r * r
    base = np.array(label_colour(label), np.float32)
    shade = 1.0 - 0.25 * (v + 1.0) / 2.0 + 0.12 * np.exp(-((u + 0.4) ** 2 + (v + 0.5) ** 2) * 4.0)
    rgb = base[None, None, :] * shade[:, :, None]
    period = max(4.0, min(w, h) / 6.0)
    if pattern == "stripes":
        band = (np.floor((xx + yy) / period) % 2 == 0)
    elif pattern == "dots":
        band = ((xx % period - period / 2) ** 2 + (yy % period - period / 2) ** 2) < (period / 4) ** 2
    elif pattern == "checker":
        band = (np.floor(xx / period) + np.floor(yy / period)) % 2 == 0
    else:
        band = np.zeros_like(alpha)
    second = 1.0 - base * 0.6
    rgb = np.where(band[:, :, None], 0.55 * rgb + 0.45 * second[None, None, :] * shade[:, :, None], rgb)
    # A darker rim so the object reads as an object, not a patch of colour.
    edge = alpha & ~_erode(alpha, max(1, min(w, h) // 24))
    rgb = np.where(edge[:, :, None], rgb * 0.45, rgb)
    rgb = np.clip(rgb, 0.0, 1.0).astype(np.float32)
    rgb.flags.writeable = False
    alpha.flags.writeable = False
    return rgb, alpha


def _erode(mask: np.ndarray, k: int) -> np.ndarray:
    from scipy.ndimage import binary_erosion
    return binary_erosion(mask, iterations=k, border_value=0)
