"""The Drift Guard as a post-edit step: the entries that read the request and the plan, over the
pixel rules of respec/pixels/guard.py (whose module docstring describes the guard).

    drift_guard   one turn's guard on I_{t-1} -> I_t with the turn's change record
    guard_pair    the same at the history's size, with a working size above GUARD_WORK_PIXELS
    guard_images  the Drift Guard node's entry (any editor, any size)
    GuardStep     the post-edit step of respec/turn.py's run_turn
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
from PIL import Image
from scipy import ndimage

from ..controller.request import check_request
from ..controller.request_language import BACKGROUND, GLOBAL, places_changed, request_scope
from ..errors import InputError
from ..history import History, StoredImage, TurnMask
from ..images import as_array, check_image_size
from ..plan import Plan
from ..pixels.alignment import IDENTITY, Alignment, support, warp, warp_float
from ..pixels.edit_region import coarse_change, coarse_size
from ..pixels.grade import GRADE_FROM, colour_shift, grade_record, into_grade, invertible
from ..pixels.guard import (AGAIN_SIDE, DEFAULT_GUARD, GUARD_MASK, METHOD, MIN_CHANGE, NEAR_FRAC, RIM_PX, SEAMS,
                            STRUCTURE_HELD, TILE_PAD, GuardParams, GuardResult, _bbox, _compose_full, _finish, _float,
                            _full_size_change, _mask_at, _psnr, _reframed, _tiles, _untrusted, background_route,
                            beyond_request, coarse_route, coherent_join, coherent_level, coherent_residual, compose,
                            drift_explained, drop_drift, guard_change, moved_around, read_structure,
                            remember_guarded, ring_changed, spread_out, with_exact_paste)
from ..pixels.provenance import change_of, dilate, remember_alignment, remember_change, working_size
from ..pixels.reveal import exact_patch
from ..pixels.structure import plain_warp


def drift_guard(previous: Any, edited: Any, change: TurnMask, *, user_mask: Any = None, extra_region: Any = None,
                request: str = "", plan: Any = None, params: GuardParams = DEFAULT_GUARD) -> GuardResult:
    """The drift guard on one turn (see the module docstring).

    previous: I_{t-1}; edited: I_t (the editor's output, after Reveal Composite when it ran), of
    one size (uint8 arrays, PIL or StoredImage). change: the turn's change record of I_{t-1} ->
    I_t (`provenance.change_for` / `guard_change`: mask in I_t's frame, info with the alignment,
    colour fit and stability). user_mask: optional H×W mask in I_{t-1}'s frame of what may change
    (wins over the change mask). extra_region: optional H×W mask in I_t's frame the turn says
    changes (Reveal Composite's pasted pixels). request / plan: for the keyword rule."""
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
    full = np.ones(shape, np.float32)

    def aside(reason: str, **extra: Any) -> GuardResult:
        out = cur.copy()
        out.flags.writeable = False
        return GuardResult(out, full, False, reason, {**base, "applied": False, "stepped_aside": True,
                                                       "reason": reason, **extra})

    user = None
    if user_mask is not None:
        user = _mask_at(user_mask, shape, "the user's mask")
        if not user.any():
            user = None     # an empty mask says nothing: the change mask decides
    # 1. A global edit? The user's mask says the edit is local, and so do the request's words: then
    # a whole-picture colour shift is the editor's drift, mapped back into the previous grade.
    local = user is not None
    places = None       # how many places the request changes (None: not read)
    shift = colour_shift(info)
    if user is None:
        read = request_scope(request, getattr(plan, "synthesis_instruction", None),
                             getattr(plan, "user_instruction", None)) if params.keywords else None
        scope = (getattr(plan, "meta", None) or {}).get("edit_scope") if plan is not None else None
        if scope == "global":
            return aside("the plan says this is a global edit", why="global")
        if read is not None and read.kind == GLOBAL:
            return aside(f"a global edit by the keyword rule ({read.words!r})", why="global")
        if read is not None and read.kind == BACKGROUND:
            return background_route(prev, cur, al, base, params, aside, read.words)
        local = read is not None
        places = places_changed(request or getattr(plan, "user_instruction", None)
                                or getattr(plan, "synthesis_instruction", None)) if local else None
        if shift > params.global_colour and not (places is not None and invertible(info)):
            return aside(f"a global colour or lighting change: the whole picture's colours moved by "
                         f"{shift * 255:.0f}/255 (limit {params.global_colour * 255:.0f})", why="global",
                         colour_shift=round(shift, 4))
        if base["change_fraction"] > params.global_share and places is None:
            return aside(f"a global edit: the change covers {base['change_fraction']:.0%} of the picture "
                         f"(limit {params.global_share:.0%})", why="global")
    graded = local and shift > GRADE_FROM and invertible(info)
    # 2. Can the alignment be undone? (a misplaced paste would damage the edit) A re-framing cannot.
    reframed = _reframed(al, shape, params)
    if reframed:
        return aside(reframed, why="alignment")
    why = _untrusted(al, shape, params)
    rerendered = user is None and bool(info.get("rerendered"))
    prev3 = prev[:, :, :3] if prev.shape[2] >= 3 else np.repeat(prev[:, :, :1], 3, axis=2)
    cur3 = cur[:, :, :3] if cur.shape[2] >= 3 else np.repeat(cur[:, :, :1], 3, axis=2)
    inv = al.inverse()
    sw = None           # the structure warp, when the turn's alignment alone does not do
    seed = None
    named = local and (user is not None or places is not None)
    if why or rerendered or shift > params.global_colour or base["change_fraction"] > params.global_share:
        # A re-render is separated from the edit only when the request names what it changes (or the
        # user's mask does): "let her cry" names nothing, and its re-drawn eyes and tears would look
        # like re-drawn detail. Residual motion alone (an aspect change, a zoom one similarity does not
        # follow) is aligned for any local request.
        if not local or (not named and not why):
            return aside(why, why="alignment") if why else aside(
                f"the editor re-rendered the scene beyond the change (stable fraction "
                f"{float(info.get('stable_fraction', 0.0)):.2f}): it cannot be separated from the edit", why="rerender")
        # On a local request the scene's structure decides: the editor re-drew texture, zoomed or
        # shifted a little more than one similarity explains, or moved every colour.
        why = why or ("the editor re-rendered the scene beyond the change" if rerendered
                      else "the editor moved the whole picture's colours")
        sw = read_structure(prev3, cur3, al, user)
        base["structure"] = sw.record()
        if sw.held < STRUCTURE_HELD:
            return aside(f"{why}, and the scene's structure did not hold: after a structure warp only {sw.held:.0%} "
                         f"of its textured blocks agree (limit {STRUCTURE_HELD:.0%}): a new pose or a re-framing",
                         why="moved", route_why=why)
        # the change again, with the edit read through the structure warp, in I_(t-1)'s frame, at a
        # working size (the tiles below read the edit at full size where they need it)
        wshape, _ = coarse_size(shape, AGAIN_SIDE)
        E_w, _ = sw.sample_coarse(cur3, wshape)
        P_w = np.asarray(Image.fromarray(np.ascontiguousarray(prev3)).resize(wshape[::-1], Image.BOX),
                         np.float32) / 255.0
        again = change_of(P_w, E_w, warped=True)
        if user is None and (again.fraction < MIN_CHANGE or again.fraction > params.global_share
                             or shift > params.global_colour):
            # pixel by pixel the re-render and the edit are one (the change mask's threshold rose above
            # the edit, or it covers most of the picture, or the colours moved too far for it): the
            # change of content decides, when the request names what it changes
            if not named:
                return aside(f"{why}: after a structure warp the edit still cannot be told from the re-render, and "
                             "the request names nothing to keep apart", why="rerender", route_why=why)
            return coarse_route(prev3, cur3, prev, sw, user, base, params, aside, why, places)
        info = {**info, **again.info(), "alignment": al.record()}
        seed = again.mask if again.mask.shape == shape else np.asarray(
            Image.fromarray(again.mask).resize((shape[1], shape[0]), Image.NEAREST), bool)
        inv = IDENTITY       # the record and the seed are now in I_(t-1)'s frame
        base.update(route_why=why, change_fraction=round(again.fraction, 6))
        graded = local and colour_shift(info) > GRADE_FROM and invertible(info)

    # 3. The edit region, in I_{t-1}'s frame. The editor's pixels are warped, and drift is told,
    # only on the tiles near the change (TILE px squares); the region itself on the crop around it.
    if user is not None:
        seed = user
    elif seed is None:
        seed = change.mask if al.is_identity else warp(change.mask, inv, order=0)
    extra = None
    if extra_region is not None and user is None:
        extra = _mask_at(extra_region, shape, "extra_region")
        extra = extra if al.is_identity else warp(extra, al.inverse(), order=0)
    out = prev3.copy()
    weight = np.zeros(shape, np.float32)
    checks: dict = {}
    edit_fraction = 0.0
    need = seed | extra if extra is not None else seed
    if need.any():
        reach = px["margin"] + px["band"] + 2 * RIM_PX + 2
        E_all = np.zeros(shape + (3,), np.float32)
        explained_all = np.ones(shape, bool)
        faint_all = np.zeros(shape, bool)
        test = _tiles(seed, px["margin"] + 1) if user is None else set()
        done: set = set()

        def warp_tiles(tiles: set) -> None:
            for y0, y1, x0, x1 in sorted(tiles - done):
                Y0, Y1 = max(0, y0 - TILE_PAD), min(shape[0], y1 + TILE_PAD)
                X0, X1 = max(0, x0 - TILE_PAD), min(shape[1], x1 + TILE_PAD)
                E_t = warp_float(cur3, inv, box=(Y0, Y1, X0, X1)) if sw is None else sw.sample(cur3, (Y0, Y1, X0, X1))
                inner = (slice(y0 - Y0, y1 - Y0), slice(x0 - X0, x1 - X0))
                E_all[y0:y1, x0:x1] = E_t[inner]
                if (y0, y1, x0, x1) in test:
                    ex, fa = drift_explained(_float(prev3[Y0:Y1, X0:X1]), E_t, info, params.drift_residual)
                    explained_all[y0:y1, x0:x1], faint_all[y0:y1, x0:x1] = ex[inner], fa[inner]
                done.add((y0, y1, x0, x1))
        warp_tiles(_tiles(need, reach) | test)
        level = 0.0
        if params.coherent and user is None and test:
            # A faint area coherent in colour is not drift (a tint) when it stands out of the drift
            # around the change: the level is COHERENT_OVER_DRIFT x the median smoothed residual on
            # the tested tiles away from the change (an editor whose colour drift varies over the
            # picture raises it: there a tint cannot be told from drift and the rule keeps out).
            level = coherent_level(prev3, E_all, seed, test, info, params)
            checks["coherent_level"] = round(level * 255.0, 2)
            for y0, y1, x0, x1 in test if level else ():
                Y0, Y1 = max(0, y0 - TILE_PAD), min(shape[0], y1 + TILE_PAD)
                X0, X1 = max(0, x0 - TILE_PAD), min(shape[1], x1 + TILE_PAD)
                inner = (slice(y0 - Y0, y1 - Y0), slice(x0 - X0, x1 - X0))
                ex = explained_all[Y0:Y1, X0:X1].copy()
                co = coherent_residual(_float(prev3[Y0:Y1, X0:X1]), E_all[Y0:Y1, X0:X1], info, level,
                                       params.coherent_ratio, params.coherent_sigma)
                ex &= ~ndimage.binary_opening(ex & co, np.ones((params.coherent_open,) * 2, bool))
                explained_all[y0:y1, x0:x1] = ex[inner]
        src_all = support(inv, shape) if sw is None else sw.support((0, shape[0], 0, shape[1]))
        cc = None       # the change of content at the coarse scale, when a rule reads it
        if user is not None:
            c_all = seed
        else:
            c_all = np.zeros(shape, bool)
            found = seed
            if level and seed.any():
                joined, why_not = coherent_join(prev3, E_all, seed, src_all, info, done, warp_tiles, params, px,
                                                level)
                if joined is not None:
                    checks["coherent_px_joined"] = int(joined.sum())
                    found = seed | joined
                    explained_all &= ~joined
                elif why_not:
                    checks["coherent_not_joined"] = why_not
            s0 = _bbox(found, 1)
            c_all[s0], dropped = drop_drift(found[s0], explained_all[s0], max(1.0, 2e-4 * seed.size), faint_all[s0],
                                            (found & ~seed)[s0], px["margin"] + params.coherent_open)
            if dropped:
                checks["drift_px_dropped"] = dropped
            if local and c_all.any() and spread_out(c_all, round(NEAR_FRAC * min(shape))):
                cc = coarse_change(prev3, *(sw or plain_warp(al, shape)).sample_coarse(cur3, coarse_size(shape)[0]))
                beyond = beyond_request(prev3, E_all, c_all, info, cc, places, named)
                if beyond.any():
                    checks["beyond_request_px_dropped"] = int(beyond.sum())
                    c_all &= ~beyond
            if extra is not None:
                c_all = c_all | extra
        sl = _bbox(c_all, reach) if c_all.any() else (slice(0, 1), slice(0, 1))
        src, P, c = src_all[sl], _float(prev3[sl]), c_all[sl]
        if user is not None:
            K = region = c & src
        else:
            explained = explained_all[sl]
            grown = dilate(c, px["margin"])
            region = ndimage.binary_fill_holes(grown) & src
            # In the margin the editor's pixels are kept only where they differ from I_(t-1) beyond
            # its drift (a soft shadow the threshold missed); elsewhere the margin is I_(t-1)'s.
            K = ndimage.binary_fill_holes(c | (grown & ~explained)) & src
        if K.any():     # a filled hole can reach beyond the tiles warped so far: warp those too
            k_all = np.zeros(shape, bool)
            k_all[sl] = K
            warp_tiles(_tiles(k_all, px["band"] + 2 * RIM_PX + 2))
        E = E_all[sl]
        edit_fraction = float(region.sum()) / float(seed.size)
        if user is None and edit_fraction > params.global_share:
            return aside(f"a global edit: the edit region covers {edit_fraction:.0%} of the picture "
                         f"(limit {params.global_share:.0%})", why="global", edit_fraction=round(edit_fraction, 6))
        if user is None and K.any():
            # the pose test: on the stability blocks of the turn's record; after a structure warp (a
            # re-rendered scene, whose every block the record calls unstable) on the change of content
            if sw is None:
                moved = moved_around(K, sl, shape, info, inv)
            else:
                cc = cc or coarse_change(prev3, *sw.sample_coarse(cur3, coarse_size(shape)[0]))
                k_all = np.zeros(shape, bool)
                k_all[sl] = K
                moved = ring_changed(cc, np.asarray(Image.fromarray(k_all).resize(cc.residual.shape[::-1], Image.BOX)))
            if moved > params.max_moved_around:
                return aside(f"the editor moved the picture around the edit ({moved:.0%} of the pixels around it "
                             f"changed their structure: a pose change): pasting the edit into the previous image "
                             f"would break what it is part of", why="moved", moved_around=round(moved, 4),
                             edit_fraction=round(edit_fraction, 6))
        # 4. Compose: I_{t-1} outside, the editor's (aligned) pixels inside, a seam without a step.
        if graded:
            E = into_grade(E, info)
            checks.update(graded=f"the edit mapped into the previous image's colours (a shift of {shift * 255:.0f}/255)",
                          grade=grade_record(info))
        if K.any():
            comp, w = compose(P, E, K, src, params.seam, px, checks)
            sel = w > 0
            view = out[sl]
            view[sel] = np.clip(np.round(comp[sel] * 255.0), 0, 255).astype(np.uint8)
            weight[sl] = w
            kept = w >= 1.0
            if kept.any():
                err = (view[kept].astype(np.float64) - E[kept] * 255.0) ** 2
                checks["edit_region_psnr"] = round(_psnr(float(err.mean())), 2)
    region_from = "the user's mask" if user is not None else "change mask" + (
        " + the turn's pasted pixels" if extra_region is not None else "")
    return _finish(prev, out, weight, {**base, "route": "pixels", "region_from": region_from,
                                       "edit_fraction": round(edit_fraction, 6), **checks}, al)


def guard_value(res: GuardResult | None, entry: dict | None = None) -> dict:
    """The Drift Guard node's record for History Append: {the post_edit entry..., "result": res}
    (res None when the guard was switched off)."""
    return {"step": GuardStep.name, **(entry if entry is not None else res.record), "result": res}


def guard_for_append(guard: Any) -> tuple[dict, dict]:
    """What History Append keeps for a Drift Guard value (guard_value): (the turn's masks — the
    kept-edit weights when the guard changed the image —, its meta.post_edit entry)."""
    if not isinstance(guard, dict) or guard.get("step") != GuardStep.name:
        raise InputError(f"'guard' must come from a Drift Guard node, got {type(guard).__name__}")
    res = guard.get("result")
    masks = {GUARD_MASK: res.turn_mask()} if isinstance(res, GuardResult) and res.applied else {}
    return masks, {k: v for k, v in guard.items() if k != "result"}


GUARD_WORK_PIXELS = 4_194_304   # a picture above this (4 MP) is guarded at a working resolution (see guard_pair)


def guard_images(previous: Any, edited: Any, *, user_mask: Any = None, extra_region: Any = None,
                 request: str = "", plan: Any = None, params: GuardParams = DEFAULT_GUARD,
                 work_pixels: int = GUARD_WORK_PIXELS, exact: Any = None) -> GuardResult:
    """The drift guard on two images (the node; any editor): the shared change record is taken
    from (or put into) provenance's cache, and the output's derived record is remembered there.
    An edit of another size is resized to I_{t-1}'s for the guard. The result's image and weight
    always have the size of the image it returns: I_{t-1}'s when it applied, the editor's own
    (not resized) when it stepped aside. exact: Reveal Composite's ExactPatch
    (respec/pixels/reveal.py) when it pasted this turn."""
    check_request(request or "", "the instruction")
    if plan is not None and not isinstance(plan, Plan):
        raise InputError(f"plan must come from a controller node (RESPEC_PLAN), got {type(plan).__name__}")
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
    change record at `size` (the history's) from provenance's cache; when the guard applied, the
    output's derived record is remembered there (remember_guarded).

    Above `work_pixels` the guard runs on both pictures scaled to the working size (the size the
    change record is analysed at: provenance.working_size) and its output is made at full size by
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

    def __call__(self, history: History, record: Any) -> tuple[Any, dict]:
        if not isinstance(history, History):
            raise InputError(f"the drift guard step needs a History, got {type(history).__name__}")
        prev = history.current.image
        size = prev.size
        img = record.image if isinstance(record.image, StoredImage) else StoredImage.of(np.asarray(record.image))
        if img.size != size or size != _history_size(history):
            return record.image, {"method": METHOD, "applied": False, "stepped_aside": True,
                                  "reason": "the edit or I_(t-1) has another size than the history: not aligned"}
        pasted = record.masks.get("reveal_source")
        exact = None
        if pasted is not None:      # Reveal's paste inside: I_{k-1}'s own pixels, not the colour-fitted ones
            exact = exact_patch(history, pasted, pasted.info)
        res = guard_pair(prev, img, _history_size(history), extra_region=pasted.mask if pasted is not None else None,
                         request=record.request, plan=record.plan, params=self.params, exact=exact)
        if not res.applied:
            return record.image, dict(res.record)
        record.masks[GUARD_MASK] = res.turn_mask()
        return Image.fromarray(res.image), dict(res.record)


def _history_size(history: History) -> tuple[int, int]:
    return history.turns[0].image.size

