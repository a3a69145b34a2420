"""The colour fit and the robust statistics every pixel rule measures with (beyond the paper).

An editor drifts the whole picture's colours on every call (a VAE round trip, a grade). The change
record absorbs that drift with a per-channel affine map I_t ~ gain · I_{t-1} + bias fitted robustly
on the pixels that did not change (`fit_colour`); Reveal fits the source the same way, and the Drift
Guard reads the fit back from the turn's record (`ColourFit.from_info`). The map is applied in one
place, `ColourFit.apply`. Noise scales are robust: the median absolute deviation times MAD_TO_SIGMA.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import ndimage

from ..errors import InputError

MAD_TO_SIGMA = 1.4826         # MAD of a normal distribution times this = its standard deviation
INLIER_K = 3.0                # colour-fit inliers: residual within 3 robust sigmas of the median
FIT_ROUNDS = 3
FIT_SAMPLES = 65_536          # pixels the colour fit samples (a regular grid): 256×256, plenty for 6 numbers


def robust_scale(values: np.ndarray) -> tuple[float, float]:
    """(median, robust sigma = MAD_TO_SIGMA · MAD) of a 1-D sample."""
    v = np.asarray(values, dtype=np.float64).ravel()
    if v.size == 0:
        return 0.0, 0.0
    med = float(np.median(v))
    return med, MAD_TO_SIGMA * float(np.median(np.abs(v - med)))


def grey_of(x: np.ndarray) -> np.ndarray:
    """float32 H×W: the channel mean of a float H×W×3 image."""
    return np.asarray(x, np.float32) @ np.full(3, 1.0 / 3.0, np.float32)   # (a matmul: faster than mean(axis=2))


def smooth(r: np.ndarray, size: int) -> np.ndarray:
    """The residual averaged over size×size pixels (size <= 1: unchanged)."""
    return ndimage.uniform_filter(r, int(size), mode="nearest") if size > 1 else r


def sample_grid(shape: tuple[int, int], n: int) -> tuple[slice, slice]:
    """Row and column slices of an even grid of about `n` pixels of an H×W plane."""
    step = max(1, int(np.ceil(np.sqrt(shape[0] * shape[1] / max(1, n)))))
    return slice(None, None, step), slice(None, None, step)


@dataclass(frozen=True)
class ColourFit:
    """A per-channel affine map dst ~ gain · src + bias, and the robust noise of its residual."""

    gain: tuple[float, float, float]
    bias: tuple[float, float, float]
    noise_median: float = 0.0   # median of the per-pixel residual on the inliers
    noise_sigma: float = 0.0    # MAD_TO_SIGMA · MAD of that residual
    inlier_fraction: float = 1.0

    @classmethod
    def from_info(cls, info: dict) -> "ColourFit":
        """The map a change record's info keeps ("gain", "bias"; the identity where missing)."""
        gain = info.get("gain", (1.0, 1.0, 1.0))
        bias = info.get("bias", (0.0, 0.0, 0.0))
        return cls(tuple(float(g) for g in gain), tuple(float(b) for b in bias))

    def apply(self, src: np.ndarray) -> np.ndarray:
        """The transform applied to a float H×W×3 image (not clipped)."""
        return src * np.asarray(self.gain, np.float32) + np.asarray(self.bias, np.float32)

    def apply_grey(self, src: np.ndarray) -> np.ndarray:
        """grey_of(apply(src)) as one weighted channel sum (the map is affine per channel): float32 H×W."""
        return np.asarray(src, np.float32) @ (np.asarray(self.gain, np.float32) / 3.0) + np.float32(np.mean(self.bias))

    def info(self) -> dict:
        """JSON-able record of the fit (rounded), kept with the change mask."""
        return {"gain": [round(g, 5) for g in self.gain], "bias": [round(b, 5) for b in self.bias],
                "noise_median": round(self.noise_median, 6), "noise_sigma": round(self.noise_sigma, 6),
                "inlier_fraction": round(self.inlier_fraction, 4)}


IDENTITY_FIT = ColourFit((1.0, 1.0, 1.0), (0.0, 0.0, 0.0))


