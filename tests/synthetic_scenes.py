"""Synthetic images with known changes for the provenance and reveal tests: a textured background,
rectangles drawn on it, a global colour drift and pixel noise, all with exact ground truth."""
from __future__ import annotations

import numpy as np
from scipy import ndimage


def background(seed: int = 0, shape=(96, 128)) -> np.ndarray:
    """A smooth but textured float RGB scene in 0.15..0.85 (blurred noise plus a gradient)."""
    rng = np.random.default_rng(seed)
    h, w = shape
    noise = ndimage.gaussian_filter(rng.random((h, w, 3)), (3, 3, 0))
    noise = (noise - noise.min()) / (noise.max() - noise.min())
    ramp = np.linspace(0, 1, w)[None, :, None] * np.array([0.3, -0.2, 0.1])
    return np.clip(0.15 + 0.6 * noise + 0.1 * ramp, 0, 1)


def draw_rect(img: np.ndarray, box: tuple[int, int, int, int], colour) -> np.ndarray:
    """A copy of `img` with the box (y0, x0, y1, x1) filled with `colour` (RGB 0..1, or an
    H×W×3 patch)."""
    out = img.copy()
    y0, x0, y1, x1 = box
    out[y0:y1, x0:x1] = colour
    return out


def rect_mask(shape, box) -> np.ndarray:
    m = np.zeros(shape[:2], bool)
    y0, x0, y1, x1 = box
    m[y0:y1, x0:x1] = True
    return m


def drift(img: np.ndarray, gain=(1.06, 0.95, 1.02), bias=(0.02, -0.015, 0.01), noise=0.01,
          seed: int = 1) -> np.ndarray:
    """An editor's global drift: a per-channel affine colour change plus Gaussian pixel noise."""
    rng = np.random.default_rng(seed)
    out = img * np.asarray(gain) + np.asarray(bias)
    if noise:
        out = out + rng.normal(0, noise, img.shape)
    return np.clip(out, 0, 1)


def u8(img: np.ndarray) -> np.ndarray:
    return np.clip(np.round(img * 255), 0, 255).astype(np.uint8)


def iou(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, bool), np.asarray(b, bool)
    union = (a | b).sum()
    return float((a & b).sum() / union) if union else 1.0
