"""Preservation Target Identification (paper §4.1-4.3, appendix C.1): one controller call per
turn from turn 2 on, turned into a Plan.

Turn 1 makes no call (the editor gets I_0 and P_1). Later turns make exactly one call: the
restoration prompt on restoration turns, the mid-turn rewrite prompt otherwise (or none at
all when the caller chooses to skip non-restoration turns).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, fields
from typing import Any

from .. import comfy
from ..errors import InputError
from ..history import History
from ..plan import Plan
from . import parsing
from .request import PAPER, check_on_parse_failure, check_request, read_answer
from .history_images import PAPER as PAPER_HISTORY, check_history_mode, shown_images
from .prompts import DEFAULT_MAX_PIXELS, MIDTURN, RESTORATION, Templates, build_parts, load_templates
from .schemas import midturn_schema, restoration_schema

DEFAULT_MAX_NEW_TOKENS = 768

SKIPPED_FIRST_TURN = "first_turn"
SKIPPED_NON_RESTORATION = "non_restoration_turn_skipped"


def count_vlm_calls(history: History) -> int:
    """VLM calls recorded in the plans of the history's turns (Plan.vlm_calls)."""
    return sum(t.plan.vlm_calls or 0 for t in history.turns if t.plan is not None)


def checked_request(text: Any) -> str:
    """The request P_t stripped, when it is not empty and passes check_request; InputError otherwise."""
    if not isinstance(text, str) or not text.strip():
        raise InputError("the current request P_t is empty; type the edit you want for this turn")
    return check_request(text, "the current request P_t").strip()


def skips_controller(is_restoration: bool, skip_non_restoration: bool) -> bool:
    """Whether the caller's skip_non_restoration switch skips this turn's controller call (a
    non-restoration turn then gets the pass-through plan). The one place that rule is decided:
    plan_turn, controller_call (the TextGenerate route), run_turn and the Preservation Target
    node's lazy check all ask it. (Turn 1 never calls the controller either; pass_through_plan
    records which reason held.)"""
    return bool(skip_non_restoration) and not is_restoration


@dataclass(frozen=True)
class PlanOptions:
    """How plan_turn asks the controller; what a planner part keeps from its construction
    (plan_options checks the names)."""
    skip_non_restoration: bool = False   # non-restoration turns make no call (skips_controller)
    templates: Templates | None = None   # None: the shipped C.1 prompts (load_templates)
    max_pixels: int | None = None        # per history image; None: the backend's own, else the default
    max_new_tokens: int | None = None    # None: the backend's own, else DEFAULT_MAX_NEW_TOKENS
    on_parse_failure: str = PAPER        # an answer with no JSON: "paper" (C.2's raw text) | "request"
    history_mode: str = PAPER_HISTORY    # which history images are shown: "paper" (all) | "bounded"
    max_history_images: int | None = None   # "bounded": at most this many (default 6)


def pass_through_plan(history: History, user_instruction: str, is_restoration: bool, *,
                      meta: dict | None = None) -> Plan:
    """The plan of a turn that makes no controller call, P_t sent as it is: turn 1 (nothing to
    preserve yet), else a non-restoration turn whose call is skipped (skip_non_restoration).
    plan.meta["skipped"] says which."""
    user_instruction = checked_request(user_instruction)
    reason = SKIPPED_FIRST_TURN if history.next_turn == 1 else SKIPPED_NON_RESTORATION
    return Plan(turn=history.next_turn, user_instruction=user_instruction,
                synthesis_instruction=user_instruction, is_restoration=bool(is_restoration), vlm_calls=0,
                meta={**(meta or {}), "skipped": reason, "vlm_calls_so_far": count_vlm_calls(history)})


