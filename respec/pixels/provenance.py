"""Pixel provenance: which turns changed which pixels (beyond the paper).

The paper asks a VLM to re-read the whole history to guess which past image still shows hidden
content. The history itself knows: each turn t has a change mask C_t between I_{t-1} and I_t
(respec/pixels/change_mask.py), and together they say, for every pixel, which turns changed it.

The masks are stored with their turn (History Append records them; `Turn.masks["change"]`) as
L images (255 = changed). `provenance_of(history)` gathers them, computing any that are
missing (in-graph histories, turns of stores written before masks existed). `held_near` /
`NearEvidence` read the turns' stability grids around a covered region (the provenance selector's
confidence).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from PIL import Image
from scipy import ndimage

from . import provenance_index
from .alignment import IDENTITY, Alignment, compose_all, support, warp
from .analysis_cache import CACHE, AnalysisCache
from .change_mask import (DEFAULT_PARAMS, JUDGED_SHARE, NEAR_CHANGE_SHARE, STABILITY_BLOCK, STABILITY_MARGIN,
                          STABILITY_TEXTURE_STD, ChangeParams, block_tiles, change_between, stability_size,
                          unstable_mask)
from . import change_record
from .change_record import grid_from_info
from .colour_fit import grey_of
from .masks import dilate, history_size
from .work_images import as_float_rgb
from ..errors import InputError
from ..history import CHANGE, History, StoredImage, TurnMask
from ..images import as_rgb

NEAR_BLOCKS = 2      # a covered region's surroundings: the stability blocks within this many blocks of it


def held_near(history: History, prov: "Provenance", k: int, j: int) -> tuple[int, int, int] | None:
    """Turn j's evidence about the surroundings of C_k: (held, textured), the textured stability
    blocks within NEAR_BLOCKS blocks of C_k (carried into I_j's frame), not mostly inside C_k or
    C_j, and how many of them turn j did not mark unstable. Textured: the block's grey std
    (blurred, as `stability` measures it) reaches STABILITY_TEXTURE_STD in I_{j-1} or I_j. A flat block
    holds whatever the editor did to a subject next to it (a figure redrawn on a white backdrop
    inside its own change mask): it is no evidence, so it is not counted. None when turn j's
    record has no block grid (stored before it existed). (`NearEvidence(history, prov, k).held(j)`:
    a restoration turn asks it of every j = k..t-1 with one NearEvidence.)"""
    return NearEvidence(history, prov, k).held(j)


class NearEvidence:
    """`held_near` for one covering turn k and every later turn j, with what does not depend on j
    computed once (issue 32: a restoration turn asks it of every turn since k). What belongs to one
    image or one turn is kept by content across turns (each image's blurred grey at the stability
    size and its block stds, each turn's change mask per block); what belongs to C_k (its blocks,
    the blocks around it, which of their pixels C_k leaves out) is made once here; a turn j whose
    change does not reach the blocks around C_k costs a few block lookups. The figures are the
    same as computing everything each time (tests/test_provenance.py)."""

    def __init__(self, history: History, prov: "Provenance", k: int):
        self.history, self.prov, self.k = history, prov, k
        w, h = prov.size
        self.small = stability_size((h, w))
        self.shape = (h, w)
        self._blocks = None           # the grid shape the C_k parts below were made for
        self._alignment = (k, IDENTITY)

    def _for_grid(self, blocks: tuple[int, int]) -> None:
        """C_k's parts in its own frame for a block grid of this shape: its share per block, the
        bounding box (blocks) of the blocks that can be near it, and which pixels there C_k leaves."""
        if self._blocks == blocks:
            return
        B = STABILITY_BLOCK
        self._blocks = blocks
        self.c_k = self.prov.changes[self.k]
        self.ck = _change_blocks(self.history, self.prov, self.k, self.small, blocks)
        near = ndimage.binary_dilation(self.ck > 0, iterations=NEAR_BLOCKS) & (self.ck <= 0.5)
        self.near_k = near
        if not near.any():
            return
        ys, xs = np.nonzero(near)
        self.bb = (int(ys.min()), int(ys.max()) + 1, int(xs.min()), int(xs.max()) + 1)
        by0, by1, bx0, bx1 = self.bb
        self.sbox = (by0 * B, by1 * B, bx0 * B, bx1 * B)
        self.foot = _footprint(self.sbox, self.small, self.shape, 3)[0]
        self.keep_k = _keep_on_blocks(self.c_k, self.sbox, self.small, self.shape)

    def _a_kj(self, j: int) -> Alignment:
        """prov.alignment(k, j), composed one turn further from the last j asked (the loop over
        j = k..t-1 composes each turn's alignment once)."""
        last, a = self._alignment
        if j < last:
            last, a = self.k, IDENTITY
        for i in range(last + 1, j + 1):
            a = a.compose(self.prov.alignment(i - 1, i))
        self._alignment = (j, a)
        return a

    def held(self, j: int) -> tuple[int, int, int] | None:
        """held_near(history, prov, k, j)."""
        prov, history = self.prov, self.history
        grid = grid_from_info(prov.records[j]) if j < len(prov.records) else None
        if grid is None:
            return None
        B = STABILITY_BLOCK
        nby, nbx = grid.shape
        if nby * B > self.small[1] or nbx * B > self.small[0]:
            return None
        if not self._a_kj(j).is_identity:     # C_k moved in I_j's frame: every part for this j
            return self._held_moved(j, grid)
        self._for_grid(grid.shape)
        cj = _change_blocks(history, prov, j, self.small, grid.shape)
        near = self.near_k & (cj <= 0.5)
        if not near.any():
            return 0, 0, 0
        by0, by1, bx0, bx1 = self.bb
        sub = (slice(by0, by1), slice(bx0, bx1))
        # the block's texture where it is evidence: on its pixels outside both changes (an object's
        # own edge inside a block at the mask's border is no evidence about the surroundings)
        Y0, Y1, X0, X1 = self.foot
        c_j = prov.changes[j]
        keep = (self.keep_k if not c_j[Y0:Y1, X0:X1].any()
                else _keep_on_blocks(self.c_k | c_j, self.sbox, self.small, self.shape))
        return _count_held(history, j, near[sub], grid[sub], keep, self.bb, self.small, grid.shape,
                           int(near.sum()), prov.cache)

    def _held_moved(self, j: int, grid: np.ndarray) -> tuple[int, int, int]:
        prov, history = self.prov, self.history
        c_k, c_j = prov.in_frame(prov.changes[self.k], self.k, j), prov.changes[j]
        ck = block_tiles(_at_small(c_k, self.small), grid.shape).mean(-1)
        cj = _change_blocks(history, prov, j, self.small, grid.shape)
        near = ndimage.binary_dilation(ck > 0, iterations=NEAR_BLOCKS) & (ck <= 0.5) & (cj <= 0.5)
        if not near.any():
            return 0, 0, 0
        B = STABILITY_BLOCK
        ys, xs = np.nonzero(near)
        bb = (int(ys.min()), int(ys.max()) + 1, int(xs.min()), int(xs.max()) + 1)
        keep = _keep_on_blocks(c_k | c_j, (bb[0] * B, bb[1] * B, bb[2] * B, bb[3] * B), self.small, self.shape)
        sub = (slice(bb[0], bb[1]), slice(bb[2], bb[3]))
        return _count_held(history, j, near[sub], grid[sub], keep, bb, self.small, grid.shape, int(near.sum()),
                           prov.cache)


def _count_held(history: History, j: int, near: np.ndarray, grid: np.ndarray, keep: np.ndarray,
                bb: tuple[int, int, int, int], small: tuple[int, int], blocks: tuple[int, int],
                around: int, cache: AnalysisCache) -> tuple[int, int, int]:
    """(held, textured, around) on the blocks `bb` (by0, by1, bx0, bx1): `near` and `grid` there,
    `keep` the pixels each block's texture is measured on (at the stability size)."""
    B = STABILITY_BLOCK
    by0, by1, bx0, bx1 = bb
    kt = block_tiles(keep, (by1 - by0, bx1 - bx0))
    n_keep = kt.sum(-1)
    partial = (n_keep < B * B) & (n_keep > 0) & near

    def block_std(img: StoredImage) -> np.ndarray:
        std = _block_std_all(img, small, blocks, cache)[by0:by1, bx0:bx1].copy()   # blocks kept whole: the image's own
        if partial.any():
            ys, xs = np.nonzero(partial)
            py0, py1, px0, px1 = int(ys.min()), int(ys.max()) + 1, int(xs.min()), int(xs.max()) + 1
            g = _small_grey(img, small, cache)[(by0 + py0) * B:(by0 + py1) * B, (bx0 + px0) * B:(bx0 + px1) * B]
            t = block_tiles(g, (py1 - py0, px1 - px0)).astype(np.float64)
            kk, nk = kt[py0:py1, px0:px1], n_keep[py0:py1, px0:px1]
            m = (t * kk).sum(-1) / np.maximum(nk, 1.0)
            part = np.sqrt(((t - m[..., None]) ** 2 * kk).sum(-1) / np.maximum(nk, 1.0))
            view = std[py0:py1, px0:px1]
            sel = partial[py0:py1, px0:px1]
            view[sel] = part[sel]
        std[n_keep == 0] = 0.0
        return std

    textured = ((block_std(history.turns[j].image) >= STABILITY_TEXTURE_STD)
                | (block_std(history.turns[j - 1].image) >= STABILITY_TEXTURE_STD))
    n = near & textured & (n_keep >= JUDGED_SHARE * B * B)
    return int((n & ~grid).sum()), int(n.sum()), around


def _at_small(x: np.ndarray, small: tuple[int, int], box: tuple[float, float, float, float] | None = None,
              out: tuple[int, int] | None = None) -> np.ndarray:
    """x (H×W) averaged (BOX) down to `small` (w, h); with `box` (x0, y0, x1, y1 of x) and `out`
    (w, h): only that part, as the crop of the whole resize would give it."""
    im = Image.fromarray(np.asarray(x, np.float32))
    if box is None:
        return np.asarray(im.resize(small, Image.BOX), np.float32)
    return np.asarray(im.resize(out, Image.BOX, box=box), np.float32)


def _footprint(sbox: tuple[int, int, int, int], small: tuple[int, int], shape: tuple[int, int],
               pad: int) -> tuple[tuple[int, int, int, int], tuple[float, float, float, float]]:
    """The full-size crop (Y0, Y1, X0, X1) under the stability-size box `sbox` grown by `pad` full
    pixels, and the box's own (x0, y0, x1, y1) within that crop (PIL's resize box)."""
    h, w = shape
    fy, fx = h / float(small[1]), w / float(small[0])
    y0, y1, x0, x1 = sbox
    Y0, Y1 = max(0, int(np.floor(y0 * fy)) - pad), min(h, int(np.ceil(y1 * fy)) + pad)
    X0, X1 = max(0, int(np.floor(x0 * fx)) - pad), min(w, int(np.ceil(x1 * fx)) + pad)
    return (Y0, Y1, X0, X1), (x0 * fx - X0, y0 * fy - Y0, x1 * fx - X0, y1 * fy - Y0)


def _keep_on_blocks(changed: np.ndarray, sbox: tuple[int, int, int, int], small: tuple[int, int],
                    shape: tuple[int, int]) -> np.ndarray:
    """float64 on the stability-size box `sbox` (y0, y1, x0, x1): 1 where a pixel lies 2 px or more
    (at full size) from `changed`, as at_small(dilate(changed, 2)) < 0.01 would give it there; the
    dilation and the resize are made on the box's footprint at full size only."""
    (Y0, Y1, X0, X1), box = _footprint(sbox, small, shape, 3)
    d = dilate(changed[Y0:Y1, X0:X1], STABILITY_MARGIN).astype(np.float32)
    y0, y1, x0, x1 = sbox
    return (_at_small(d, small, box=box, out=(x1 - x0, y1 - y0)) < NEAR_CHANGE_SHARE).astype(np.float64)


def _small_grey(img: StoredImage, small: tuple[int, int], cache: AnalysisCache) -> np.ndarray:
    """An image's grey, BOX-resized to `small` and blurred (1 px), as `stability` measures texture;
    once per image."""
    key = (img.digest, tuple(small))
    hit = cache.grey.get(key)
    if hit is None:
        hit = ndimage.gaussian_filter(grey_of(as_float_rgb(as_rgb(img.array).resize(small, Image.BOX))), 1.0)
        hit.flags.writeable = False
        cache.grey.put(key, hit)
    return hit


def _block_std_all(img: StoredImage, small: tuple[int, int], blocks: tuple[int, int],
                   cache: AnalysisCache) -> np.ndarray:
    """Each stability block's grey std (`_small_grey`) over all its pixels; once per image."""
    key = ("std", img.digest, tuple(small), tuple(blocks))
    hit = cache.small.get(key)
    if hit is None:
        t = block_tiles(_small_grey(img, small, cache), blocks).astype(np.float64)
        hit = np.sqrt(((t - t.mean(-1)[..., None]) ** 2).mean(-1))
        hit.flags.writeable = False
        cache.small.put(key, hit)
    return hit


def _change_blocks(history: History, prov: "Provenance", t: int, small: tuple[int, int],
                   blocks: tuple[int, int]) -> np.ndarray:
    """The share of each stability block C_t (its own frame) covers, at the stability size; once per turn."""
    stored = history.turns[t].masks.get(CHANGE)
    key = ("change", stored.image.digest if stored is not None else
           (history.turns[t - 1].image.digest, history.turns[t].image.digest), tuple(small), tuple(blocks))
    hit = prov.cache.small.get(key)
    if hit is None:
        hit = block_tiles(_at_small(prov.changes[t], small), blocks).mean(-1)
        hit.flags.writeable = False
        prov.cache.small.put(key, hit)
    return hit


# --------------------------------------------------------------------------- per-pixel history

@dataclass(frozen=True)
class Provenance:
    """Per pixel, the turns that changed it. `changes[t]` is C_t (bool H×W at the history's size,
    in I_t's frame) for t = 1..T; `changes[0]` is all False (I_0 is where everything starts).
    `alignments[t]` is turn t's alignment I_{t-1} -> I_t (alignments[0] the identity);
    `unstable[t]` the pixels whose blocks turn t moved or redrew beyond its change mask (a
    re-render; a zoom-out's new border). `computed` lists the turns whose mask was not stored and
    had to be computed now."""

    changes: tuple[np.ndarray, ...]
    size: tuple[int, int]
    computed: tuple[int, ...] = ()
    alignments: tuple[Alignment, ...] = ()
    unstable: tuple[np.ndarray, ...] = ()
    records: tuple[dict, ...] = ()      # each turn's change-mask info (stable_fraction, rerendered, ...)
    index: Any = field(default=None, compare=False, repr=False)  # respec.pixels.provenance_index view, when made by it
    cache: AnalysisCache = field(default=CACHE, compare=False, repr=False)   # where NearEvidence keeps per-image figures

    @property
    def turns(self) -> int:
        """T, the latest turn covered."""
        return len(self.changes) - 1

    def alignment(self, k: int, t: int | None = None) -> Alignment:
        """The composed alignment from I_k's frame to I_t's (t default: the latest)."""
        t = self.turns if t is None else t
        if not 0 <= k <= t <= self.turns:
            raise InputError(f"alignment from turn {k} to turn {t}: both must be in 0..{self.turns} with k <= t")
        al = self.alignments or (IDENTITY,) * (self.turns + 1)
        return compose_all(list(al[k + 1:t + 1]))

    def in_frame(self, mask: np.ndarray, k: int, t: int | None = None) -> np.ndarray:
        """A bool mask of I_k's frame carried into I_t's (nearest; t default: the latest)."""
        a = self.alignment(k, t)
        return mask if a.is_identity else warp(mask, a, order=0)

    def stack(self) -> np.ndarray:
        """(T+1)×H×W boolean stack of the change masks (each in its own turn's frame)."""
        return np.stack(self.changes)

    def turns_at(self, y: int, x: int) -> list[int]:
        """The turns that changed pixel (y, x), oldest first (coordinates at the history's size)."""
        return [t for t, m in enumerate(self.changes) if t > 0 and m[y, x]]

    def share(self, t: int) -> float:
        """The share of the image turn t changed."""
        return self.index.share(t) if self.index is not None else float(self.changes[t].mean())

    def last_change(self) -> np.ndarray:
        """int32 H×W: the latest turn that changed each pixel (0 = never changed)."""
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

    def stable_fraction(self, t: int) -> float:
        """Turn t's stable_fraction (1.0 when its record has none)."""
        rec = self.records[t] if t < len(self.records) else {}
        return float(rec.get("stable_fraction", 1.0)) if isinstance(rec, dict) else 1.0

    def textured_stable_fraction(self, t: int) -> float:
        """Turn t's share of textured blocks that held (its stable_fraction when not recorded)."""
        rec = self.records[t] if t < len(self.records) else {}
        if isinstance(rec, dict) and rec.get("textured_stable_fraction") is not None:
            return float(rec["textured_stable_fraction"])
        return self.stable_fraction(t)

    def rerendered(self, t: int) -> bool:
        """Whether turn t's change record says the editor re-rendered the scene."""
        rec = self.records[t] if t < len(self.records) else {}
        return bool(rec.get("rerendered", False)) if isinstance(rec, dict) else False

    def unchanged_since(self, k: int, frame: int | None = None) -> np.ndarray:
        """bool H×W in I_frame's frame (default: the latest): pixels no turn after k changed,
        moved or redrew (I_k and the latest image should agree there, up to drift). A turn's
        change mask and its unstable blocks count; pixels I_k never showed (a zoom-out's border)
        are not stable."""
        frame = self.turns if frame is None else frame
        if (self.index is not None and frame == self.turns
                and all(a.is_identity for a in self.alignments[k + 1:frame + 1])):
            return self.index.unchanged_since(k)   # its map stamps C_j | unstable_j: O(H·W)
        out = np.ones(self.changes[0].shape, bool)
        for j in range(k + 1, frame + 1):
            m = self.changes[j]
            if j < len(self.unstable) and self.unstable[j] is not None:
                m = m | self.unstable[j]
            out &= ~self.in_frame(m, j, frame)
        a = self.alignment(k, frame)
        if not a.is_identity:
            out &= support(a, out.shape)
        return out


def turn_alignment(history: History, t: int) -> Alignment:
    """Turn t's stored alignment I_{t-1} -> I_t (turn meta["alignment"], else its change mask's
    info; the identity for turn 0 and for turns stored before alignment existed)."""
    if not 0 <= t < len(history.turns):
        raise InputError(f"turn {t} is not in this history (turns 0..{len(history.turns) - 1})")
    return IDENTITY if t == 0 else change_record.turn_alignment(history.turns[t])


def turn_change(history: History, t: int, params: ChangeParams = DEFAULT_PARAMS,
                cache: AnalysisCache = CACHE) -> TurnMask:
    """Turn t's change record (the stored `change` TurnMask: mask + info with alignment,
    stable_fraction, rerendered, unstable_grid), computed (and cached) when the turn has none."""
    if not 1 <= t < len(history.turns):
        raise InputError(f"turn {t} has no change record (turns 1..{len(history.turns) - 1} do)")
    tm = history.turns[t].masks.get(CHANGE)
    if tm is None:
        tm = change_between(history.turns[t - 1].image, history.turns[t].image, history_size(history), params, cache)
    return tm


def provenance_of(history: History, params: ChangeParams = DEFAULT_PARAMS, cache: AnalysisCache = CACHE) -> Provenance:
    """The per-pixel change history of `history`: stored change masks where the turns have them
    (resized to the history's size if needed), computed for the turns that do not; with each
    turn's alignment and unstable blocks. What it reads again on later calls is kept in `cache`."""
    # The index keeps the masks' summaries and a "last change" map per history (O(H·W) per new
    # turn, each missing mask computed once); its map counts a turn's unstable blocks too.
    def compute(prev: StoredImage, cur: StoredImage, size: tuple[int, int], p: ChangeParams) -> TurnMask:
        return change_between(prev, cur, size, p, cache)

    idx = provenance_index.index_for(history, params, compute, stamp_mask=_changed_or_unstable, cache=cache)
    w, h = idx.size
    records = [{}] + [idx.info(t) for t in range(1, idx.turns + 1)]
    aligns = [IDENTITY] + [change_record.alignment_of(t.meta, records[t.index]) for t in history.turns[1:]]
    unstable = _UnstableMasks(records, (h, w))
    return Provenance(idx.masks(), idx.size, idx.computed, tuple(aligns), unstable, tuple(records), index=idx,
                      cache=cache)


def _changed_or_unstable(history: History, t: int, m: np.ndarray, info: dict) -> np.ndarray:
    grid = grid_from_info(info)
    return m if grid is None or not grid.any() else m | unstable_mask(grid, m.shape)


class _UnstableMasks(Sequence):
    """unstable[t] of each turn, made from its record when asked for."""

    def __init__(self, records, shape):
        self._records, self._shape = records, shape

    def __len__(self):
        return len(self._records)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return tuple(self[j] for j in range(*i.indices(len(self))))
        return unstable_mask(grid_from_info(self._records[i]), self._shape)
