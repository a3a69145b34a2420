"""Reading the controller's answer: appendix C.2 (parsing) and C.3 (fallbacks).

Every rule that fires is recorded by a stable name (the constants below) so a plan says how
it was obtained. Parsing never raises: any text gives a usable result. Ids are NOT clamped
here (C.3); the Reference Selector drops ids that do not exist.

C.2 then C.3, in that order, on every answer: a parse failure first becomes C.2's fallback
object (ids None, image_ids [], the raw answer as the instruction) and, on a restoration turn,
C.3 then fills it like any other incomplete answer (anchor t-1, source 0, image_ids
[source, anchor]); every rule that fired is in `fallbacks`.

Any text is read in time linear in its length, and what a plan keeps from the model is bounded
(see the MAX_* sizes, each including the TRUNCATED marker; cut fields are named in
`Parsed.truncated`) and encodable (lone UTF-16
surrogates, e.g. from a "\\ud800" escape, become U+FFFD), so a hostile answer cannot crash
a later step (serialising the plan, the store, the results file).
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from ..text import MAX_REQUEST_BYTES, cut_bytes, safe_text

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

# What a plan keeps from the model (a normal answer under the token cap is a few kB).
MAX_RAW_CHARS = 65_536           # plan.raw_text, kept for audit
MAX_INSTRUCTION_CHARS = 8_192    # synthesis_instruction (editors' text encoders read far less) ...
MAX_INSTRUCTION_BYTES = MAX_REQUEST_BYTES   # ... and at most this many UTF-8 bytes, the request's own limit,
                                            # so History Append keeps any instruction a plan sends
MAX_FIELD_CHARS = 2_048          # restoration_region, preservation target
MAX_REASONING_CHARS = 16_384     # reasoning, as JSON text
MAX_REASONING_DEPTH = 8          # deeper reasoning objects are kept as (capped) JSON text
MAX_ID_CHARS = 32                # an id written as text ("Image 2")
# An id too large to store (SQLite, ComfyUI's INT, 32-bit consumers) is kept as this capped marker
# with its sign: never an image of the pool, so the editor-ordering rule of C.3 drops it as out of
# range, exactly as it drops 7 in a 4-image history (an id is not "missing" because it is large).
ID_CAP = 2 ** 31 - 1
MAX_IMAGE_IDS = 64               # image_ids entries read (the paper's plans hold two)
MAX_FENCED_BLOCKS = 32           # ```json blocks tried before the object search
TRUNCATED = "...[truncated]"

_FENCE_OPEN = re.compile(r"```\s*json", re.IGNORECASE)
_ID_TEXT = re.compile(r"\s*(?:image\s*|i_?)?(-?\d{1,30})\s*", re.IGNORECASE)
_SURROGATE = re.compile("[\ud800-\udfff]")


def encodable(text: str) -> str:
    """`text` with lone UTF-16 surrogates replaced by U+FFFD, so it encodes as UTF-8."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)


def _instruction_text(text: str, truncated: list[str]) -> str:
    """A synthesis instruction from the model's text, as the store and History Append take it: lone
    surrogates and NULs replaced, at most MAX_INSTRUCTION_CHARS characters and MAX_INSTRUCTION_BYTES bytes."""
    text = _cap(safe_text(text), MAX_INSTRUCTION_CHARS, "synthesis_instruction", truncated)
    cut = cut_bytes(text, MAX_INSTRUCTION_BYTES, TRUNCATED)
    if cut != text and "synthesis_instruction" not in truncated:
        truncated.append("synthesis_instruction")
    return cut


def _cap(text: str, limit: int, name: str, truncated: list[str]) -> str:
    if len(text) <= limit:
        return text
    if name not in truncated:
        truncated.append(name)
    return text[:limit - len(TRUNCATED)] + TRUNCATED


def _loads(text: str) -> tuple[bool, Any]:
    try:
        return True, json.loads(text, strict=False)
    except Exception:  # ValueError, RecursionError, ...: all mean "not JSON"
        return False, None


def _object_at_first_brace(text: str, start: int) -> tuple[bool, Any]:
    """The object that starts at the first "{" (trailing text allowed). Only the first brace:
    when that object is cut off, an inner object must not be mistaken for the answer."""
    try:
        return True, json.JSONDecoder(strict=False).raw_decode(text, start)[0]
    except Exception:
        return False, None


def _fenced_blocks(text: str):
    """The contents of the first MAX_FENCED_BLOCKS ```json ... ``` blocks, in order (one pass
    over the text: each block's end is searched once, and an unclosed fence ends the search)."""
    pos = 0
    for _ in range(MAX_FENCED_BLOCKS):
        m = _FENCE_OPEN.search(text, pos)
        if m is None:
            return
        end = text.find("```", m.end())
        if end == -1:
            return
        yield text[m.end():end]
        pos = end + 3


