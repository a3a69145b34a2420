"""Exact undo from history: take back what an earlier turn added, from the history alone (issue 43,
beyond the paper).

A request at turn t that removes what turn k of this conversation added has its answer in the
history: I_{k-1}, the picture just before turn k, shows what turn k covered, and the turns' change
records say where turn k changed the picture and whether any turn since changed it again. When no
later kept turn did, the kept picture is

    I_t = I_{t-1}, with the pixels of U taken from I_{k-1}

    U = (C_k | unstable_k) grown by the blend margin (UndoParams.margin_px), in I_{t-1}'s frame:
        what turn k changed (its change mask, and the blocks it moved or redrew beyond it: a
        re-rendering editor's add turn covers most of the picture, and all of it comes back)

exactly (I_{k-1}'s own pixels, no colour fit, no blend) when the frames of I_{k-1} and I_{t-1}
agree (the composed alignment of turns k..t-1 is the identity), else I_{k-1} warped into I_{t-1}'s
frame by that alignment (Keys cubic). No editor is needed; the step that reads the request is
respec/post_edit/undo_step.py.

When the frames agree, U also holds every other pixel turn k changed at all (I_k != I_{k-1}: the
editor's drift below the change mask's threshold, a Drift Guard's seam band and colour correction)
that no turn since changed (`unchanged_since(k)`): turn k is taken back whole, so the kept picture
is I_{k-1} wherever the history allows, not I_{k-1} inside C_k with turn k's drift around it (on
the real Kontext chains that drift alone held a removal near 50 dB; with it taken back, at 100).
When turn k is the latest turn (k = t-1), turn k taken back whole is I_{k-1} itself, in its own
frame: an add turn that also re-framed the picture (a re-rendering editor whose output the Drift
Guard left: Gemini shifts and zooms) is taken back with its frame, where warping I_{k-1} into
I_k's frame would leave a border it never showed. (With the frames agreeing it is the same
picture as the rule above.)

The same request asked again of the same picture has its answer in the history too
(`repeat_from_history`): after an exact undo brought I_{k-1} back, "add a hat" asked once more, word
for word, is answered with I_k, the picture the conversation kept for it at turn k. The editor would
draw the hat anew, and the guard would patch a new drawing into a picture the editor drifted from.

The history cannot answer alone (`applied` False, the reason says which) when:
- a later turn j (k < j < t) changed part of U (its change mask C_j or its unstable blocks, carried
  into I_{t-1}'s frame): I_{k-1}'s pixels there would take back turn j's edit too; `touched` gives
  the share of U each such turn changed;
- I_{k-1} does not show part of U (a zoom-out or shift since exposed a border it never had);
- turn k redrew blocks beyond its edit (a re-rendering editor) and the frame moved since: I_{k-1}'s
  blocks warped into the re-rendered rest would leave block edges (`redrawn_beyond`);
- I_{k-1}, I_k or I_{t-1} has another size than the history (masks and pixels would not line up);
- the answer fails its verification (respec/pixels/verify: old pixels where I_{k-1}'s frame has
  none, an island or an outline of old content; the reason names the check). A verification that
  mends hands back the mended picture, and the record says so (`verify`).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ..errors import InputError
from ..history import History, TurnMask
from .alignment import IDENTITY, Alignment, support, warp_float
from .masks import dilate, history_size
from .provenance import Provenance, provenance_of
from .verify import Composite, verify

METHOD = "history-undo-v1"
REPEAT_METHOD = "history-repeat-v1"   # the same request asked again of the same picture (repeat_from_history)
UNDO_SOURCE = "undo_source"     # the turn's mask: the pixels taken from I_{k-1}
MARGIN_FRAC = 0.01              # the blend margin around C_k: this share of the shorter side ...
MIN_MARGIN_PX = 3               # ... at least this many px (an object's soft rim and shadow outlive its mask)


@dataclass(frozen=True)
class UndoParams:
    """Settings of `undo_from_history`."""

    margin_frac: float = MARGIN_FRAC    # U = C_k grown by this share of the shorter side ...
    min_margin_px: int = MIN_MARGIN_PX  # ... at least this many px
    with_unstable: bool = True          # turn k's unstable blocks belong to what it changed
    latest_whole: bool = True           # k = t-1: I_{k-1} itself (off: the region rule, for measuring it)

    def __post_init__(self):
        if not 0.0 <= float(self.margin_frac) < 0.5:
            raise InputError(f"UndoParams.margin_frac must be in [0, 0.5), got {self.margin_frac!r}")
        if int(self.min_margin_px) < 0:
            raise InputError(f"UndoParams.min_margin_px must be >= 0, got {self.min_margin_px!r}")

    def margin_px(self, size: tuple[int, int]) -> int:
        """The blend margin in px for a history of `size` (w, h)."""
        return max(int(self.min_margin_px), int(round(self.margin_frac * min(size))))


DEFAULT_UNDO = UndoParams()


@dataclass(frozen=True, eq=False)
class UndoResult:
    """What `undo_from_history` did: the kept image (uint8 H×W×3, I_{t-1}'s frame; None when the
    history could not answer), the region U taken from I_{k-1}, and the evidence."""

    applied: bool
    reason: str
    covering_turn: int
    image: np.ndarray | None = None
    region: np.ndarray | None = None                 # bool H×W in I_{t-1}'s frame
    alignment: Alignment | None = None               # I_{k-1} -> I_{t-1}
    margin_px: int = 0
    touched: dict = field(default_factory=dict)      # {j: share of U turn j changed}, k < j < t
    whole: bool = False                              # k = t-1: the kept image is I_{k-1} itself
    verify: dict = field(default_factory=dict)       # the verification's record (respec/pixels/verify)
    repeated: bool = False                           # repeat_from_history: the kept image is I_k itself

    @property
    def source_id(self) -> int:
        """The image the pixels come from: I_{k-1} (a repeat: I_k)."""
        return self.covering_turn if self.repeated else self.covering_turn - 1

    @property
    def method(self) -> str:
        """The record's method: the take-back's, or the repeat's."""
        return REPEAT_METHOD if self.repeated else METHOD

    @property
    def exact(self) -> bool:
        """Whether the pixels are I_{k-1}'s own (the frames agree: no resampling)."""
        return self.applied and self.alignment is not None and self.alignment.is_identity

    def record(self) -> dict:
        """JSON-able: method, applied, reason, the covering turn, source, region size, margin, exact,
        the alignment and the later turns that changed the region."""
        out = {"method": self.method, "applied": self.applied, "reason": self.reason,
               "covering_turn": self.covering_turn, "source_id": self.source_id, "margin_px": self.margin_px,
               "exact": self.exact, "whole": self.whole}
        if self.region is not None:
            out["region_px"] = int(self.region.sum())
            out["region_share"] = round(float(self.region.mean()), 6)
        if self.alignment is not None:
            out["alignment"] = self.alignment.record()
        if self.touched:
            out["touched_by"] = {str(j): round(s, 6) for j, s in self.touched.items()}
        if self.verify:
            out["verify"] = self.verify
        return out

    def turn_mask(self) -> TurnMask | None:
        """The `undo_source` mask to keep with the turn (None when nothing was taken)."""
        if not self.applied or self.region is None:
            return None
        return TurnMask.from_mask(self.region, {"method": self.method, "source_id": self.source_id,
                                                "exact": self.exact})


