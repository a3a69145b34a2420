"""The small array helpers every part of the Drift Guard uses (uint8 pictures in, float RGB out)."""
from __future__ import annotations

import numpy as np
from scipy import ndimage


def float_rgb(img: np.ndarray) -> np.ndarray:
    """The first three channels of a uint8 H×W×C picture (C >= 3) as float32 0..1."""
    return np.asarray(img[:, :, :3], np.float32) / 255.0


def sq_sum(x: np.ndarray) -> np.ndarray:
    """(x ** 2).sum(axis=2) of an H×W×3 array, the same numbers: the channels added in order (a
    reduction over a short last axis costs ten times the three adds)."""
    return x[..., 0] ** 2 + x[..., 1] ** 2 + x[..., 2] ** 2


def sq_mean(x: np.ndarray) -> np.ndarray:
    """(x ** 2).mean(axis=2) of an H×W×3 array, the same numbers (sq_sum divided by 3)."""
    return sq_sum(x) / x.dtype.type(3)


def dot3(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """(x * y).sum(axis=2) of two H×W×3 arrays, the same numbers (sq_sum's reason)."""
    return x[..., 0] * y[..., 0] + x[..., 1] * y[..., 1] + x[..., 2] * y[..., 2]


def open_square(mask: np.ndarray, k: int) -> np.ndarray:
    """ndimage.binary_opening(mask, np.ones((k, k))), the same pixels, on the mask's bounding box
    only (grown by k: nothing farther can change) and, for an odd k, by a separable minimum and
    maximum filter (the outside counts as unset, as binary_erosion's border_value=0 does)."""
    mask = np.asarray(mask, bool)
    out = np.zeros(mask.shape, bool)
    if not mask.any():
        return out
    sl = bbox(mask, k)
    if k % 2:
        low = ndimage.minimum_filter(mask[sl].astype(np.uint8), k, mode="constant", cval=0)
        out[sl] = ndimage.maximum_filter(low, k, mode="constant", cval=0) > 0
    else:
        out[sl] = ndimage.binary_opening(mask[sl], np.ones((k, k), bool))
    return out


def rgb3(img: np.ndarray) -> np.ndarray:
    """A uint8 H×W×C picture as H×W×3: its RGB (alpha dropped), a grey one repeated."""
    return img[:, :, :3] if img.shape[2] >= 3 else np.repeat(img[:, :, :1], 3, axis=2)


def bbox(mask: np.ndarray, pad: int) -> tuple[slice, slice]:
    """The bounding box of a non-empty mask grown by `pad` px (within the picture), as slices."""
    ys, xs = np.nonzero(mask)
    h, w = mask.shape
    return (slice(max(0, ys.min() - pad), min(h, ys.max() + 1 + pad)),
            slice(max(0, xs.min() - pad), min(w, xs.max() + 1 + pad)))

PSNR_SAME = 100.0       # the PSNR reported for identical pixels (no error: the log has no value)


def psnr(mse: float) -> float:
    """PSNR in dB of a mean squared error on the 0..255 scale."""
    return PSNR_SAME if mse <= 0 else float(10.0 * np.log10(255.0 ** 2 / mse))
