"""Historical Reference Selection (paper §4.2, appendix C.3): which images the editor gets.

No model call: the plan already holds the controller's choice. The images go to the editor in
the plan's image_ids order ([restoration_source_id, identity_anchor_id]); the rewritten
instruction speaks of "the first image", so the order matters.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..history import History, StoredImage
from ..plan import Plan

# Selection rules (Selection.fallbacks).
IMAGE_ID_DROPPED = "image_id_not_in_history_dropped"      # an id outside 0..t-1 is left out
NO_VALID_IMAGE_ID = "no_valid_image_id_latest_image"      # nothing left: the latest image I_{t-1}


@dataclass(frozen=True)
class Selection:
    """The editor's images (in order), their ids, the current image I_{t-1} (its size is the
    output size), and the rules that fired."""

    images: list[StoredImage]
    ids: list[int]
    current: StoredImage
    fallbacks: list[str] = field(default_factory=list)
    dropped_ids: list[int] = field(default_factory=list)
    uses_history_reference: bool = False


def select_references(history: History, plan: Plan, use_history_reference: bool = True) -> Selection:
    """Images for the editor. On restoration turns with HRS on: the plan's image_ids that exist
    in the history, in order (none left: the latest image). Otherwise: the current image alone."""
    plan.check_made_for(history.next_turn)
    images = history.images
    latest = len(images) - 1
    current = images[latest]
    if not (use_history_reference and plan.is_restoration):
        return Selection([current], [latest], current)
    kept = [i for i in plan.image_ids if 0 <= i <= latest]
    dropped = [i for i in plan.image_ids if not 0 <= i <= latest]
    fallbacks = [IMAGE_ID_DROPPED] if dropped else []
    if not kept:
        fallbacks.append(NO_VALID_IMAGE_ID)
        kept = [latest]
    return Selection([images[i] for i in kept], kept, current, fallbacks, dropped, True)


class PlanSelector:
    """The paper's selector part (respec.turn.Selector): the plan's image_ids on restoration turns
    with HRS on, else the current image (select_references)."""

    name = "plan"

    def select(self, history: History, plan: Plan, *, use_history_reference: bool) -> Selection:
        """select_references' selection for the turn `plan` was made for."""
        return select_references(history, plan, use_history_reference)