def undo_region(prov: Provenance, k: int, frame: int, margin: int, with_unstable: bool = True) -> np.ndarray:
    """U: what turn k changed (C_k, with its unstable blocks when `with_unstable`) grown by `margin`
    px in I_k's frame, carried into I_frame's (bool H×W)."""
    changed = prov.changes[k]
    if with_unstable and k < len(prov.unstable):
        unstable = prov.unstable[k]
        if unstable is not None:
            changed = changed | unstable
    return prov.in_frame(dilate(changed, margin), k, frame)


def redrawn_beyond(prov: Provenance, k: int, frame: int, margin: int) -> int:
    """How many px of I_frame's frame lie in blocks turn k redrew (its unstable blocks) beyond its
    change mask grown by `margin`: a re-rendering editor's add turn. Pasting I_{k-1}'s pixels back
    on those blocks while the rest keeps the re-render leaves a block patchwork (seen on a Gemini
    chain), so a warped answer refuses then; with agreeing frames the whole turn comes back instead."""
    unstable = prov.unstable[k] if k < len(prov.unstable) else None
    if unstable is None:
        return 0
    beyond = unstable & ~dilate(prov.changes[k], margin)
    return int(prov.in_frame(beyond, k, frame).sum()) if beyond.any() else 0


def later_changes(prov: Provenance, k: int, frame: int, region: np.ndarray) -> dict[int, float]:
    """{j: the share of `region` (I_frame's frame) that turn j changed or redrew}, for the turns
    k < j <= frame that touched it."""
    n = int(region.sum())
    out: dict[int, float] = {}
    if n == 0:
        return out
    for j in range(k + 1, frame + 1):
        m = prov.changes[j]
        if j < len(prov.unstable) and prov.unstable[j] is not None:
            m = m | prov.unstable[j]
        hit = int((prov.in_frame(m, j, frame) & region).sum())
        if hit:
            out[j] = hit / n
    return out