def plan_turn(history: History, user_instruction: str, backend: Any, is_restoration: bool,
              options: PlanOptions | None = None, *, meta: dict | None = None) -> Plan:
    """This turn's plan from the history H_{t-1}, the request P_t and the controller.

    is_restoration: whether turn t reveals hidden content (the benchmark's ground-truth flag,
    or detect_restoration's answer); it picks the prompt, never enters it.
    options: PlanOptions (skip_non_restoration: pass P_t through on non-restoration turns without a
    call; max_pixels / max_new_tokens: None takes the backend's own settings, else the defaults;
    on_parse_failure: what an answer with no JSON sends to the editor, respec.controller.request:
    "paper", C.2's raw text, the default, or "request", the user's words; history_mode /
    max_history_images: which history images the controller is shown, respec.controller.history_images:
    "paper", every image, the default, or "bounded", at most max_history_images, default 6, chosen
    with provenance).
    meta: extra entries for plan.meta (e.g. how is_restoration was decided).
    plan.vlm_calls is 1 when this turn called the controller, else 0."""
    o = options or PlanOptions()
    templates, max_pixels, max_new_tokens = o.templates, o.max_pixels, o.max_new_tokens
    on_parse_failure = o.on_parse_failure
    user_instruction = checked_request(user_instruction)
    check_on_parse_failure(on_parse_failure)
    history_mode, max_history_images = check_history_mode(o.history_mode, o.max_history_images)
    is_restoration = bool(is_restoration)
    meta = dict(meta or {})
    t = history.next_turn
    if t == 1 or skips_controller(is_restoration, o.skip_non_restoration):
        return pass_through_plan(history, user_instruction, is_restoration, meta=meta)
    if backend is None or not callable(getattr(backend, "chat", None)):
        raise InputError(f"turn {t} needs a controller (a VLM backend with a chat method), and none was given")

    templates = templates or load_templates()
    kind = RESTORATION if is_restoration else MIDTURN
    if max_pixels is None:
        max_pixels = int(getattr(backend, "max_pixels", 0) or DEFAULT_MAX_PIXELS)
    if max_new_tokens is None:
        max_new_tokens = int(getattr(backend, "max_new_tokens", 0) or DEFAULT_MAX_NEW_TOKENS)
    schema = restoration_schema(t) if is_restoration else midturn_schema()
    shown = shown_images(history, user_instruction, is_restoration, history_mode, max_history_images)
    parts = build_parts(history, user_instruction, max_pixels, None if history_mode == PAPER_HISTORY else shown.ids)

    comfy.check_interrupted()
    start = time.perf_counter()
    raw = backend.chat(parts, system=templates.text(kind), max_new_tokens=max_new_tokens, json_schema=schema)
    seconds = time.perf_counter() - start
    meta["max_new_tokens"] = max_new_tokens
    meta["images_shown"] = list(shown.ids)
    if history_mode != PAPER_HISTORY:   # paper-mode plans stay as they were (absent = every image)
        meta["history_images"] = shown.record()
    return plan_from_answer(history, user_instruction, is_restoration, raw, templates=templates,
                            max_pixels=max_pixels, controller=str(getattr(backend, "name", type(backend).__name__)),
                            seconds=seconds, meta=meta, on_parse_failure=on_parse_failure)


def plan_from_answer(history: History, user_instruction: str, is_restoration: bool, raw: Any, *,
                     templates: Templates, max_pixels: int, controller: str, seconds: float = 0.0,
                     meta: dict | None = None, on_parse_failure: str = PAPER) -> Plan:
    """The plan of turn t from the controller's answer text `raw`: C.2 parsing, then C.3 on
    restoration turns (appendix C), the raw answer kept (bounded) for audit. Shared by plan_turn
    (the pack's own VLM call) and plan_from_text (ComfyUI's TextGenerate node)."""
    t = history.next_turn
    kind = RESTORATION if is_restoration else MIDTURN
    if not isinstance(raw, str):
        raw = "" if raw is None else str(raw)
    meta = dict(meta or {})

    parsed = read_answer(raw, t, user_instruction, is_restoration, on_parse_failure)
    meta.update({
        "vlm_calls_so_far": count_vlm_calls(history) + 1,
        "prompt": kind,
        "template": templates.describe(kind),
        "parse": parsed.found,
        "on_parse_failure": on_parse_failure,
        "images_shown": list(meta.get("images_shown", range(t))),
        "max_pixels": max_pixels,
    })
    if parsed.preservation_target_from:
        meta["preservation_target_from"] = parsed.preservation_target_from
    # The raw answer is kept for audit, bounded and encodable like every field read from it.
    kept_raw = parsing.encodable(raw)
    if len(kept_raw) > parsing.MAX_RAW_CHARS:
        kept_raw = kept_raw[:parsing.MAX_RAW_CHARS - len(parsing.TRUNCATED)] + parsing.TRUNCATED
        parsed.truncated.append("raw_text")
    if parsed.truncated:
        meta["truncated"] = list(parsed.truncated)
    return Plan(
        turn=t,
        user_instruction=user_instruction,
        synthesis_instruction=parsed.synthesis_instruction,
        is_restoration=is_restoration,
        preservation_target=parsed.preservation_target,
        restoration_source_id=parsed.restoration_source_id,
        identity_anchor_id=parsed.identity_anchor_id,
        restoration_region=parsed.restoration_region,
        image_ids=tuple(parsed.image_ids),
        reasoning=parsed.reasoning,
        raw_text=kept_raw,
        fallbacks=tuple(parsed.fallbacks),
        vlm_called=True,
        controller=controller,
        seconds=seconds,
        meta=meta,
        vlm_calls=1,
    )


def plan_options(**options: Any) -> PlanOptions:
    """plan_turn's options (templates, history_mode, max_history_images, max_pixels, ...) by name,
    for a planner to keep from its construction; InputError names an unknown one."""
    known = [f.name for f in fields(PlanOptions)]
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise InputError(f"unknown controller option(s) {', '.join(unknown)}; use {', '.join(known)}")
    return PlanOptions(**options)


class VLMPlanner:
    """The paper's planner part (respec.turn.Planner): one controller call (plan_turn) with the
    options it was made with, e.g. VLMPlanner(history_mode="bounded")."""

    name = "vlm"

    def __init__(self, **options: Any):
        self.options = plan_options(**options)

    def plan(self, history: History, request: str, is_restoration: bool, *, backend: Any = None,
             meta: dict | None = None) -> Plan:
        """plan_turn's plan for turn history.next_turn."""
        return plan_turn(history, request, backend, is_restoration, self.options, meta=meta)
