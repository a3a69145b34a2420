"""RESPEC_PLAN: the controller's parsed decision for one turn (paper §4, appendix C.1)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Plan:
    """One turn's plan. Made by one VLM call (or none on turn 1 / skipped turns).

    Field names follow the paper's JSON (appendix C.1). `image_ids` is the order in which
    the editor receives the reference images: [restoration_source_id, identity_anchor_id].
    """

    turn: int                                   # t, the turn being edited (1-based)
    user_instruction: str                       # P_t
    synthesis_instruction: str                  # the rewritten instruction (~P_t)
    is_restoration: bool = False
    preservation_target: str | None = None      # D_t
    restoration_source_id: int | None = None
    identity_anchor_id: int | None = None
    restoration_region: str | None = None
    image_ids: tuple[int, ...] = ()
    reasoning: Any = None                       # dict from the model, or None
    raw_text: str = ""                          # the VLM's raw answer, kept for audit
    fallbacks: tuple[str, ...] = ()             # names of the C.2/C.3 rules that fired
    vlm_called: bool = False
    controller: str = ""                        # backend description, e.g. "qwen3-vl:/path"
    seconds: float = 0.0
    meta: dict = field(default_factory=dict)    # anything else (restoration-mode source, ...)

    def to_dict(self) -> dict:
        """JSON-able (tuples as lists), the inverse of `from_dict`."""
        d = asdict(self)
        d["image_ids"] = list(self.image_ids)
        d["fallbacks"] = list(self.fallbacks)
        return d

    def summary(self) -> dict:
        """The fields a timeline shows (the raw VLM text and the reasoning stay out: long)."""
        return {"turn": self.turn, "is_restoration": self.is_restoration,
                "preservation_target": self.preservation_target,
                "restoration_source_id": self.restoration_source_id,
                "identity_anchor_id": self.identity_anchor_id,
                "restoration_region": self.restoration_region,
                "image_ids": list(self.image_ids),
                "synthesis_instruction": self.synthesis_instruction,
                "fallbacks": list(self.fallbacks), "vlm_called": self.vlm_called,
                "controller": self.controller,
                # the turn the provenance selector found covering the target (what its fallbacks speak of)
                "covering_turn": (self.meta.get("provenance") or {}).get("turn")}

    @classmethod
    def from_dict(cls, d: dict) -> "Plan":
        """A Plan from `to_dict`'s output; a ValueError on fields it does not know."""
        known = {f for f in cls.__dataclass_fields__}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown plan fields {sorted(unknown)}")
        d = dict(d)
        d["image_ids"] = tuple(d.get("image_ids") or ())
        d["fallbacks"] = tuple(d.get("fallbacks") or ())
        return cls(**d)
