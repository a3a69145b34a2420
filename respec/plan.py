"""RESPEC_PLAN: the controller's parsed decision for one turn (paper §4, appendix C.1).

In memory a Plan is typed: what the provenance selector located (`provenance`), a scope the plan
gives the edit (`edit_scope`) and the controller calls the turn made (`vlm_calls`) are fields. On
the wire and in the store (`to_dict` / `from_dict`) they stay where they always were, as the keys
"provenance", "edit_scope" and "vlm_calls" of the plan's `meta` object, so stored sessions,
results rows and the panel read the same JSON; `meta` itself holds only the untyped rest.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .errors import InputError

# The typed fields' keys in the wire form's "meta" object.
PROVENANCE = "provenance"
EDIT_SCOPE = "edit_scope"
VLM_CALLS = "vlm_calls"
TYPED_META_KEYS = (PROVENANCE, EDIT_SCOPE, VLM_CALLS)
GLOBAL_SCOPE = "global"   # edit_scope: the whole picture may change (the Drift Guard steps aside)


@dataclass(frozen=True)
class ProvenanceRecord:
    """Where the provenance selector located the covering turn k of a restoration turn
    (respec/controller/covering.py's CoveringTurn, rounded for keeping with the plan)."""

    turn: int | None                              # k (None: no earlier turn qualifies)
    candidates: tuple[int, ...] = ()              # every turn the evidence allowed, oldest first
    evidence: str = "none"                        # "request+provenance" | "request" | "provenance" | "none"
    ambiguous: bool = False
    reason: str = ""
    changed: tuple[tuple[int, float], ...] = ()   # (k, share of the image turn k changed) per candidate
    objects: tuple[dict, ...] = ()                # the additions the request names (object_turns records)

    @property
    def source_id(self) -> int | None:
        """restoration_source_id = k - 1."""
        return None if self.turn is None else self.turn - 1

    def to_dict(self) -> dict:
        """The wire form (plan.meta["provenance"]), the inverse of `from_dict`."""
        return {"turn": self.turn, "candidates": list(self.candidates), "evidence": self.evidence,
                "ambiguous": self.ambiguous, "reason": self.reason,
                "changed": {str(k): share for k, share in self.changed},
                "objects": [dict(o) for o in self.objects], "source_id": self.source_id}

    @classmethod
    def from_dict(cls, d: dict) -> "ProvenanceRecord":
        """A record from `to_dict`'s output (source_id is derived from the turn); a ValueError on
        fields it does not know."""
        if not isinstance(d, dict):
            raise ValueError(f"a plan's provenance must be a JSON object, got {type(d).__name__}")
        unknown = set(d) - {"turn", "candidates", "evidence", "ambiguous", "reason", "changed", "objects",
                            "source_id"}
        if unknown:
            raise ValueError(f"unknown provenance fields {sorted(unknown)}")
        turn = d.get("turn")
        return cls(turn=None if turn is None else int(turn), candidates=tuple(int(k) for k in d.get("candidates") or ()),
                   evidence=str(d.get("evidence", "none")), ambiguous=bool(d.get("ambiguous", False)),
                   reason=str(d.get("reason", "")),
                   changed=tuple((int(k), share) for k, share in (d.get("changed") or {}).items()),
                   objects=tuple(dict(o) for o in d.get("objects") or ()))


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
    provenance: ProvenanceRecord | None = None  # the covering turn the provenance selector located
    edit_scope: str | None = None               # GLOBAL_SCOPE: the plan says the edit is global
    vlm_calls: int | None = None                # controller calls this turn made (None: not recorded)

    def __post_init__(self):
        typed = [k for k in TYPED_META_KEYS if k in (self.meta or {})]
        if typed:
            # One place for each: a key in meta beside the field would be read by some and not others.
            raise ValueError(f"plan.meta holds {typed}: pass them as the Plan fields of those names "
                             "(Plan.from_dict reads them from a wire form's meta)")

    def check_made_for(self, next_turn: int) -> None:
        """InputError unless this plan was made for turn `next_turn` (its history's next turn)."""
        if self.turn != next_turn:
            raise InputError(f"the plan was made for turn {self.turn}, but this history's next turn is {next_turn}")

    def to_dict(self) -> dict:
        """JSON-able (tuples as lists), the inverse of `from_dict`: the typed fields go back into
        "meta" under their keys (after the untyped entries), so the wire form is the stored one."""
        d = asdict(self)
        for key in TYPED_META_KEYS:
            del d[key]
        d["image_ids"] = list(self.image_ids)
        d["fallbacks"] = list(self.fallbacks)
        if self.provenance is not None:
            d["meta"][PROVENANCE] = self.provenance.to_dict()
        if self.edit_scope is not None:
            d["meta"][EDIT_SCOPE] = self.edit_scope
        if self.vlm_calls is not None:
            d["meta"][VLM_CALLS] = self.vlm_calls
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
                "covering_turn": self.provenance.turn if self.provenance is not None else None}

    @classmethod
    def from_dict(cls, d: dict) -> "Plan":
        """A Plan from `to_dict`'s output (the typed fields read from "meta"); a ValueError on
        fields it does not know."""
        known = set(cls.__dataclass_fields__) - set(TYPED_META_KEYS)
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown plan fields {sorted(unknown)}")
        d = dict(d)
        d["image_ids"] = tuple(d.get("image_ids") or ())
        d["fallbacks"] = tuple(d.get("fallbacks") or ())
        meta = d.get("meta")
        meta = dict(meta) if isinstance(meta, dict) else {} if meta is None else meta
        provenance, scope, calls = ((meta.pop(key, None) for key in TYPED_META_KEYS) if isinstance(meta, dict)
                                    else (None, None, None))
        d["meta"] = meta
        return cls(**d, provenance=None if provenance is None else ProvenanceRecord.from_dict(provenance),
                   edit_scope=None if scope is None else str(scope), vlm_calls=None if calls is None else int(calls))
