"""Reading the controller's answer: appendix C.2 (parsing) and C.3 (fallbacks).

Every rule that fires is recorded by a stable name (the constants below) so a plan says how
it was obtained. Parsing never raises: any text gives a usable result. Ids are NOT clamped
here (C.3); the Reference Selector drops ids that do not exist.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

# How the JSON object was found (plan.meta["parse"]).
FOUND_FENCED = "fenced_json_block"
FOUND_FIRST_OBJECT = "first_json_object"
FOUND_NOTHING = "no_json"

# C.2 rules.
JSON_PARSE_FAILED = "json_parse_failed"                 # no JSON object: raw text becomes the instruction
RESULT_NOT_A_DICT = "result_not_a_dict"                 # JSON, but not an object: the user's request
SYNTHESIS_INSTRUCTION_MISSING = "synthesis_instruction_missing"  # -> the user's request
# C.3 rules (restoration turns).
IDENTITY_ANCHOR_ID_MISSING = "identity_anchor_id_missing"        # -> t-1
RESTORATION_SOURCE_ID_MISSING = "restoration_source_id_missing"  # -> 0
RESTORATION_REGION_EMPTY = "restoration_region_empty"            # -> None
IMAGE_IDS_MISSING = "image_ids_missing"                          # -> [source, anchor]
IMAGE_IDS_ENTRY_UNREADABLE = "image_ids_entry_unreadable"        # a non-integer entry is dropped

_FENCE = re.compile(r"```\s*json\s*\n?(.*?)```", re.DOTALL | re.IGNORECASE)
_FIRST_OBJECT = re.compile(r"\{.*\}", re.DOTALL)
_ID_TEXT = re.compile(r"\s*(?:image\s*|i_?)?(-?\d{1,9})\s*", re.IGNORECASE)


def _loads(text: str) -> tuple[bool, Any]:
    try:
        return True, json.loads(text, strict=False)
    except Exception:  # ValueError, RecursionError, ...: all mean "not JSON"
        return False, None


def _object_at_first_brace(text: str) -> tuple[bool, Any]:
    """The object that starts at the first "{" (trailing text allowed). Only the first brace:
    when that object is cut off, an inner object must not be mistaken for the answer."""
    start = text.find("{")
    if start == -1:
        return False, None
    try:
        return True, json.JSONDecoder(strict=False).raw_decode(text, start)[0]
    except Exception:
        return False, None


def extract_json(text: str) -> tuple[bool, Any, str]:
    """C.2: a fenced ```json block first, else the first JSON-like object in the text.

    Returns (found, value, how) with how one of FOUND_FENCED, FOUND_FIRST_OBJECT, FOUND_NOTHING.
    A fenced block that is not valid JSON falls through to the object search."""
    text = text if isinstance(text, str) else str(text)
    for m in _FENCE.finditer(text):
        ok, value = _loads(m.group(1).strip())
        if ok:
            return True, value, FOUND_FENCED
    m = _FIRST_OBJECT.search(text)
    if m:
        ok, value = _loads(m.group(0))  # greedy: first "{" to last "}"
        if ok:
            return True, value, FOUND_FIRST_OBJECT
        ok, value = _object_at_first_brace(text)  # e.g. two objects in one answer
        if ok:
            return True, value, FOUND_FIRST_OBJECT
    return False, None, FOUND_NOTHING


def as_image_id(value: Any) -> int | None:
    """An image id from the model's value: ints, integral floats, "2", "Image 2", "I_2".
    None when absent or unreadable (then the C.3 "missing" rule applies). Never clamped."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if math.isfinite(value) and value.is_integer() and abs(value) < 2 ** 31 else None
    if isinstance(value, str):
        m = _ID_TEXT.fullmatch(value)
        return int(m.group(1)) if m else None
    return None


def _nonempty_text(value: Any) -> str | None:
    if isinstance(value, str) and value.strip():
        return value.strip()
    return None


@dataclass
class Parsed:
    """The plan fields read from one answer, and the rules that fired."""

    synthesis_instruction: str
    reasoning: Any = None
    identity_anchor_id: int | None = None
    restoration_source_id: int | None = None
    restoration_region: str | None = None
    image_ids: tuple[int, ...] = ()
    preservation_target: str | None = None
    preservation_target_from: str | None = None
    fallbacks: list[str] = field(default_factory=list)
    found: str = FOUND_NOTHING


def _instruction(obj: dict, user_instruction: str, fallbacks: list[str]) -> str:
    text = _nonempty_text(obj.get("synthesis_instruction"))
    if text is None:
        fallbacks.append(SYNTHESIS_INSTRUCTION_MISSING)
        return user_instruction
    return text


def _raw_as_instruction(raw: str, user_instruction: str, fallbacks: list[str]) -> str:
    """C.2: on a parse failure the raw answer is the instruction; an empty answer has none,
    so the user's request is used instead (and recorded)."""
    text = _nonempty_text(raw)
    if text is None:
        fallbacks.append(SYNTHESIS_INSTRUCTION_MISSING)
        return user_instruction
    return text


def preservation_target(reasoning: Any, restoration_region: str | None) -> tuple[str | None, str | None]:
    """D_t: the target named in the reasoning (target_evidence, else uncovered_region), else
    the restoration_region. Returns (text, where it came from)."""
    if isinstance(reasoning, dict):
        for key in ("target_evidence", "uncovered_region"):
            text = _nonempty_text(reasoning.get(key))
            if text is not None:
                return text, f"reasoning.{key}"
    if restoration_region:
        return restoration_region, "restoration_region"
    return None, None


def _read_answer(raw, user_instruction: str):
    """(object, how it was found, None), or (None, how, the C.2 fallback Parsed) when no JSON is found."""
    raw = raw if isinstance(raw, str) else str(raw)
    found, obj, how = extract_json(raw)
    if found:
        return obj, how, None
    fallbacks = [JSON_PARSE_FAILED]
    return None, how, Parsed(_raw_as_instruction(raw, user_instruction, fallbacks), fallbacks=fallbacks, found=how)


def parse_restoration(raw: str, turn: int, user_instruction: str) -> Parsed:
    """Read a restoration answer at turn t = `turn` (C.2 + C.3)."""
    obj, how, failed = _read_answer(raw, user_instruction)
    if failed is not None:
        return failed  # C.2 fallback object: no ids, no images, the raw answer as the instruction
    fallbacks: list[str] = []
    if not isinstance(obj, dict):
        fallbacks += [RESULT_NOT_A_DICT, SYNTHESIS_INSTRUCTION_MISSING]
        obj = {}
    anchor = as_image_id(obj.get("identity_anchor_id"))
    if anchor is None:
        fallbacks.append(IDENTITY_ANCHOR_ID_MISSING)
        anchor = turn - 1
    source = as_image_id(obj.get("restoration_source_id"))
    if source is None:
        fallbacks.append(RESTORATION_SOURCE_ID_MISSING)
        source = 0
    region_value = obj.get("restoration_region")
    if isinstance(region_value, (dict, list)):
        region_value = json.dumps(region_value) if region_value else None
    elif region_value is not None and not isinstance(region_value, str):
        region_value = str(region_value)
    region = _nonempty_text(region_value)
    if region is None:
        fallbacks.append(RESTORATION_REGION_EMPTY)
    ids_value = obj.get("image_ids")
    if ids_value is not None and not isinstance(ids_value, list):
        ids_value = [ids_value]
    ids: list[int] = []
    for v in ids_value or []:
        i = as_image_id(v)
        if i is None:
            if IMAGE_IDS_ENTRY_UNREADABLE not in fallbacks:
                fallbacks.append(IMAGE_IDS_ENTRY_UNREADABLE)
        else:
            ids.append(i)
    if not ids:
        fallbacks.append(IMAGE_IDS_MISSING)
        ids = [source, anchor]
    if RESULT_NOT_A_DICT in fallbacks:
        instruction = user_instruction
    else:
        instruction = _instruction(obj, user_instruction, fallbacks)
    reasoning = obj.get("reasoning")
    target, target_from = preservation_target(reasoning, region)
    return Parsed(instruction, reasoning, anchor, source, region, tuple(ids), target, target_from, fallbacks, how)


def parse_midturn(raw: str, user_instruction: str) -> Parsed:
    """Read a mid-turn rewrite answer (C.2): only reasoning and synthesis_instruction matter."""
    obj, how, failed = _read_answer(raw, user_instruction)
    if failed is not None:
        return failed
    fallbacks: list[str] = []
    if not isinstance(obj, dict):
        fallbacks += [RESULT_NOT_A_DICT, SYNTHESIS_INSTRUCTION_MISSING]
        return Parsed(user_instruction, fallbacks=fallbacks, found=how)
    instruction = _instruction(obj, user_instruction, fallbacks)
    return Parsed(instruction, obj.get("reasoning"), fallbacks=fallbacks, found=how)
