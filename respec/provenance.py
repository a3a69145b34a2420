"""Pixel provenance: which turns changed which pixels (beyond the paper).

The paper asks a VLM to re-read the whole history to guess which past image still shows hidden
content. The history itself knows: each turn t has a change mask C_t between I_{t-1} and I_t,
and together they say, for every pixel, which turns changed it.

How C_t is computed (`change_mask`), robust to an editor's global drift:

1. Both images at one size: the history's (I_0's). A turn of another size is resized
   (bilinear), so every mask of a history lines up.
2. A per-channel affine colour transform T (I_t ≈ gain · I_{t-1} + bias) is fitted on the whole
   image by least squares, then refitted on the pixels whose residual lies within INLIER_K robust
   standard deviations (three rounds). A brightness / contrast / white-balance drift of the whole
   image is absorbed by T and is no change. The fit breaks down only when the edit covers about
   half the image or more (the inliers are then the edit).
3. The residual r = RMS over channels of |I_t - T(I_{t-1})|, averaged over 3×3 pixels (an
   editor's VAE round trip adds pixel noise that is not a change; the mean cuts it threefold),
   thresholded at median + K · 1.4826 · MAD of the averaged residual: the median absolute
   deviation is a noise scale that the changed pixels barely move while they cover less than
   half the image. The threshold never drops below `min_delta` (a lossless editor has MAD = 0:
   quantisation must not count). A pixel must also exceed half the threshold on its own, so the
   average does not spread a change's edge one pixel outwards.
4. Clean-up: an opening drops isolated noisy pixels, a closing fills small gaps (square
   structuring elements: separable min/max filters, fast at any radius), and connected
   components smaller than `min_area` of the image are dropped.

What it misses (by construction): a change with the colour of what it covers (a white box on a
white wall) leaves no residual; a change that is an affine colour map of the whole image (a
"make it darker" turn) is absorbed by T; an edit over half the image or more confuses the fit.

The masks are stored with their turn (History Append records them; `Turn.masks["change"]`) as
L images (255 = changed). `provenance_of(history)` gathers them, computing any that are
missing (in-graph histories, turns of stores written before masks existed).
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from PIL import Image
from scipy import ndimage

from . import provenance_index
from .errors import InputError
from .history import CHANGE, History, StoredImage, TurnMask
from .images import as_rgb, finite_array

METHOD = "drift-robust-v1"   # recorded in every mask's info: what computed it
MAD_TO_SIGMA = 1.4826         # MAD of a normal distribution times this = its standard deviation
INLIER_K = 3.0                # colour-fit inliers: residual within 3 robust sigmas of the median
FIT_ROUNDS = 3
FIT_SAMPLES = 65_536          # pixels the colour fit samples (a regular grid): 256×256, plenty for 6 numbers


@dataclass(frozen=True)
class ChangeParams:
    """Settings of `change_mask` (the defaults are what History Append records)."""

    k: float = 4.0                  # threshold: median + k robust sigmas of the residual
    min_delta: float = 6.0 / 255.0  # and never below this RMS difference (0..1 scale)
    smooth_size: int = 3            # mean filter on the residual (pixels); 0 or 1: none
    open_radius: int | None = None  # None: max(1, min side / 256)
    close_radius: int | None = None # None: twice the opening radius
    min_area: float = 2e-4          # components smaller than this fraction of the image go

    def radii(self, shape: tuple[int, int]) -> tuple[int, int]:
        """(opening, closing) radii in pixels for an image of `shape` (H, W)."""
        o = self.open_radius if self.open_radius is not None else max(1, round(min(shape) / 256))
        c = self.close_radius if self.close_radius is not None else 2 * o
        return int(o), int(c)


DEFAULT_PARAMS = ChangeParams()


# --------------------------------------------------------------------------- images as floats

def as_float_rgb(img: Any, size: tuple[int, int] | None = None) -> np.ndarray:
    """An image (array, PIL, StoredImage) as float32 H×W×3 in 0..1, resized (bilinear) to
    `size` = (width, height) when given and different."""
    if isinstance(img, StoredImage):
        img = img.array
    pil = as_rgb(img)
    if size is not None and pil.size != tuple(size):
        pil = pil.resize(tuple(int(s) for s in size), Image.BILINEAR)
    return np.asarray(pil, dtype=np.float32) / 255.0


def dilate(mask: np.ndarray, radius: int) -> np.ndarray:
    """Binary dilation by a (2r+1)² square (a separable max filter; the border repeats)."""
    if radius <= 0:
        return np.asarray(mask, bool)
    return ndimage.maximum_filter(np.asarray(mask, np.uint8), 2 * int(radius) + 1, mode="nearest") > 0


def erode(mask: np.ndarray, radius: int) -> np.ndarray:
    """Binary erosion by a (2r+1)² square (the border repeats: touching it is not an edge)."""
    if radius <= 0:
        return np.asarray(mask, bool)
    return ndimage.minimum_filter(np.asarray(mask, np.uint8), 2 * int(radius) + 1, mode="nearest") > 0


def robust_scale(values: np.ndarray) -> tuple[float, float]:
    """(median, robust sigma = 1.4826 · MAD) of a 1-D sample."""
    v = np.asarray(values, dtype=np.float64).ravel()
    if v.size == 0:
        return 0.0, 0.0
    med = float(np.median(v))
    return med, MAD_TO_SIGMA * float(np.median(np.abs(v - med)))


# --------------------------------------------------------------------------- colour transform

@dataclass(frozen=True)
class ColourFit:
    """A per-channel affine map dst ≈ gain · src + bias, and the robust noise of its residual."""

    gain: tuple[float, float, float]
    bias: tuple[float, float, float]
    noise_median: float = 0.0   # median of the per-pixel residual on the inliers
    noise_sigma: float = 0.0    # 1.4826 · MAD of that residual
    inlier_fraction: float = 1.0

    def apply(self, src: np.ndarray) -> np.ndarray:
        """The transform applied to a float H×W×3 image (not clipped)."""
        return src * np.asarray(self.gain, np.float32) + np.asarray(self.bias, np.float32)

    def info(self) -> dict:
        return {"gain": [round(g, 5) for g in self.gain], "bias": [round(b, 5) for b in self.bias],
                "noise_median": round(self.noise_median, 6), "noise_sigma": round(self.noise_sigma, 6),
                "inlier_fraction": round(self.inlier_fraction, 4)}


IDENTITY_FIT = ColourFit((1.0, 1.0, 1.0), (0.0, 0.0, 0.0))


def _grid(shape: tuple[int, int], n: int) -> tuple[slice, slice]:
    step = max(1, int(np.ceil(np.sqrt(shape[0] * shape[1] / max(1, n)))))
    return slice(None, None, step), slice(None, None, step)


def fit_colour(src: np.ndarray, dst: np.ndarray, use: np.ndarray | None = None,
               rounds: int = FIT_ROUNDS) -> ColourFit:
    """Robustly fit dst ≈ gain · src + bias per channel (float H×W×3 images of one size).

    `use`: optional boolean H×W of the pixels allowed in the fit (e.g. "not changed by any turn
    since"); the fit then also drops its own outliers. Falls back to the identity when too few
    pixels are left to fit."""
    if src.shape != dst.shape:
        raise InputError(f"colour fit needs images of one size, got {src.shape} and {dst.shape}")
    gy, gx = _grid(src.shape[:2], FIT_SAMPLES)
    s = src[gy, gx].reshape(-1, 3).astype(np.float64)
    d = dst[gy, gx].reshape(-1, 3).astype(np.float64)
    keep = np.ones(len(s), bool) if use is None else np.asarray(use, bool)[gy, gx].ravel()
    if keep.sum() < 16:
        return IDENTITY_FIT
    allowed = keep.copy()
    # Start from a per-channel offset (the median difference): unlike a least-squares fit on every
    # pixel, it is not dragged by a saturated edit, so the first inlier set is already the background.
    gain, bias = np.ones(3), np.median(d[keep] - s[keep], axis=0)
    for r in range(max(1, rounds) + 1):
        if r:
            _affine(s[keep], d[keep], gain, bias)
        res = np.sqrt(((s * gain + bias - d) ** 2).mean(axis=1))
        med, sig = robust_scale(res[allowed])
        new_keep = allowed & (res <= med + INLIER_K * max(sig, 1e-4))
        if new_keep.sum() < 16 or np.array_equal(new_keep, keep):
            break
        keep = new_keep
    res = np.sqrt(((s * gain + bias - d) ** 2).mean(axis=1))
    med, sig = robust_scale(res[keep])
    return ColourFit(tuple(float(g) for g in gain), tuple(float(b) for b in bias), med, sig,
                     float(keep.sum() / max(1, allowed.sum())))


def _affine(s: np.ndarray, d: np.ndarray, gain: np.ndarray, bias: np.ndarray) -> None:
    """Least-squares d ≈ gain · s + bias per channel (N×3 samples), written into gain and bias."""
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
    return np.sqrt(((fit.apply(src) - dst) ** 2).mean(axis=2))


def smooth(r: np.ndarray, size: int) -> np.ndarray:
    """The residual averaged over size×size pixels (size ≤ 1: unchanged)."""
    return ndimage.uniform_filter(r, int(size), mode="nearest") if size > 1 else r


# --------------------------------------------------------------------------- masks

def clean_mask(mask: np.ndarray, open_radius: int, close_radius: int, min_area: float) -> np.ndarray:
    """Opening (drop specks), closing (fill gaps), then drop components under min_area
    (a fraction of the image)."""
    m = dilate(erode(mask, open_radius), open_radius)
    m = erode(dilate(m, close_radius), close_radius)
    if min_area > 0 and m.any():
        labels, n = ndimage.label(m)
        sizes = np.bincount(labels.ravel())
        small = sizes < max(1.0, min_area * m.size)
        small[0] = False
        if small.any():
            m = m & ~small[labels]
    return m


@dataclass(frozen=True, eq=False)
class ChangeResult:
    """What `change_mask` found: the mask (bool H×W at the history's size) and how."""

    mask: np.ndarray
    fit: ColourFit
    threshold: float
    resized_from: tuple[int, int] | None = None   # (w, h) of I_t when it was resized
    params: ChangeParams = field(default=DEFAULT_PARAMS)

    @property
    def fraction(self) -> float:
        return float(self.mask.mean()) if self.mask.size else 0.0

    def info(self) -> dict:
        """JSON-able record kept beside the stored mask."""
        h, w = self.mask.shape
        d = {"method": METHOD, "size": [w, h], "fraction": round(self.fraction, 6),
             "threshold": round(self.threshold, 6), "k": self.params.k, **self.fit.info()}
        if self.resized_from is not None:
            d["resized_from"] = list(self.resized_from)
        return d

    def turn_mask(self) -> TurnMask:
        """The mask as a TurnMask (L image, 255 = changed) to append with the turn."""
        return TurnMask.from_mask(self.mask, self.info())


def change_mask(prev: Any, cur: Any, size: tuple[int, int] | None = None,
                params: ChangeParams = DEFAULT_PARAMS) -> ChangeResult:
    """The change mask C_t between I_{t-1} (`prev`) and I_t (`cur`), robust to global colour
    drift (see the module docstring). `size` = (width, height) to compare at (default: prev's)."""
    prev_img = prev.array if isinstance(prev, StoredImage) else prev
    size = tuple(size) if size is not None else as_rgb(prev_img).size
    cur_size = as_rgb(cur.array if isinstance(cur, StoredImage) else cur).size
    res = change_of(as_float_rgb(prev, size), as_float_rgb(cur, size), params)
    return res if cur_size == size else replace(res, resized_from=cur_size)


def change_of(a: np.ndarray, b: np.ndarray, params: ChangeParams = DEFAULT_PARAMS) -> ChangeResult:
    """`change_mask` on float H×W×3 images of one size (0..1)."""
    a, b = finite_array(a, "change_of's first image"), finite_array(b, "change_of's second image")
    fit = fit_colour(a, b)
    raw = residual(a, b, fit)
    r = smooth(raw, params.smooth_size)
    med, sig = robust_scale(r[_grid(r.shape, FIT_SAMPLES)])
    threshold = max(med + params.k * sig, params.min_delta)
    o, c = params.radii(r.shape)
    mask = clean_mask((r > threshold) & (raw > threshold / 2), o, c, params.min_area)
    mask.flags.writeable = False
    return ChangeResult(mask, fit, float(threshold), None, params)


def history_size(history: History) -> tuple[int, int]:
    """(width, height) every mask of this history is computed at: I_0's size."""
    return history.turns[0].image.size


def change_for(history: History, image: Any, params: ChangeParams = DEFAULT_PARAMS) -> TurnMask:
    """The change mask of the turn about to be appended (I_{t-1} = history's latest image,
    I_t = `image`), at the history's size, as a TurnMask for History.append(masks=...)."""
    if not isinstance(history, History):
        raise InputError(f"change_for needs a History, got {type(history).__name__}")
    return _cached_change(history.current.image, StoredImage.of(image), history_size(history), params)


# Masks of in-memory histories are recomputed on demand; a small cache keyed by the two images'
# digests keeps one graph (or one benchmark turn) from computing the same mask twice.
_CACHE: "OrderedDict[tuple, TurnMask]" = OrderedDict()
_CACHE_LOCK = threading.Lock()
_CACHE_SIZE = 64


def _cached_change(prev: StoredImage, cur: StoredImage, size: tuple[int, int],
                   params: ChangeParams) -> TurnMask:
    key = (prev.digest, cur.digest, tuple(size), params)
    with _CACHE_LOCK:
        hit = _CACHE.get(key)
        if hit is not None:
            _CACHE.move_to_end(key)
            return hit
    tm = change_result(prev, cur, size, params).turn_mask()
    with _CACHE_LOCK:
        _CACHE[key] = tm
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return tm


# The last few ChangeResults themselves (mask, colour fit): Reveal Composite computes C_t of the
# edited image, and when it leaves the image as it was, History Append's C_t is that same result.
_RESULTS: "OrderedDict[tuple, ChangeResult]" = OrderedDict()
_RESULTS_SIZE = 8


def change_result(prev: StoredImage, cur: StoredImage, size: tuple[int, int] | None = None,
                  params: ChangeParams = DEFAULT_PARAMS) -> ChangeResult:
    """change_mask(prev, cur, size, params) for two history images, cached by their digests (one
    C_t per image, whoever asks first)."""
    size = tuple(size) if size is not None else prev.size
    key = (prev.digest, cur.digest, size, params)
    with _CACHE_LOCK:
        hit = _RESULTS.get(key)
        if hit is not None:
            _RESULTS.move_to_end(key)
            return hit
    res = change_mask(prev, cur, size, params)
    with _CACHE_LOCK:
        _RESULTS[key] = res
        while len(_RESULTS) > _RESULTS_SIZE:
            _RESULTS.popitem(last=False)
    return res


# --------------------------------------------------------------------------- per-pixel history

@dataclass(frozen=True)
class Provenance:
    """Per pixel, the turns that changed it. `changes[t]` is C_t (bool H×W at the history's size)
    for t = 1..T; `changes[0]` is all False (I_0 is where everything starts). `computed` lists the
    turns whose mask was not stored and had to be computed now."""

    changes: tuple[np.ndarray, ...]
    size: tuple[int, int]
    computed: tuple[int, ...] = ()
    index: Any = field(default=None, compare=False, repr=False)  # respec.provenance_index view, when made by it

    @property
    def turns(self) -> int:
        """T, the latest turn covered."""
        return len(self.changes) - 1

    def stack(self) -> np.ndarray:
        """(T+1)×H×W boolean stack of the change masks."""
        return np.stack(self.changes)

    def turns_at(self, y: int, x: int) -> list[int]:
        """The turns that changed pixel (y, x), oldest first (coordinates at the history's size)."""
        return [t for t, m in enumerate(self.changes) if t > 0 and m[y, x]]

    def share(self, t: int) -> float:
        """The share of the image turn t changed."""
        return self.index.share(t) if self.index is not None else float(self.changes[t].mean())

    def last_change(self) -> np.ndarray:
        """int32 H×W: the latest turn that changed each pixel (0 = never changed)."""
        if self.index is not None:
            return self.index.last_change()
        out = np.zeros(self.changes[0].shape, np.int32)
        for t, m in enumerate(self.changes):
            if t:
                out[m] = t
        return out

    def change_count(self) -> np.ndarray:
        """int32 H×W: how many turns changed each pixel."""
        return np.sum(self.stack(), axis=0, dtype=np.int32)

    def coverage(self, region: np.ndarray) -> dict[int, float]:
        """For each turn that changed part of `region` (bool H×W), the fraction of the region it
        changed."""
        region = np.asarray(region, bool)
        if region.shape != self.changes[0].shape:
            raise InputError(f"region of shape {region.shape} does not match the history's masks "
                             f"{self.changes[0].shape}; resize it to {self.size[0]}x{self.size[1]}")
        n = int(region.sum())
        if n == 0:
            return {}
        out = {}
        for t, m in enumerate(self.changes):
            if t:
                f = float((m & region).sum()) / n
                if f > 0:
                    out[t] = f
        return out

    def unchanged_since(self, k: int) -> np.ndarray:
        """bool H×W: pixels no turn after k changed (I_k and the latest image should agree there,
        up to drift)."""
        if self.index is not None:
            return self.index.unchanged_since(k)
        out = np.ones(self.changes[0].shape, bool)
        for m in self.changes[k + 1:]:
            out &= ~m
        return out


def provenance_of(history: History, params: ChangeParams = DEFAULT_PARAMS) -> Provenance:
    """The per-pixel change history of `history`: stored change masks where the turns have them
    (resized to the history's size if needed), computed for the turns that do not (once: see
    respec/provenance_index.py). `changes` reads each mask when it is asked for."""
    if not isinstance(history, History):
        raise InputError(f"provenance_of needs a History, got {type(history).__name__}")
    # The index keeps the masks' summaries and the "last change" map per history, so this is
    # O(H·W) per new turn, not O(T·H·W) per call, and a missing mask is computed once.
    idx = provenance_index.index_for(history, params, _cached_change)
    return Provenance(idx.masks(), idx.size, idx.computed, idx)
