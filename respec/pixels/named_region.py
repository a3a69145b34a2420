"""The edit region a request names, for the Drift Guard's MASK (beyond the paper).

The change mask keeps whatever the editor changed: on a re-rendering editor that is the edit plus
every detail it re-drew elsewhere (a sign edit whose cat's eyes and fur came back re-drawn). The
request says what the turn changes ("change the sign's text": the sign). Where a segmenter found
that object (SAM3 on I_{t-1} and on I_t, graph side), the rule is:

    R = fill_holes( grow(O, margin) & C )

- O: the object's masks, in I_{t-1} and in I_t (carried into I_{t-1}'s frame with the turn's
  alignment), joined: an added object is found in I_t, a removed one in I_{t-1};
- grow(O, margin): O grown by `margin_frac` of the shorter side (a shadow, the hand holding it);
- C: the turn's change mask in I_{t-1}'s frame (the one History Append and the guard share);
- holes filled: a flat inside the change threshold missed stays the editor's.

R goes to the Drift Guard as its MASK: the editor's pixels inside R, I_{t-1}'s everywhere else. When
no object was found (a global request has no phrase; the segmenter found nothing) or R is empty (the
named object did not change), the result is an empty mask and the guard decides from its own change
mask, as without this step: a wrong or missing detection never removes more than the guard alone.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from PIL import Image
from scipy import ndimage

from ..errors import InputError
from ..history import StoredImage
from .alignment import warp
from .change_record import ChangeRecord
from .guard import guard_change
from .masks import dilate, mask_at

MARGIN_FRAC = 0.03   # the object mask is grown by this share of the shorter side ...
MIN_MARGIN_PX = 2    # ... and by at least this many px (a mask's edge is a pixel or two off)


@dataclass
class EditRegion:
    """The Drift Guard's mask for one turn (H×W bool in I_{t-1}'s frame; empty = the guard decides)
    and the record of how it was made."""

    mask: np.ndarray
    record: dict


def edit_region(previous: Any, edited: Any, phrase: str, object_masks: Sequence[Any] = (),
                margin_frac: float = MARGIN_FRAC) -> EditRegion:
    """The edit region of one turn by the module's rule.

    previous / edited: I_{t-1} and I_t (arrays, PIL or StoredImage; I_t is resized to I_{t-1}'s
    size when it differs). phrase: the object the request asks to change ('' for a global request).
    object_masks: the object's masks [in I_{t-1}, in I_t] (either may be missing or empty)."""
    if not 0.0 <= float(margin_frac) <= 0.5:
        raise InputError(f"margin must be between 0 and 0.5 of the shorter side, got {margin_frac}")
    p = StoredImage.of(previous)
    e = StoredImage.of(edited)
    if e.size != p.size:
        e = StoredImage.of(np.asarray(e.rgb().resize(p.size, Image.BILINEAR)))
    shape = (p.size[1], p.size[0])
    empty = np.zeros(shape, bool)
    record: dict = {"phrase": phrase, "margin_px": 0, "object_px": 0, "change_px": 0, "region_px": 0}
    if not phrase.strip():
        return EditRegion(empty, {**record, "used": False, "reason": "the request names no object (a global "
                                                                     "request): the guard decides alone"})
    masks = [mask_at(m, shape, "an object mask") for m in object_masks if m is not None]
    if len(masks) > 2:
        raise InputError(f"expected the object's masks in I_(t-1) and in I_t (2 at most), got {len(masks)}")
    change = ChangeRecord.of(guard_change(p, e))
    al = change.alignment
    inv = None if al.is_identity else al.inverse()
    C = change.mask if inv is None else warp(change.mask, inv, order=0)
    if len(masks) == 2 and inv is not None:   # the object as found in I_t, carried into I_(t-1)'s frame
        masks[1] = warp(masks[1], inv, order=0)
    O = np.logical_or.reduce(masks) if masks else empty
    margin = max(MIN_MARGIN_PX, round(float(margin_frac) * min(shape)))
    record.update(margin_px=margin, object_px=int(O.sum()), change_px=int(C.sum()))
    if not O.any():
        return EditRegion(empty, {**record, "used": False, "reason": f"{phrase!r} was not found: the guard "
                                                                     "decides from its change mask"})
    R = ndimage.binary_fill_holes(dilate(O, margin) & C)
    record.update(region_px=int(R.sum()), change_outside_px=int((C & ~R).sum()))
    if not R.any():
        return EditRegion(empty, {**record, "used": False, "reason": f"{phrase!r} did not change: the guard "
                                                                     "decides from its change mask"})
    return EditRegion(R, {**record, "used": True,
                          "reason": f"the change inside {phrase!r} (grown by {margin} px); "
                                    f"{record['change_outside_px']} changed px elsewhere go back to I_(t-1)"})
