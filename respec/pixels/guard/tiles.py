"""Only the tiles near the change are looked at (beyond the paper): the editor's image is warped
into I_{t-1}'s frame, and drift is told, on the TILE px squares within reach of the change mask.
`Tiles` is that lazily filled store (region.warp_near, step 4b of drift_guard, makes it)."""
from __future__ import annotations

import numpy as np

from ..masks import dilate
from .arrays import float_rgb
from .drift import drift_explained
from .values import Frame

TILE = 64           # the editor's pixels are warped and drift is told on the tiles near the change ...
TILE_PAD = 8        # ... each read with this much context (the drift test's filters reach 5 px)
CELL = 8            # a tile's reach is taken on cells this wide (at most this many px more than asked)
Box = tuple[int, int, int, int]


def tiles_near(mask: np.ndarray, reach: int) -> set[Box]:
    """(y0, y1, x0, x1) of the TILE-px squares of the picture within `reach` px of a pixel of
    `mask` (the reach is taken on CELL-px cells: at most CELL px more)."""
    h, w = mask.shape
    ny, nx = -(-h // TILE), -(-w // TILE)
    padded = np.zeros((ny * TILE, nx * TILE), bool)
    padded[:h, :w] = mask
    k = TILE // CELL
    cells = padded.reshape(ny * k, CELL, nx * k, CELL).any(axis=(1, 3))
    cells = dilate(cells, -(-int(reach) // CELL))
    hit = cells.reshape(ny, k, nx, k).any(axis=(1, 3))
    return {(i * TILE, min(h, (i + 1) * TILE), j * TILE, min(w, (j + 1) * TILE)) for i, j in zip(*np.nonzero(hit))}


def padded(tile: Box, shape: tuple[int, int]) -> tuple[Box, tuple[slice, slice]]:
    """A tile's box with TILE_PAD px of context (within the picture), and the tile inside that box."""
    y0, y1, x0, x1 = tile
    Y0, Y1 = max(0, y0 - TILE_PAD), min(shape[0], y1 + TILE_PAD)
    X0, X1 = max(0, x0 - TILE_PAD), min(shape[1], x1 + TILE_PAD)
    return (Y0, Y1, X0, X1), (slice(y0 - Y0, y1 - Y0), slice(x0 - X0, x1 - X0))


class Tiles:
    """The editor's pixels warped into I_{t-1}'s frame (E), and drift told (explained, faint) on the
    tested tiles (`test`), tile by tile: only the TILE px squares near the change are read. It is
    filled lazily, as the later steps find that they need more of the picture (a filled hole, a
    thin line followed, a coherent area growing): `warp` and `tell` add tiles, never change one
    already read. Outside the tiles read, E is 0, `explained` True and `faint` False."""

    def __init__(self, prev3: np.ndarray, cur3: np.ndarray, frame: Frame, drift_residual: float, test: set):
        self.prev3, self.cur3, self.frame, self.drift_residual = prev3, cur3, frame, drift_residual
        shape = prev3.shape[:2]
        self.shape = shape
        self.test, self.done = test, set()      # the tiles drift is told on; the tiles warped so far
        self.level = 0.0                        # the coherent rule's level (0: the rule is off)
        self.src = frame.support(shape)         # where the warped editor's image has pixels
        self.E = np.zeros(shape + (3,), np.float32)
        self.explained = np.ones(shape, bool)
        self.faint = np.zeros(shape, bool)

    def tell(self, tiles: set) -> None:
        """Tell drift on `tiles` too (a line followed beyond the tiles near the seed)."""
        new = tiles - self.test
        self.test |= new
        self.done -= new
        self.warp(new)

    def warp(self, tiles: set) -> None:
        """Warp (and on a tested tile, tell drift on) the tiles not warped yet. A run of neighbouring
        tiles along a row is read as one box: each tile's pixels are the same as read alone (the
        sampling is pixel by pixel, and drift_explained's filters reach less than TILE_PAD px), for
        far fewer calls."""
        for run in _runs(sorted(tiles - self.done), self.test):
            (Y0, Y1, X0, X1), _ = padded((run[0][0], run[0][1], run[0][2], run[-1][3]), self.shape)
            E_t = self.frame.sample(self.cur3, (Y0, Y1, X0, X1))
            tell = run[0] in self.test
            if tell:
                ex, fa = drift_explained(float_rgb(self.prev3[Y0:Y1, X0:X1]), E_t, self.frame.info,
                                         self.drift_residual)
            for y0, y1, x0, x1 in run:
                inner = (slice(y0 - Y0, y1 - Y0), slice(x0 - X0, x1 - X0))
                self.E[y0:y1, x0:x1] = E_t[inner]
                if tell:
                    self.explained[y0:y1, x0:x1], self.faint[y0:y1, x0:x1] = ex[inner], fa[inner]
            self.done.update(run)


def _runs(tiles: list[Box], test: set) -> list[list[Box]]:
    """Sorted tiles cut into runs of neighbours along a row, each all tested or all not."""
    runs: list[list[Box]] = []
    for t in tiles:
        last = runs[-1][-1] if runs else None
        if last is not None and last[:2] == t[:2] and last[3] == t[2] and (last in test) == (t in test):
            runs[-1].append(t)
        else:
            runs.append([t])
    return runs
