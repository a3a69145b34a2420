"""Instruction faithfulness S_IF (paper §3.3 "Auxiliary Instruction Faithfulness", figure 11).

A VLM judge grades, on the paper's 0–3 scale, whether the edited image carries out the turn's
instruction (not image quality, not preservation). S_IF = score / 3. The judge is any controller
backend (`backend.chat(parts, system=..., max_new_tokens=..., json_schema=...)`); the paper used
GPT-4o-mini, which the controller's OpenAI-compatible backend reaches.

The prompt below is this pack's own wording with figure 11's structure and scale. A reply that
cannot be read as a score is a recorded failure (S_IF = NaN, the reason and the raw text kept),
never an exception; an exception from the backend itself (network, model) is raised.
"""
from __future__ import annotations

import json
import math
import re
import time
from typing import Any

from ..errors import InputError
from ..images import downscale_to_budget, rgb_array

SCORE_MAX = 3
DEFAULT_MAX_PIXELS = 1024 * 1024
DEFAULT_MAX_NEW_TOKENS = 256

JUDGE_SYSTEM = "You grade image edits strictly on whether they carry out the requested instruction."

JUDGE_INTRO = """You are checking whether one image edit did what it was asked to do.

You receive, in this order:
- the image as it was before this edit;
- the edited image that you are grading;
- the editing instruction given for this edit.

Grade only whether the edited image carries out the instruction. This is not a grade of image
quality, of how well untouched content was kept, or of consistency with earlier edits. Use the
before image only to see what the instruction asked to change.

Scale (integers only):
3 - perfect or nearly so: the requested edit is clearly done and matches the instruction.
2 - mostly or partly done: the main requested change is there, but with small flaws, missing
    details, wrong attributes or a wrong placement.
1 - weak: an attempt at the edit is visible, but major parts of the request are missing or wrong.
0 - failed: the edit is absent or contradicts the instruction, or the image is unusable."""

JUDGE_ANSWER = ('Reply with one JSON object and nothing else (no markdown): '
                '{"score": <0, 1, 2 or 3>, "reason": "<one short sentence>"}')

JUDGE_SCHEMA = {
    "type": "object",
    "properties": {"score": {"type": "integer", "enum": [0, 1, 2, 3]}, "reason": {"type": "string"}},
    "required": ["score", "reason"],
    "additionalProperties": False,
}

_SCORE_KEYS = ("score", "rating", "instruction_following", "instruction_following_score")


def judge_parts(before: Any, after: Any, instruction: str, max_pixels: int = DEFAULT_MAX_PIXELS) -> list:
    """The user message: the intro, both images with their captions, the instruction, the answer format."""
    from PIL import Image
    pil = lambda im: downscale_to_budget(Image.fromarray(rgb_array(im)), max_pixels)
    return [JUDGE_INTRO, "Image before the edit:", pil(before), "Edited image to grade:", pil(after),
            f"Editing instruction: {instruction.strip()}", JUDGE_ANSWER]


def _json_objects(text: str):
    """Every top-level JSON object that can be decoded starting at a '{' in `text`, in order."""
    decoder = json.JSONDecoder(strict=False)
    i = text.find("{")
    while i != -1:
        try:
            obj, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            i = text.find("{", i + 1)
            continue
        yield obj
        i = text.find("{", end)


def _as_score(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)) and math.isfinite(value) and float(value).is_integer():
        return int(value)
    if isinstance(value, str):
        m = re.fullmatch(r"\s*(-?\d+)(?:\s*/\s*3)?\s*", value)
        if m:
            return int(m.group(1))
    return None


def parse_judgement(text: str) -> dict:
    """Read the judge's reply: a ```json fenced block first, else the first JSON object, else a
    `"score": n` pattern. Returns {score, reason, parse, failure}; score None on failure."""
    text = text or ""
    candidates: list[tuple[str, Any]] = []
    for block in re.findall(r"```(?:json|JSON)?\s*(.*?)```", text, re.S):
        candidates += [("fenced_json", o) for o in _json_objects(block)]
    candidates += [("json", o) for o in _json_objects(text)]
    problems = []
    for how, obj in candidates:
        if not isinstance(obj, dict):
            continue
        key = next((k for k in _SCORE_KEYS if k in obj), None)
        if key is None:
            problems.append(f"a JSON object without a score field ({sorted(obj)[:5]})")
            continue
        score = _as_score(obj[key])
        if score is None or not 0 <= score <= SCORE_MAX:
            problems.append(f"score {obj[key]!r} is not an integer 0–{SCORE_MAX}")
            continue
        reason = obj.get("reason", obj.get("explanation", ""))
        return {"score": score, "reason": str(reason) if reason is not None else "", "parse": how, "failure": None}
    m = re.search(r"\"?\bscore\b\"?\s*[:=]\s*\"?(\d+)\b", text, re.I)
    if m and 0 <= int(m.group(1)) <= SCORE_MAX:
        return {"score": int(m.group(1)), "reason": "", "parse": "regex", "failure": None}
    if problems:
        failure = "; ".join(dict.fromkeys(problems))
    elif not text.strip():
        failure = "the judge returned an empty reply"
    else:
        failure = "no JSON object with a 0–3 score in the reply"
    return {"score": None, "reason": "", "parse": None, "failure": failure}


def judge_instruction(backend: Any, before: Any, after: Any, instruction: str, *,
                      max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS, use_json_schema: bool = True,
                      max_pixels: int = DEFAULT_MAX_PIXELS) -> dict:
    """S_IF for one edit: ask the judge backend once, parse its 0–3 grade, S_IF = score / 3.

    Returns {S_IF, S_IF_norm, score, reason, ok, failure, parse, raw, instruction, judge, vlm_calls,
    seconds}; S_IF = S_IF_norm = score / 3. A reply that cannot be parsed gives ok=False, score None,
    S_IF NaN and S_IF_norm None, with the failure recorded.
    """
    if not instruction or not instruction.strip():
        raise InputError("the instruction to judge is empty; give the turn's user instruction P_t")
    parts = judge_parts(before, after, instruction, max_pixels)
    t0 = time.perf_counter()
    raw = backend.chat(parts, system=JUDGE_SYSTEM, max_new_tokens=int(max_new_tokens),
                       json_schema=JUDGE_SCHEMA if use_json_schema else None)
    seconds = time.perf_counter() - t0
    parsed = parse_judgement(raw if isinstance(raw, str) else str(raw))
    score = parsed["score"]
    return {
        "S_IF": (score / SCORE_MAX) if score is not None else math.nan,
        "S_IF_norm": (score / SCORE_MAX) if score is not None else None,  # same value; None (not NaN) on failure
        "score": score,
        "reason": parsed["reason"],
        "ok": score is not None,
        "failure": parsed["failure"],
        "parse": parsed["parse"],
        "raw": raw,
        "instruction": instruction,
        "judge": getattr(backend, "name", type(backend).__name__),
        "vlm_calls": 1,
        "seconds": seconds,
    }