def fit_colour(src: np.ndarray, dst: np.ndarray, use: np.ndarray | None = None,
               rounds: int = FIT_ROUNDS, sampled: bool = False) -> ColourFit:
    """Robustly fit dst ~ gain · src + bias per channel (float H×W×3 images of one size).

    `use`: optional boolean H×W of the pixels allowed in the fit (e.g. "not changed by any turn
    since"); the fit then also drops its own outliers. Falls back to the identity when too few
    pixels are left to fit. sampled: the images already are the sample grid (every pixel is used)."""
    if src.shape != dst.shape:
        raise InputError(f"colour fit needs images of one size, got {src.shape} and {dst.shape}")
    gy, gx = (slice(None), slice(None)) if sampled else sample_grid(src.shape[:2], FIT_SAMPLES)
    s = src[gy, gx].reshape(-1, 3).astype(np.float64)
    d = dst[gy, gx].reshape(-1, 3).astype(np.float64)
    keep = np.ones(len(s), bool) if use is None else np.asarray(use, bool)[gy, gx].ravel()
    if keep.sum() < 16:
        return IDENTITY_FIT
    allowed = keep.copy()
    # Start from a per-channel offset (the median difference) or a per-channel gain (the median
    # ratio), whichever leaves more pixels within the inlier band: unlike a least-squares fit on
    # every pixel, neither is dragged by a saturated edit, so the first inlier set is already the
    # background. A global gain seen as an offset would leave a flat photo's dark part (water under
    # a bright sky) out of the inliers, and the fit on the sky alone could not tell a gain from an
    # offset.
    gain, bias = _start(s[keep], d[keep])
    for r in range(max(1, rounds) + 1):
        if r:
            _affine(s[keep], d[keep], gain, bias)
        res = np.sqrt(((s * gain + bias - d) ** 2).mean(axis=1))
        med, sig = robust_scale(res[allowed])
        new_keep = allowed & (res <= med + INLIER_K * max(sig, 1e-4))
        if new_keep.sum() < 16 or (r and np.array_equal(new_keep, keep)):   # at least one affine round
            break
        keep = new_keep
    res = np.sqrt(((s * gain + bias - d) ** 2).mean(axis=1))
    med, sig = robust_scale(res[keep])
    return ColourFit(tuple(float(g) for g in gain), tuple(float(b) for b in bias), med, sig,
                     float(keep.sum() / max(1, allowed.sum())))


def _start(s: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first colour map (gain, bias) of `fit_colour`: a per-channel offset or a per-channel
    gain, the one with more samples within INLIER_K robust sigmas of its median residual."""
    best, best_n = None, -1
    ratio = np.median(d / np.maximum(s, 1.0 / 255.0), axis=0)
    for gain, bias in ((np.ones(3), np.median(d - s, axis=0)), (ratio, np.zeros(3))):
        res = np.sqrt(((s * gain + bias - d) ** 2).mean(axis=1))
        med, sig = robust_scale(res)
        n = int((res <= med + INLIER_K * max(sig, 1e-4)).sum())
        if n > best_n:
            best, best_n = (gain.astype(np.float64), bias.astype(np.float64)), n
    return best


def _affine(s: np.ndarray, d: np.ndarray, gain: np.ndarray, bias: np.ndarray) -> None:
    """Least-squares d ~ gain · s + bias per channel (N×3 samples), written into gain and bias."""
    for c in range(3):
        x, y = s[:, c], d[:, c]
        vx = x.var()
        if vx < 1e-8:       # a flat channel: only an offset can be told apart
            gain[c], bias[c] = 1.0, float((y - x).mean())
        else:
            gain[c] = float(((x - x.mean()) * (y - y.mean())).mean() / vx)
            bias[c] = float(y.mean() - gain[c] * x.mean())


def residual(src: np.ndarray, dst: np.ndarray, fit: ColourFit) -> np.ndarray:
    """Per-pixel RMS over channels of dst - fit(src) (float32 H×W)."""
    d = fit.apply(src) - dst
    return np.sqrt(np.einsum("...c,...c->...", d, d) / np.float32(d.shape[-1]))   # (einsum: no slow axis-2 mean)
