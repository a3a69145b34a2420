"""The Drift Guard as a post-edit step: the entries that read the request and the plan, over the
pixel rules of respec/pixels/guard.py (whose module docstring describes the guard).

    drift_guard   one turn's guard on I_{t-1} -> I_t with the turn's change record
    guard_pair    the same at the history's size, with a working size above GUARD_WORK_PIXELS
    guard_images  the Drift Guard node's entry (any editor, any size)
    GuardStep     the post-edit step of respec/turn.py's run_turn
    guard_result  its StepResult (respec/post_edit/result.py), for run_turn and the node
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from PIL import Image
from scipy import ndimage

from ..controller.request import check_request
from ..controller.request_language import BACKGROUND, GLOBAL, places_changed, request_scope
from ..errors import InputError
from ..history import REVEAL_SOURCE, History, StoredImage, TurnMask
from ..images import as_array, check_image_size
from ..plan import Plan
from ..pixels.alignment import IDENTITY, Alignment, remember_alignment, support, warp, warp_float
from ..pixels.edit_region import coarse_change, coarse_size
from ..pixels.grade import GRADE_FROM, colour_shift, grade_record, into_grade, invertible
from ..pixels.guard import (AGAIN_SIDE, DEFAULT_GUARD, GUARD_MASK, METHOD, MIN_CHANGE, NEAR_FRAC, RIM_PX, SEAMS,
                            STRUCTURE_HELD, TILE_PAD, GuardParams, GuardResult, _bbox, _compose_full, _finish, _float,
                            _full_size_change, _psnr, _reframed, _three, _tiles, _untrusted,
                            background_route, beyond_request, coarse_route, coherent_join, coherent_level,
                            coherent_residual, compose, drift_explained, drop_drift, guard_change, moved_around,
                            read_structure, remember_guarded, ring_changed, spread_out, thin_lines, with_exact_paste)
from ..pixels.change_mask import change_of, remember_change
from ..pixels.masks import dilate, history_size, mask_at
from ..pixels.reveal import exact_patch
from ..pixels.structure import BENT_FRAC, BENT_SHARE, StructureWarp, plain_warp
from ..pixels.work_images import working_size
from .record import TurnSoFar
from .result import StepResult


def drift_guard(previous: Any, edited: Any, change: TurnMask, *, user_mask: Any = None, extra_region: Any = None,
                request: str = "", plan: Any = None, params: GuardParams = DEFAULT_GUARD) -> GuardResult:
    """The drift guard on one turn (respec/pixels/guard.py's module docstring), in five steps:

        1. inputs    two images of one size, a known seam, the turn's record, the user's mask (_start)
        2. scope     a global edit steps aside, a new background takes its own route (_scope)
        3. frame     a re-framing steps aside; a re-render is read through the structure warp (_frame)
        4. region    the edit region K in I_{t-1}'s frame, read on the tiles near the change
                     (_seed, _warp_near, _change_kept, _region, _pose)
        5. compose   I_{t-1} outside K, the editor's aligned pixels inside, a seam without a step (_compose)

    Steps 2-4 may end the guard early (a GuardResult that stepped aside or took another route).

    previous: I_{t-1}; edited: I_t (the editor's output, after Reveal Composite when it ran), of
    one size (uint8 arrays, PIL or StoredImage). change: the turn's change record of I_{t-1} ->
    I_t (`change_mask.change_for` / `guard_change`: mask in I_t's frame, info with the alignment,
    colour fit and stability). user_mask: optional H×W mask in I_{t-1}'s frame of what may change
    (wins over the change mask). extra_region: optional H×W mask in I_t's frame the turn says
    changes (Reveal Composite's pasted pixels). request / plan: for the keyword rule."""
    run = _start(previous, edited, change, user_mask, params)                            # 1
    ended = _scope(run, request, plan)                                                   # 2
    ended = ended if ended is not None else _frame(run)                                  # 3
    if ended is not None:
        return ended
    seed, extra = _seed(run, change, extra_region)                                       # 4
    out, weight, edit_fraction = run.prev3.copy(), np.zeros(run.shape, np.float32), 0.0
    checks: dict = {}
    if (seed | extra if extra is not None else seed).any():
        tiles = _warp_near(run, seed, extra, checks)
        c_all, cc = _change_kept(run, tiles, seed, extra, checks)
        sl, K, region = _region(run, tiles, c_all)
        edit_fraction = float(region.sum()) / float(seed.size)
        ended = _pose(run, K, sl, cc, edit_fraction)
        if ended is not None:
            return ended
        _compose(run, tiles, K, sl, out, weight, checks)                                 # 5
    region_from = "the user's mask" if run.user is not None else "change mask" + (
        " + the turn's pasted pixels" if extra_region is not None else "")
    return _finish(run.prev, out, weight, {**run.base, "route": "pixels", "region_from": region_from,
                                           "edit_fraction": round(edit_fraction, 6), **checks}, run.al)


@dataclass
class _GuardRun:
    """One drift_guard call: its inputs and what the steps found so far (steps 2-3 may re-read the
    turn's record `info`, move the frame `inv` to I_{t-1}'s, set a structure warp `sw` or a `seed`)."""

    prev: np.ndarray             # I_{t-1} and I_t as given (uint8 H×W×C)
    cur: np.ndarray
    info: dict                   # the turn's change record
    al: Alignment                # the turn's alignment I_{t-1} -> I_t
    base: dict                   # the record every result starts from
    params: GuardParams
    user: np.ndarray | None      # the user's mask (None: the change mask decides)
    local: bool = False          # the edit is local (the user's mask or the request's words say so)
    places: int | None = None    # how many places the request changes (None: not read)
    shift: float = 0.0           # the whole picture's colour shift
    graded: bool = False         # the edit is mapped into I_{t-1}'s grade
    named: bool = False          # the request (or the user's mask) names what it changes
    sw: StructureWarp | None = None    # the structure warp, when the turn's alignment alone does not do
    seed: np.ndarray | None = None     # the change measured again through it, in I_{t-1}'s frame
    shape: tuple[int, int] = field(init=False)
    px: dict = field(init=False)       # margin and band in pixels
    prev3: np.ndarray = field(init=False)
    cur3: np.ndarray = field(init=False)
    inv: Alignment = field(init=False)  # I_t's frame -> I_{t-1}'s (IDENTITY once the record is in I_{t-1}'s)

    def __post_init__(self) -> None:
        self.shape = self.prev.shape[:2]
        self.px = self.params.pixels(self.shape)
        self.prev3, self.cur3 = _three(self.prev), _three(self.cur)
        self.inv = self.al.inverse()

    def aside(self, reason: str, **extra: Any) -> GuardResult:
        """The guard steps aside: the editor's image, and the record says why."""
        out = self.cur.copy()
        out.flags.writeable = False
        return GuardResult(out, np.ones(self.shape, np.float32), False, reason,
                           {**self.base, "applied": False, "stepped_aside": True, "reason": reason, **extra})


def _start(previous: Any, edited: Any, change: TurnMask, user_mask: Any, params: GuardParams) -> _GuardRun:
    """Step 1: the two images (one size), the seam, the turn's record, the user's mask."""
    prev = as_array(previous.array if isinstance(previous, StoredImage) else previous)
    cur = as_array(edited.array if isinstance(edited, StoredImage) else edited)
    if prev.shape[:2] != cur.shape[:2]:
        raise InputError(f"the drift guard needs I_(t-1) and I_t of one size, got {prev.shape[1]}x{prev.shape[0]} "
                         f"and {cur.shape[1]}x{cur.shape[0]}; resize the edit to the previous image's size first")
    if params.seam not in SEAMS:
        raise InputError(f"unknown seam {params.seam!r}; use one of {', '.join(SEAMS)}")
    shape = prev.shape[:2]
    info = dict(change.info)
    al = Alignment.from_record(info.get("alignment"))
    px = params.pixels(shape)
    base = {"method": METHOD, "alignment": al.record(), "margin_px": px["margin"], "band_px": px["band"],
            "seam": params.seam, "change_fraction": round(float(info.get("fraction", change.mask.mean())), 6)}
    user = None
    if user_mask is not None:
        user = mask_at(user_mask, shape, "the user's mask")
        if not user.any():
            user = None     # an empty mask says nothing: the change mask decides
    return _GuardRun(prev, cur, info, al, base, params, user, local=user is not None, shift=colour_shift(info))


def _scope(run: _GuardRun, request: str, plan: Any) -> GuardResult | None:
    """Step 2, a global edit? The user's mask says the edit is local, and so do the request's words:
    then a whole-picture colour shift is the editor's drift, mapped back into the previous grade."""
    info, params, aside = run.info, run.params, run.aside
    if run.user is None:
        read = request_scope(request, getattr(plan, "synthesis_instruction", None),
                             getattr(plan, "user_instruction", None)) if params.keywords else None
        scope = plan.edit_scope if plan is not None else None
        if scope == "global":
            return aside("the plan says this is a global edit", why="global")
        if read is not None and read.kind == GLOBAL:
            return aside(f"a global edit by the keyword rule ({read.words!r})", why="global")
        if read is not None and read.kind == BACKGROUND:
            return background_route(run.prev, run.cur, run.al, run.base, params, aside, read.words)
        run.local = read is not None
        run.places = places_changed(request or getattr(plan, "user_instruction", None)
                                    or getattr(plan, "synthesis_instruction", None)) if run.local else None
        if run.shift > params.global_colour and not (run.places is not None and invertible(info)):
            return aside(f"a global colour or lighting change: the whole picture's colours moved by "
                         f"{run.shift * 255:.0f}/255 (limit {params.global_colour * 255:.0f})", why="global",
                         colour_shift=round(run.shift, 4))
        if run.base["change_fraction"] > params.global_share and run.places is None:
            return aside(f"a global edit: the change covers {run.base['change_fraction']:.0%} of the picture "
                         f"(limit {params.global_share:.0%})", why="global")
    run.graded = run.local and run.shift > GRADE_FROM and invertible(info)
    run.named = run.local and (run.user is not None or run.places is not None)
    return None


def _frame(run: _GuardRun) -> GuardResult | None:
    """Step 3, can the alignment be undone? (a misplaced paste would damage the edit) A re-framing
    cannot; a re-render, residual motion or a whole-picture colour move is read through the
    structure warp (_through_structure)."""
    params = run.params
    reframed = _reframed(run.al, run.shape, params)
    if reframed:
        return run.aside(reframed, why="alignment")
    why = _untrusted(run.al, run.shape, params)
    rerendered = run.user is None and bool(run.info.get("rerendered"))
    if not (why or rerendered or run.shift > params.global_colour or run.base["change_fraction"] > params.global_share):
        return None
    # A re-render is separated from the edit only when the request names what it changes (or the
    # user's mask does): "let her cry" names nothing, and its re-drawn eyes and tears would look
    # like re-drawn detail. Residual motion alone (an aspect change, a zoom one similarity does not
    # follow) is aligned for any local request.
    if not run.local or (not run.named and not why):
        return run.aside(why, why="alignment") if why else run.aside(
            f"the editor re-rendered the scene beyond the change (stable fraction "
            f"{float(run.info.get('stable_fraction', 0.0)):.2f}): it cannot be separated from the edit", why="rerender")
    # On a local request the scene's structure decides: the editor re-drew texture, zoomed or
    # shifted a little more than one similarity explains, or moved every colour.
    why = why or ("the editor re-rendered the scene beyond the change" if rerendered
                  else "the editor moved the whole picture's colours")
    return _through_structure(run, why)


def _through_structure(run: _GuardRun, why: str) -> GuardResult | None:
    """Step 3 on a re-render (`why`): the structure warp must hold; the change is measured again
    through it in I_{t-1}'s frame (the new seed and record), or, where pixel by pixel the re-render
    and the edit are one, the change of content decides (coarse_route)."""
    params, shape = run.params, run.shape
    sw = run.sw = read_structure(run.prev3, run.cur3, run.al, run.user)
    run.base["structure"] = sw.record()
    if sw.held < STRUCTURE_HELD:
        return run.aside(f"{why}, and the scene's structure did not hold: after a structure warp only {sw.held:.0%} "
                         f"of its textured blocks agree (limit {STRUCTURE_HELD:.0%}): a new pose or a re-framing",
                         why="moved", route_why=why)
    if sw.bent > BENT_SHARE:
        return run.aside(f"{why}, and part of the scene moved on its own: after a structure warp {sw.bent:.1%} of the "
                         f"picture still moves by more than {BENT_FRAC:.0%} of its side where the rest does not (limit "
                         f"{BENT_SHARE:.0%}): a new pose, which restoring around the edit would break",
                         why="moved", route_why=why)
    # the change again, with the edit read through the structure warp, in I_(t-1)'s frame, at a
    # working size (the tiles below read the edit at full size where they need it)
    wshape, _ = coarse_size(shape, AGAIN_SIDE)
    E_w, _ = sw.sample_coarse(run.cur3, wshape)
    P_w = np.asarray(Image.fromarray(np.ascontiguousarray(run.prev3)).resize(wshape[::-1], Image.BOX),
                     np.float32) / 255.0
    again = change_of(P_w, E_w, warped=True)
    if run.user is None and (again.fraction < MIN_CHANGE or again.fraction > params.global_share
                             or run.shift > params.global_colour):
        # pixel by pixel the re-render and the edit are one (the change mask's threshold rose above
        # the edit, or it covers most of the picture, or the colours moved too far for it): the
        # change of content decides, when the request names what it changes
        if not run.named:
            return run.aside(f"{why}: after a structure warp the edit still cannot be told from the re-render, and "
                             "the request names nothing to keep apart", why="rerender", route_why=why)
        return coarse_route(run.prev3, run.cur3, run.prev, sw, run.user, run.base, params, run.aside, why, run.places)
    run.info = {**run.info, **again.info(), "alignment": run.al.record()}
    run.seed = again.mask if again.mask.shape == shape else np.asarray(
        Image.fromarray(again.mask).resize((shape[1], shape[0]), Image.NEAREST), bool)
    run.inv = IDENTITY       # the record and the seed are now in I_(t-1)'s frame
    run.base.update(route_why=why, change_fraction=round(again.fraction, 6))
    run.graded = run.local and colour_shift(run.info) > GRADE_FROM and invertible(run.info)
    return None


def _seed(run: _GuardRun, change: TurnMask, extra_region: Any) -> tuple[np.ndarray, np.ndarray | None]:
    """Step 4a, in I_{t-1}'s frame: (what changed: the user's mask, else the change mask; the turn's
    pasted pixels, or None)."""
    seed = run.user if run.user is not None else run.seed
    if seed is None:
        seed = change.mask if run.al.is_identity else warp(change.mask, run.inv, order=0)
    extra = None
    if extra_region is not None and run.user is None:
        extra = mask_at(extra_region, run.shape, "extra_region")
        extra = extra if run.al.is_identity else warp(extra, run.al.inverse(), order=0)
    return seed, extra


def _padded(tile: tuple[int, int, int, int], shape: tuple[int, int]) -> tuple[tuple, tuple[slice, slice]]:
    """A tile's box with TILE_PAD px of context (within the picture), and the tile inside that box."""
    y0, y1, x0, x1 = tile
    Y0, Y1 = max(0, y0 - TILE_PAD), min(shape[0], y1 + TILE_PAD)
    X0, X1 = max(0, x0 - TILE_PAD), min(shape[1], x1 + TILE_PAD)
    return (Y0, Y1, X0, X1), (slice(y0 - Y0, y1 - Y0), slice(x0 - X0, x1 - X0))


class _Tiles:
    """The editor's pixels warped into I_{t-1}'s frame (E), and drift told (explained, faint) on the
    tested tiles (`test`), tile by tile: only the TILE px squares near the change are read."""

    def __init__(self, run: _GuardRun, test: set):
        self.run, self.test, self.done = run, test, set()
        self.level = 0.0                      # the coherent rule's level (0: the rule is off)
        self.src = np.zeros(run.shape, bool)  # where the warped editor's image has pixels (_warp_near sets it)
        self.E = np.zeros(run.shape + (3,), np.float32)
        self.explained = np.ones(run.shape, bool)
        self.faint = np.zeros(run.shape, bool)

    def tell(self, tiles: set) -> None:
        """Tell drift on `tiles` too (a line followed beyond the tiles near the seed)."""
        new = tiles - self.test
        self.test |= new
        self.done -= new
        self.warp(new)

    def warp(self, tiles: set) -> None:
        """Warp (and on a tested tile, tell drift on) the tiles not warped yet."""
        run = self.run
        for tile in sorted(tiles - self.done):
            (Y0, Y1, X0, X1), inner = _padded(tile, run.shape)
            y0, y1, x0, x1 = tile
            E_t = warp_float(run.cur3, run.inv, box=(Y0, Y1, X0, X1)) if run.sw is None else run.sw.sample(
                run.cur3, (Y0, Y1, X0, X1))
            self.E[y0:y1, x0:x1] = E_t[inner]
            if tile in self.test:
                ex, fa = drift_explained(_float(run.prev3[Y0:Y1, X0:X1]), E_t, run.info, run.params.drift_residual)
                self.explained[y0:y1, x0:x1], self.faint[y0:y1, x0:x1] = ex[inner], fa[inner]
            self.done.add(tile)


def _warp_near(run: _GuardRun, seed: np.ndarray, extra: np.ndarray | None, checks: dict) -> _Tiles:
    """Step 4b: the editor's pixels warped on the tiles near the change, drift told on those near the
    seed; a faint area coherent in colour is not drift (a tint) when it stands out of the drift
    around the change (the level, `tiles.level`, is COHERENT_OVER_DRIFT x the median smoothed
    residual on the tested tiles away from the change: an editor whose colour drift varies over the
    picture raises it, and there a tint cannot be told from drift and the rule keeps out)."""
    params, px = run.params, run.px
    reach = px["margin"] + px["band"] + 2 * RIM_PX + 2
    tiles = _Tiles(run, _tiles(seed, px["margin"] + 1) if run.user is None else set())
    tiles.warp(_tiles(seed | extra if extra is not None else seed, reach) | tiles.test)
    if params.coherent and run.user is None and tiles.test:
        level = tiles.level = coherent_level(run.prev3, tiles.E, seed, tiles.test, run.info, params)
        checks["coherent_level"] = round(level * 255.0, 2)
        for tile in tiles.test if level else ():
            (Y0, Y1, X0, X1), inner = _padded(tile, run.shape)
            y0, y1, x0, x1 = tile
            ex = tiles.explained[Y0:Y1, X0:X1].copy()
            co = coherent_residual(_float(run.prev3[Y0:Y1, X0:X1]), tiles.E[Y0:Y1, X0:X1], run.info, level,
                                   params.coherent_ratio, params.coherent_sigma)
            ex &= ~ndimage.binary_opening(ex & co, np.ones((params.coherent_open,) * 2, bool))
            tiles.explained[y0:y1, x0:x1] = ex[inner]
    tiles.src = support(run.inv, run.shape) if run.sw is None else run.sw.support((0, run.shape[0], 0, run.shape[1]))
    return tiles


THIN_FOLLOW = 4     # rounds of tiles a thin line is followed onto beyond those near the seed


def _change_kept(run: _GuardRun, tiles: _Tiles, seed: np.ndarray, extra: np.ndarray | None,
                 checks: dict) -> tuple[np.ndarray, Any]:
    """Step 4c: (the change the edit made, the change of content at the coarse scale when a rule
    read it, else None): the seed joined with a coherent tint next to it, without what drift
    explains (drop_drift), without re-drawn detail away from the request's change (beyond_request),
    with the turn's pasted pixels."""
    if run.user is not None:
        return seed, None
    shape, px, params = run.shape, run.px, run.params
    c_all = np.zeros(shape, bool)
    found, cc = seed, None
    if tiles.level and seed.any():
        joined, why_not = coherent_join(run.prev3, tiles.E, seed, tiles.src, run.info, tiles.done, tiles.warp, params,
                                        px, tiles.level)
        if joined is not None:
            checks["coherent_px_joined"] = int(joined.sum())
            found = seed | joined
            tiles.explained &= ~joined
        elif why_not:
            checks["coherent_not_joined"] = why_not
    s0 = _bbox(found, 1)
    c_all[s0], dropped = drop_drift(found[s0], tiles.explained[s0], max(1.0, 2e-4 * seed.size), tiles.faint[s0],
                                    (found & ~seed)[s0], px["margin"] + params.coherent_open)
    if dropped:
        checks["drift_px_dropped"] = dropped
    if run.local and c_all.any() and spread_out(c_all, round(NEAR_FRAC * min(shape))):
        cc = coarse_change(run.prev3, *(run.sw or plain_warp(run.al, shape)).sample_coarse(run.cur3,
                                                                                            coarse_size(shape)[0]))
        beyond = beyond_request(run.prev3, tiles.E, c_all, run.info, cc, run.places, run.named)
        if beyond.any():
            checks["beyond_request_px_dropped"] = int(beyond.sum())
            c_all &= ~beyond
    lines = thin_lines(c_all, tiles.explained, tiles.E)
    for _ in range(THIN_FOLLOW):      # a line that leaves the tested tiles is followed onto the next ones
        more = _tiles(lines, px["margin"] + 1) - tiles.test
        if not more:
            break
        tiles.tell(more)
        lines = thin_lines(c_all, tiles.explained, tiles.E)
    if lines.any():
        checks["thin_lines_px_joined"] = int(lines.sum())
        c_all |= lines
    if extra is not None:
        c_all = c_all | extra
    return c_all, cc


def _region(run: _GuardRun, tiles: _Tiles, c_all: np.ndarray) -> tuple[tuple[slice, slice], np.ndarray, np.ndarray]:
    """Step 4d: (the crop around the change, K: the pixels that keep the editor's, the region: the
    change grown by the margin, holes filled), on the crop. In the margin the editor's pixels are
    kept only where they differ from I_(t-1) beyond its drift (a soft shadow the threshold missed);
    elsewhere the margin is I_(t-1)'s."""
    px = run.px
    sl = _bbox(c_all, px["margin"] + px["band"] + 2 * RIM_PX + 2) if c_all.any() else (slice(0, 1), slice(0, 1))
    src, c = tiles.src[sl], c_all[sl]
    if run.user is not None:
        K = region = c & src
    else:
        grown = dilate(c, px["margin"])
        region = ndimage.binary_fill_holes(grown) & src
        K = ndimage.binary_fill_holes(c | (grown & ~tiles.explained[sl])) & src
    if K.any():     # a filled hole can reach beyond the tiles warped so far: warp those too
        k_all = np.zeros(run.shape, bool)
        k_all[sl] = K
        tiles.warp(_tiles(k_all, px["band"] + 2 * RIM_PX + 2))
    return sl, K, region


def _pose(run: _GuardRun, K: np.ndarray, sl: tuple[slice, slice], cc: Any, edit_fraction: float) -> GuardResult | None:
    """Step 4e: a global edit region, or a pose change around it, steps aside. The pose test reads the
    stability blocks of the turn's record; after a structure warp (a re-rendered scene, whose every
    block the record calls unstable) the change of content."""
    params, shape = run.params, run.shape
    if run.user is not None:
        return None
    if edit_fraction > params.global_share:
        return run.aside(f"a global edit: the edit region covers {edit_fraction:.0%} of the picture "
                         f"(limit {params.global_share:.0%})", why="global", edit_fraction=round(edit_fraction, 6))
    if not K.any():
        return None
    if run.sw is None:
        moved = moved_around(K, sl, shape, run.info, run.inv)
    else:
        cc = cc or coarse_change(run.prev3, *run.sw.sample_coarse(run.cur3, coarse_size(shape)[0]))
        k_all = np.zeros(shape, bool)
        k_all[sl] = K
        moved = ring_changed(cc, np.asarray(Image.fromarray(k_all).resize(cc.residual.shape[::-1], Image.BOX)))
    if moved > params.max_moved_around:
        return run.aside(f"the editor moved the picture around the edit ({moved:.0%} of the pixels around it "
                         f"changed their structure: a pose change): pasting the edit into the previous image "
                         f"would break what it is part of", why="moved", moved_around=round(moved, 4),
                         edit_fraction=round(edit_fraction, 6))
    return None


def _compose(run: _GuardRun, tiles: _Tiles, K: np.ndarray, sl: tuple[slice, slice], out: np.ndarray,
             weight: np.ndarray, checks: dict) -> None:
    """Step 5, into `out` and `weight` on the crop `sl`: I_{t-1} outside K, the editor's (aligned,
    on a local edit mapped into I_{t-1}'s grade) pixels inside, a seam without a step."""
    E = tiles.E[sl]
    if run.graded:
        E = into_grade(E, run.info)
        checks.update(graded=f"the edit mapped into the previous image's colours (a shift of "
                              f"{run.shift * 255:.0f}/255)", grade=grade_record(run.info))
    if not K.any():
        return
    comp, w = compose(_float(run.prev3[sl]), E, K, tiles.src[sl], run.params.seam, run.px, checks)
    sel = w > 0
    view = out[sl]
    view[sel] = np.clip(np.round(comp[sel] * 255.0), 0, 255).astype(np.uint8)
    weight[sl] = w
    kept = w >= 1.0
    if kept.any():
        err = (view[kept].astype(np.float64) - E[kept] * 255.0) ** 2
        checks["edit_region_psnr"] = round(_psnr(float(err.mean())), 2)


def guard_result(res: GuardResult | None, entry: dict | None = None, image: Any = None) -> StepResult:
    """The guard's StepResult: its record (or `entry`: res None when the guard was switched off), the
    kept-edit weights as the turn's `guard_edit` mask when it changed the image, and that image
    (`image`, the output as a StoredImage; None in the node's value, whose image travels on its
    IMAGE output)."""
    applied = res is not None and res.applied
    return StepResult(GuardStep.name, dict(entry if entry is not None else res.record),
                      image=image if applied else None, masks={GUARD_MASK: res.turn_mask()} if applied else {},
                      result=res)


GUARD_WORK_PIXELS = 4_194_304   # a picture above this (4 MP) is guarded at a working resolution (see guard_pair)


def guard_images(previous: Any, edited: Any, *, user_mask: Any = None, extra_region: Any = None,
                 request: str = "", plan: Any = None, params: GuardParams = DEFAULT_GUARD,
                 work_pixels: int = GUARD_WORK_PIXELS, exact: Any = None) -> GuardResult:
    """The drift guard on two images (the node; any editor): the shared change record is taken
    from (or put into) the analysis cache (respec/pixels/analysis_cache.py), and the output's derived record is remembered there.
    An edit of another size is resized to I_{t-1}'s for the guard. The result's image and weight
    always have the size of the image it returns: I_{t-1}'s when it applied, the editor's own
    (not resized) when it stepped aside. exact: Reveal Composite's ExactPatch
    (respec/pixels/reveal.py) when it pasted this turn."""
    check_request(request or "", "the instruction")
    p = StoredImage.of(previous)
    e0 = StoredImage.of(edited)
    check_image_size(p.array.shape, "the previous image")
    check_image_size(e0.array.shape, "the edited image")
    e = e0 if e0.size == p.size else StoredImage.of(np.asarray(e0.rgb().resize(p.size, Image.BILINEAR)))
    res = guard_pair(p, e, p.size, user_mask=user_mask, extra_region=extra_region, request=request, plan=plan,
                     params=params, work_pixels=work_pixels, exact=exact)
    if not res.applied and e is not e0:
        res = replace(res, image=e0.array, weight=np.ones(e0.array.shape[:2], np.float32))
    return res


def guard_pair(p: StoredImage, e: StoredImage, size: tuple[int, int], *, user_mask: Any = None,
               extra_region: Any = None, request: str = "", plan: Any = None,
               params: GuardParams = DEFAULT_GUARD, work_pixels: int = GUARD_WORK_PIXELS,
               exact: Any = None) -> GuardResult:
    """drift_guard on I_{t-1} -> I_t of one size (the node's and run_turn's path), with the turn's
    change record at `size` (the history's) from the analysis cache; when the guard applied, the
    output's derived record is remembered there (remember_guarded).

    Above `work_pixels` the guard runs on both pictures scaled to the working size (the size the
    change record is analysed at: work_images.working_size) and its output is made at full size by
    `_compose_full`: I_{t-1}'s own pixels wherever the working-size weight is 0, else the editor's
    full-size pixels (aligned) with the working-size seam correction upsampled. Its cost is that of
    a 4 MP guard plus a resize and one pass over the edit's box (8000²: docs/drift-guard.md)."""
    work = working_size(p.size, work_pixels)
    if work == p.size:
        change = guard_change(p, e, size)
        res = drift_guard(p, e, change, user_mask=user_mask, extra_region=extra_region, request=request,
                          plan=plan, params=params)
        res = with_exact_paste(res, exact)
        if res.applied:
            remember_guarded(p, StoredImage.of(res.image), res, change, size)
        return res
    p_w, e_w = (StoredImage(np.asarray(im.rgb().resize(work, Image.BILINEAR))) for im in (p, e))
    change_w = guard_change(p_w, e_w, work)
    res_w = drift_guard(p_w, e_w, change_w, user_mask=user_mask, extra_region=extra_region, request=request,
                        plan=plan, params=params)
    change = _full_size_change(change_w, p.size)
    remember_change(p, e, tuple(size), change)     # History Append's record of the edit, when it steps aside
    remember_alignment(p, e, tuple(size), Alignment.from_record(change.info.get("alignment")))
    record = {**res_w.record, "working_size": list(work)}
    if not res_w.applied:
        return GuardResult(e.array, np.ones(e.array.shape[:2], np.float32), False, res_w.reason, record)
    if "structure" in res_w.record:
        # _compose_full carries the edit to full size with the turn's similarity alone; a structure
        # warp (a re-render, a zoom one similarity does not follow) would put it in the wrong place.
        reason = (f"the picture is above {work_pixels / 1e6:.0f} MP and the edit needed a structure warp (a re-render "
                  f"or zoom), which the guard applies only at up to that size: the editor's image is kept")
        record.update(applied=False, stepped_aside=True, reason=reason)
        return GuardResult(e.array, np.ones(e.array.shape[:2], np.float32), False, reason, record)
    image, weight = _compose_full(p, e, p_w, e_w, res_w, change_w, params, refine=user_mask is None)
    record["kept_fraction"] = round(float((weight > 0).mean()), 6)
    res = with_exact_paste(GuardResult(image, weight, True, res_w.reason, record), exact)
    remember_guarded(p, StoredImage.of(image), res, change, size)
    return res


class GuardStep:
    """The drift guard as a post-edit step of respec.turn.run_turn (after Reveal Composite): keeps
    the `guard_edit` mask with the turn and records what it did."""

    name = "drift_guard"

    def __init__(self, params: GuardParams = DEFAULT_GUARD):
        self.params = params

    def __call__(self, history: History, record: TurnSoFar) -> StepResult:
        prev = history.current.image
        size = prev.size
        img = record.image if isinstance(record.image, StoredImage) else StoredImage.of(np.asarray(record.image))
        if img.size != size or size != history_size(history):
            return StepResult(self.name, {"method": METHOD, "applied": False, "stepped_aside": True,
                                          "reason": "the edit or I_(t-1) has another size than the history: "
                                                    "not aligned"})
        pasted = record.masks.get(REVEAL_SOURCE)
        exact = None
        if pasted is not None:      # Reveal's paste inside: I_{k-1}'s own pixels, not the colour-fitted ones
            exact = exact_patch(history, pasted, pasted.info)
        res = guard_pair(prev, img, history_size(history), extra_region=pasted.mask if pasted is not None else None,
                         request=record.request, plan=record.plan, params=self.params, exact=exact)
        return guard_result(res, image=res.image if res.applied else None)