def extract_json(text: str) -> tuple[bool, Any, str]:
    """C.2: a fenced ```json block first, else the first JSON-like object in the text.

    Returns (found, value, how) with how one of FOUND_FENCED, FOUND_FIRST_OBJECT, FOUND_NOTHING.
    A fenced block that is not valid JSON falls through to the object search. The object is the
    text from the first "{" to the last "}" (the paper's greedy regular expression, found
    directly rather than by a backtracking search), else the object that starts at the first "{"."""
    text = text if isinstance(text, str) else str(text)
    for block in _fenced_blocks(text):
        block = block.strip()
        if not block:
            continue
        ok, value = _loads(block)
        if ok:
            return True, value, FOUND_FENCED
    start, end = text.find("{"), text.rfind("}")
    if start != -1 and end > start:
        ok, value = _loads(text[start:end + 1])
        if ok:
            return True, value, FOUND_FIRST_OBJECT
        ok, value = _object_at_first_brace(text, start)  # e.g. two objects in one answer
        if ok:
            return True, value, FOUND_FIRST_OBJECT
    return False, None, FOUND_NOTHING


def as_image_id(value: Any) -> int | None:
    """An image id from the model's value: ints, integral floats, "2", "Image 2", "I_2".
    None when absent or unreadable (then the C.3 "missing" rule applies). Never clamped to the
    pool; an id beyond ±ID_CAP becomes ±ID_CAP, a marker that is out of range like the id itself."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return _capped(value)
    if isinstance(value, float):
        return _capped(int(value)) if math.isfinite(value) and value.is_integer() else None
    if isinstance(value, str) and len(value) <= MAX_ID_CHARS:
        m = _ID_TEXT.fullmatch(value)
        return _capped(int(m.group(1))) if m else None
    return None


def _capped(i: int) -> int:
    return i if -ID_CAP < i < ID_CAP else (ID_CAP if i > 0 else -ID_CAP)


def _nonempty_text(value: Any) -> str | None:
    if isinstance(value, str) and value.strip():
        return value.strip()
    return None


def _depth_within(value: Any, limit: int) -> bool:
    """Whether `value` nests at most `limit` containers deep (iterative: any depth is safe)."""
    stack = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (dict, list)):
            if d > limit:
                return False
            stack.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return True


def _clean(value: Any) -> Any:
    """A copy of a shallow JSON value with every string (keys too) made encodable."""
    if isinstance(value, str):
        return encodable(value)
    if isinstance(value, dict):
        return {encodable(str(k)): _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def bounded_reasoning(value: Any, truncated: list[str]) -> Any:
    """The model's reasoning as the plan keeps it: the value itself when it is shallow and small,
    else its JSON text cut to MAX_REASONING_CHARS (recorded as truncated)."""
    if value is None:
        return None
    if _depth_within(value, MAX_REASONING_DEPTH):
        kept = _clean(value)
        try:
            text = json.dumps(kept, ensure_ascii=False)
        except (TypeError, ValueError):
            text = None
        if text is not None and len(text) <= MAX_REASONING_CHARS:
            return kept
    else:
        # Too deep for the serialisers downstream (dataclasses.asdict recurses): keep the text.
        try:
            text = json.dumps(value, ensure_ascii=False)
        except (TypeError, ValueError, RecursionError):
            text = repr(type(value).__name__)
    if "reasoning" not in truncated:
        truncated.append("reasoning")
    return encodable(text[:MAX_REASONING_CHARS - len(TRUNCATED)]) + TRUNCATED


@dataclass
class Parsed:
    """The plan fields read from one answer, the rules that fired and the fields that were cut."""

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
    truncated: list[str] = field(default_factory=list)


def _instruction(obj: dict, user_instruction: str, fallbacks: list[str], truncated: list[str]) -> str:
    text = _nonempty_text(obj.get("synthesis_instruction"))
    if text is None:
        fallbacks.append(SYNTHESIS_INSTRUCTION_MISSING)
        return user_instruction
    return _instruction_text(text, truncated)


def _raw_as_instruction(raw: str, user_instruction: str, fallbacks: list[str], truncated: list[str]) -> str:
    """C.2: on a parse failure the raw answer is the instruction; an empty answer has none,
    so the user's request is used instead (and recorded)."""
    text = _nonempty_text(raw)
    if text is None:
        fallbacks.append(SYNTHESIS_INSTRUCTION_MISSING)
        return user_instruction
    return _instruction_text(text, truncated)


