"""Rules about the user's request P_t that every node reading a request or a controller answer
applies the same way (Preservation Target, Plan from Text, History Append, the provenance
selector): its size limit, and what is sent to the editor when the controller's answer does not
parse.

`on_parse_failure` (a plan's fallbacks record which rule fired):

- PAPER ("paper"): appendix C.2's rule: an answer with no JSON object becomes the instruction as
  it is (the benchmark's default, so rows stay comparable with the paper);
- REQUEST ("request"): the user's own words are sent instead, so a conversation never sends a
  model's stray prose to the editor (the conversational default); fallback PARSE_FAILURE_REQUEST.
"""
from __future__ import annotations

from typing import Any

from ..errors import InputError
from ..text import MAX_REQUEST_BYTES, check_text
from . import parsing

PAPER = "paper"
REQUEST = "request"
ON_PARSE_FAILURE = (REQUEST, PAPER)
PARSE_FAILURE_REQUEST = "parse_failure_used_request"   # fallback name: P_t sent instead of the raw answer


def check_request(text: Any, what: str = "the request") -> str:
    """`text` when it passes the pack's text rule (respec/text.py: no lone surrogate, no NUL) and
    is at most MAX_REQUEST_BYTES UTF-8 bytes, else InputError saying what is wrong and what to do."""
    return check_text(text, what, MAX_REQUEST_BYTES,
                      shorten="shorten it to 16 KiB: editors read only the first few hundred words")


def check_on_parse_failure(value: Any) -> str:
    """A valid on_parse_failure choice, or InputError naming the choices."""
    if value not in ON_PARSE_FAILURE:
        raise InputError(f"on_parse_failure must be one of {list(ON_PARSE_FAILURE)}, got {value!r}")
    return value


def apply_parse_failure(parsed: "parsing.Parsed", user_instruction: str, on_parse_failure: str) -> "parsing.Parsed":
    """Apply the on_parse_failure rule to a parsed answer (in place; returns it). With REQUEST, an
    answer C.2 could not read (JSON_PARSE_FAILED: the raw text became the instruction) sends
    `user_instruction` instead and records PARSE_FAILURE_REQUEST; with PAPER nothing changes."""
    mode = check_on_parse_failure(on_parse_failure)
    if mode == REQUEST and parsing.JSON_PARSE_FAILED in parsed.fallbacks \
            and parsed.synthesis_instruction != user_instruction:
        parsed.synthesis_instruction = user_instruction
        parsed.fallbacks.append(PARSE_FAILURE_REQUEST)
        if "synthesis_instruction" in parsed.truncated:   # the cut raw text is no longer sent
            parsed.truncated.remove("synthesis_instruction")
    return parsed


def read_answer(raw: Any, turn: int, user_instruction: str, is_restoration: bool,
                on_parse_failure: str = PAPER) -> "parsing.Parsed":
    """A controller answer read as plan_turn reads it: C.2 and C.3 (parsing.parse_restoration on a
    restoration turn, parse_midturn otherwise), then the on_parse_failure rule. Any node turning a
    model's text into a plan (Preservation Target, Plan from Text) calls this."""
    check_on_parse_failure(on_parse_failure)
    raw = raw if isinstance(raw, str) else ("" if raw is None else str(raw))
    parsed = (parsing.parse_restoration(raw, turn, user_instruction) if is_restoration
              else parsing.parse_midturn(raw, user_instruction))
    return apply_parse_failure(parsed, user_instruction, on_parse_failure)
