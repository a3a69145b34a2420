"""JSON schemas of the two answers (figures 12 and 13), for constrained decoding.

The schemas carry exactly the paper's fields. They only guide decoding: the parser
(parsing.py) still applies the C.2 / C.3 rules to whatever text comes back, because a
backend may not constrain (or may be cut off by the token cap).
"""
from __future__ import annotations

import copy

TURN_LABELS = ["ADD-INTO-REGION", "MODIFY-IN-REGION", "UNRELATED"]
ACTION_TYPES = ["Add", "Modify", "Replace", "Style-transfer", "Other"]


def _str() -> dict:
    return {"type": "string"}


def restoration_schema(turn: int) -> dict:
    """Schema of the restoration answer at turn N = `turn` (ids limited to 0..N-1,
    one classification per earlier turn T1..T{N-1})."""
    last = max(turn - 1, 0)
    image_id = {"type": "integer", "minimum": 0, "maximum": last}
    turns = [f"T{k}" for k in range(1, max(turn, 1))]
    per_turn = {"type": "object", "properties": {k: {"enum": TURN_LABELS} for k in turns},
                "required": turns, "additionalProperties": False}
    reasoning = {
        "type": "object",
        "properties": {
            "occluder": _str(),
            "uncovered_region": _str(),
            "target_evidence": _str(),
            "add_into_region_turn": {"type": "integer", "minimum": 0, "maximum": last},
            "per_turn_classification": per_turn,
            "notes": _str(),
        },
        "required": ["occluder", "uncovered_region", "target_evidence", "add_into_region_turn",
                     "per_turn_classification", "notes"],
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "properties": {
            "reasoning": reasoning,
            "identity_anchor_id": image_id,
            "restoration_source_id": image_id,
            "restoration_region": _str(),
            "image_ids": {"type": "array", "items": image_id, "minItems": 2, "maxItems": 2},
            "synthesis_instruction": _str(),
        },
        "required": ["reasoning", "identity_anchor_id", "restoration_source_id", "restoration_region",
                     "image_ids", "synthesis_instruction"],
        "additionalProperties": False,
    }


def midturn_schema() -> dict:
    """Schema of the mid-turn rewrite answer."""
    return {
        "type": "object",
        "properties": {
            "reasoning": {
                "type": "object",
                "properties": {"action_type": {"enum": ACTION_TYPES}, "notes": _str()},
                "required": ["action_type", "notes"],
                "additionalProperties": False,
            },
            "synthesis_instruction": _str(),
        },
        "required": ["reasoning", "synthesis_instruction"],
        "additionalProperties": False,
    }


def bound_strings(schema: dict, max_chars: int) -> dict:
    """A copy of `schema` whose every string has maxLength `max_chars` (0: unchanged).

    Bounding strings guarantees a constrained answer closes within a small token cap."""
    if not max_chars or max_chars <= 0:
        return schema
    out = copy.deepcopy(schema)

    def walk(node):
        if isinstance(node, dict):
            if node.get("type") == "string":
                node["maxLength"] = int(max_chars)
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(out)
    return out
