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


def moved(img: np.ndarray, dx: float = 0.0, dy: float = 0.0, scale: float = 1.0) -> np.ndarray:
    """What an editor that zooms (scale < 1: out) and shifts by sub-pixel amounts returns: the
    image resampled by that similarity about its centre (respec.pixels.alignment's model), the exposed
    border filled by the nearest edge (an outpainting stand-in)."""
    from respec.pixels.alignment import Alignment, warp
    return warp(np.asarray(img, np.float64), Alignment(dx, dy, scale))


def rerender_field(img: np.ndarray, strength: float = 0.25, corr_px: float = 6.0, seed: int = 5) -> np.ndarray:
    """A re-render: a spatially correlated texture change over the whole image (smooth random
    displacement of `corr_px` correlation and new texture of `strength`), as a diffusion editor
    that redraws the scene leaves it."""
    rng = np.random.default_rng(seed)
    h, w = img.shape[:2]
    field = [ndimage.gaussian_filter(rng.normal(0, 1, (h, w)), corr_px) for _ in range(2)]
    field = [f / (np.abs(f).max() + 1e-9) * 3.0 for f in field]
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    out = np.stack([ndimage.map_coordinates(img[:, :, c], [yy + field[0], xx + field[1]], order=1, mode="nearest")
                    for c in range(img.shape[2])], axis=2)
    tex = ndimage.gaussian_filter(rng.normal(0, 1, (h, w, img.shape[2])), (corr_px / 3, corr_px / 3, 0))
    tex = tex / (np.abs(tex).max() + 1e-9) * strength
    return np.clip(out + tex, 0, 1)


def sky_and_water(shape=(256, 384), horizon: float = 0.85, seed: int = 0) -> np.ndarray:
    """A flat, low-texture photo: a nearly uniform bright sky over a dark strip of water with gentle
    waves (float H×W×3 in 0..1). On such a picture an affine colour fit seen on the sky alone cannot
    tell a gain from an offset."""
    h, w = shape
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    img = np.stack([0.70 + 0.02 * yy / h, 0.78 + 0.015 * yy / h, 0.92 - 0.01 * yy / h], 2)
    img += ndimage.gaussian_filter(rng.normal(0, 0.004, (h, w, 3)), (3, 3, 0))
    hz = int(horizon * h)
    d = yy[hz:] - hz
    waves = 0.01 * np.sin(xx[hz:] / 9.0 + 0.7 * np.sin(d / 5.0))
    img[hz:] = np.stack([0.16 + 0.06 * d / h, 0.26 + 0.05 * d / h, 0.40 + 0.04 * d / h], 2) + waves[..., None]
    return np.clip(img, 0, 1)