def preservation_target(reasoning: Any, restoration_region: str | None) -> tuple[str | None, str | None]:
    """D_t: the target named in the reasoning (target_evidence, else uncovered_region), else
    the restoration_region. Returns (text, where it came from)."""
    if isinstance(reasoning, dict):
        for key in ("target_evidence", "uncovered_region"):
            text = _nonempty_text(reasoning.get(key))
            if text is not None:
                return _cap(encodable(text), MAX_FIELD_CHARS, "preservation_target", []), f"reasoning.{key}"
    if restoration_region:
        return restoration_region, "restoration_region"
    return None, None


def _region(value: Any, truncated: list[str]) -> str | None:
    if isinstance(value, (dict, list)):
        if not value:
            return None
        try:
            value = json.dumps(value, ensure_ascii=False)
        except (TypeError, ValueError, RecursionError):
            value = type(value).__name__
    elif value is not None and not isinstance(value, str):
        value = str(value)
    text = _nonempty_text(value)
    return None if text is None else _cap(encodable(text), MAX_FIELD_CHARS, "restoration_region", truncated)


def _read_answer(raw: Any, user_instruction: str) -> tuple[dict, str | None, str, list[str], list[str]]:
    """The JSON object of an answer and C.2's first two rules, the same for both prompts: no JSON
    object found -> the raw answer is the instruction; JSON that is not an object -> the user's
    instruction. Returns (object ({} when a rule fired), that instruction or None, how the JSON
    was found, the fallbacks fired, the fields truncated)."""
    raw = raw if isinstance(raw, str) else str(raw)
    found, obj, how = extract_json(raw)
    fallbacks: list[str] = []
    truncated: list[str] = []
    if not found:
        fallbacks.append(JSON_PARSE_FAILED)
        return {}, _raw_as_instruction(raw, user_instruction, fallbacks, truncated), how, fallbacks, truncated
    if not isinstance(obj, dict):
        fallbacks += [RESULT_NOT_A_DICT, SYNTHESIS_INSTRUCTION_MISSING]
        return {}, user_instruction, how, fallbacks, truncated
    return obj, None, how, fallbacks, truncated


def parse_restoration(raw: str, turn: int, user_instruction: str) -> Parsed:
    """Read a restoration answer at turn t = `turn`: C.2 (find the object, or the fallback
    object), then C.3 (fill missing ids) on every answer, a parse failure included."""
    obj, instruction, how, fallbacks, truncated = _read_answer(raw, user_instruction)
    # On a readable answer the instruction is read after the ids, so the rules are listed in
    # the paper's order; on an unreadable one C.2's fallback object has no ids or image_ids.
    anchor = as_image_id(obj.get("identity_anchor_id"))
    if anchor is None:
        fallbacks.append(IDENTITY_ANCHOR_ID_MISSING)
        anchor = turn - 1
    source = as_image_id(obj.get("restoration_source_id"))
    if source is None:
        fallbacks.append(RESTORATION_SOURCE_ID_MISSING)
        source = 0
    region = _region(obj.get("restoration_region"), truncated)
    if region is None:
        fallbacks.append(RESTORATION_REGION_EMPTY)
    ids_value = obj.get("image_ids")
    if ids_value is not None and not isinstance(ids_value, list):
        ids_value = [ids_value]
    ids: list[int] = []
    if ids_value is not None and len(ids_value) > MAX_IMAGE_IDS:
        truncated.append("image_ids")
        ids_value = ids_value[:MAX_IMAGE_IDS]
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
    for name, value in (("identity_anchor_id", anchor), ("restoration_source_id", source), ("image_ids", None)):
        if (abs(value) == ID_CAP if value is not None else any(abs(i) == ID_CAP for i in ids)) \
                and name not in truncated:
            truncated.append(name)     # the id was too large to keep: the record says it was capped
    if instruction is None:
        instruction = _instruction(obj, user_instruction, fallbacks, truncated)
    reasoning = bounded_reasoning(obj.get("reasoning"), truncated)
    target, target_from = preservation_target(reasoning, region)
    return Parsed(instruction, reasoning, anchor, source, region, tuple(ids), target, target_from, fallbacks, how,
                  truncated)


def parse_midturn(raw: str, user_instruction: str) -> Parsed:
    """Read a mid-turn rewrite answer (C.2): only reasoning and synthesis_instruction matter."""
    obj, instruction, how, fallbacks, truncated = _read_answer(raw, user_instruction)
    if instruction is not None:
        return Parsed(instruction, fallbacks=fallbacks, found=how, truncated=truncated)
    instruction = _instruction(obj, user_instruction, fallbacks, truncated)
    return Parsed(instruction, bounded_reasoning(obj.get("reasoning"), truncated), fallbacks=fallbacks, found=how,
                  truncated=truncated)