def undo_from_history(history: History, covering_turn: int, params: UndoParams = DEFAULT_UNDO) -> UndoResult:
    """Take back what turn k = `covering_turn` added, for the turn about to be appended to `history`
    (see the module docstring): I_{t-1} with U from I_{k-1}, or a refusal that says why."""
    t = history.next_turn
    k = int(covering_turn)
    if not 1 <= k < t:
        raise InputError(f"the covering turn must be one of 1..{t - 1} (an earlier edit), got {covering_turn!r}")
    size = history_size(history)
    margin = params.margin_px(size)
    for i in (k - 1, k, t - 1):
        if history.image(i).size != tuple(size):
            return UndoResult(False, f"I_{i} has another size ({history.image(i).size}) than the history "
                                     f"({tuple(size)}): its pixels do not line up", k, margin_px=margin)
    prov = provenance_of(history)
    region = undo_region(prov, k, t - 1, margin, params.with_unstable)
    if not region.any():
        return UndoResult(False, f"turn {k} changed no pixel: nothing to take back", k, margin_px=margin)
    touched = later_changes(prov, k, t - 1, region)
    if touched:
        turns = ", ".join(f"turn {j} changed {s:.1%}" for j, s in touched.items())
        return UndoResult(False, f"a later turn changed the region turn {k} covered (grown by {margin} px): {turns}",
                          k, region=region, margin_px=margin, touched=touched)
    a = prov.alignment(k - 1, t - 1)
    if k == t - 1 and params.latest_whole:
        return verified(history, UndoResult(True, f"turn {k} is the latest: taken back whole, I_{k - 1} itself", k,
                                            image=np.array(history.image(k - 1).array[..., :3], copy=True),
                                            region=np.ones(region.shape, bool), alignment=IDENTITY,
                                            margin_px=margin, whole=True))
    if prov.alignment(k - 1, k).is_identity and prov.alignment(k, t - 1).is_identity:
        region = region | (turn_pixels(history, k) & prov.unchanged_since(k, t - 1))
    if not a.is_identity:
        redrawn = redrawn_beyond(prov, k, t - 1, margin)
        if redrawn:
            return UndoResult(False, f"turn {k} redrew {redrawn} px beyond its edit and the frame moved since: I_{k - 1}'s "
                                     f"blocks warped in would stand out of the re-rendered rest as block edges",
                              k, region=region, alignment=a, margin_px=margin)
    unseen = region & ~support(a, region.shape)
    if unseen.any():
        return UndoResult(False, f"I_{k - 1} does not show {int(unseen.sum())} px of the region (the frame moved "
                                 f"since)", k, region=region, alignment=a, margin_px=margin)
    image = take_from(history.image(t - 1).array, history.image(k - 1).array, region, a)
    how = "exactly (the frames agree)" if a.is_identity else "aligned (I_{k-1} warped into I_{t-1}'s frame)"
    return verified(history, UndoResult(True, f"I_{t - 1} with turn {k}'s region taken from I_{k - 1} {how}", k,
                                        image=image, region=region, alignment=a, margin_px=margin))


def repeat_from_history(history: History, k: int) -> UndoResult:
    """Turn k's answer again, for the turn about to be appended to `history` whose request is turn k's
    asked again: when I_{t-1} is I_{k-1} pixel for pixel (an exact undo brought the picture back), the
    history holds the answer to that request on that picture, I_k, the picture the conversation
    kept then. The kept image is I_k itself (its frame and size); U is every pixel where it differs
    from I_{t-1}. Nothing is composed, so there is nothing to verify: I_k was handed back at turn k.
    A refusal (`applied` False) says why: another picture, or turn k changed nothing."""
    t = history.next_turn
    k = int(k)
    if not 1 <= k < t:
        raise InputError(f"the repeated turn must be one of 1..{t - 1} (an earlier edit), got {k!r}")
    before, answer, now = history.image(k - 1), history.image(k), history.image(t - 1)
    if before != now:
        return UndoResult(False, f"I_{t - 1} is not I_{k - 1}: turn {k}'s answer was made from another picture",
                          k, repeated=True)
    if answer.array.shape != now.array.shape:
        region = np.ones(answer.array.shape[:2], bool)
    else:
        region = np.any(answer.array[..., :3] != now.array[..., :3], axis=-1)
    if not region.any():
        return UndoResult(False, f"turn {k} changed no pixel: nothing to repeat", k, repeated=True)
    return UndoResult(True, f"the same request as turn {k} on the same picture (I_{t - 1} is I_{k - 1}): I_{k} again",
                      k, image=np.array(answer.array[..., :3], copy=True), region=region, alignment=IDENTITY,
                      whole=True, repeated=True)


def verified(history: History, res: UndoResult) -> UndoResult:
    """The applied undo `res` after its verification (respec/pixels/verify): kept = its image,
    fallback = I_{t-1} (the editor then runs), old = I_{k-1} warped into I_{t-1}'s frame, written =
    U. A failure is a refusal that names the check (the editor answers); a mend hands back the
    mended picture with U less the mended pixels. The verdict's record is `res.verify`."""
    t, k = history.next_turn, res.covering_turn
    prev = np.ascontiguousarray(history.image(t - 1).array[..., :3])
    src = np.ascontiguousarray(history.image(k - 1).array[..., :3])
    a = res.alignment if res.alignment is not None else IDENTITY
    old = src if a.is_identity else np.clip(np.round(warp_float(src, a) * 255.0), 0, 255).astype(np.uint8)
    valid = None if a.is_identity else support(a, res.region.shape)
    verdict = verify(Composite("undo", np.ascontiguousarray(res.image[..., :3]), prev, old,
                               res.region.astype(np.float32), valid))
    if not verdict.passed:
        return replace(res, applied=False, reason=verdict.reason(), image=None, verify=verdict.record())
    if not verdict.mended:
        return replace(res, verify=verdict.record())
    region = res.region & (verdict.written > 0)
    return replace(res, reason=f"{res.reason}; {verdict.findings[0].check} mended", image=verdict.image,
                   region=region, verify=verdict.record())


def turn_pixels(history: History, k: int) -> np.ndarray:
    """bool H×W: the pixels turn k changed at all (I_k != I_{k-1}, same frame and size)."""
    before, after = history.image(k - 1).array, history.image(k).array
    return np.any(before[..., :3] != after[..., :3], axis=-1)


def take_from(current: np.ndarray, source: np.ndarray, region: np.ndarray, alignment: Alignment) -> np.ndarray:
    """`current` (uint8 H×W×C) with `source`'s pixels inside `region`: its own pixels when the
    alignment is the identity, else `source` warped into `current`'s frame (Keys cubic, rounded),
    made only on the region's bounding box. A new uint8 H×W×3 array."""
    out = np.array(np.asarray(current)[..., :3], copy=True)
    src = np.asarray(source)[..., :3]
    if alignment.is_identity:
        out[region] = src[region]
        return out
    ys, xs = np.nonzero(region)
    box = (int(ys.min()), int(ys.max()) + 1, int(xs.min()), int(xs.max()) + 1)
    y0, y1, x0, x1 = box
    warped = warp_float(src, alignment, box=box, order=3)
    pixels = np.clip(np.round(warped * 255.0), 0, 255).astype(np.uint8)
    view = out[y0:y1, x0:x1]
    sub = region[y0:y1, x0:x1]
    view[sub] = pixels[sub]
    return out
