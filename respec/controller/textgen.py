"""A controller on ComfyUI's own TextGenerate node: the prompt out, the answer text in, the plan out.

ComfyUI (0.24 and later) runs VLMs itself with its `TextGenerate` node (a CLIP-type model from
CLIPLoader, a `prompt` string, an optional IMAGE batch; output `generated_text`), under its own
memory manager and with its fp8 files. This module splits the pack's one controller call
(planner.plan_turn) around that node:

1. controller_call: history H_{t-1} + request P_t -> a ControllerCall: whether this turn calls the
   controller at all (turn 1 and skipped non-restoration turns do not), the paper's restoration
   (figure 12) or mid-turn rewrite (figure 13) prompt followed by the edit history as ONE text (the
   node has no separate system message), and I_0 .. I_{t-1} at one shared size (TextGenerate
   takes one IMAGE batch; a batch has one size). The text says that the attached images are
   Image 0 .. Image t-1 in order: ComfyUI's chat templates put every image before the text.
2. plan_from_text: the node's generated_text -> the Plan, through the same parser and plan builder
   as plan_turn (planner.plan_from_answer: C.2 then C.3, every rule recorded). Nothing constrains
   TextGenerate's output to JSON, so the C.2 fallbacks matter more here.

`on_parse_failure` says what a parse failure sends to the editor, by the one rule in
respec/controller/request.py that the Preservation Target node applies too: "paper" (C.2: the
raw answer is the instruction; the benchmark's setting) or "request" (the user's own words;
recorded as the fallback PARSE_FAILURE_REQUEST). The ids C.3 fills are the same either way.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError
from ..history import History
from ..images import as_array, as_rgb, downscale_to_budget, resize
from ..plan import Plan
from .planner import (SKIPPED_FIRST_TURN, SKIPPED_NON_RESTORATION, checked_request, pass_through_plan,
                      plan_from_answer, skips_controller)
from .request import PAPER, check_on_parse_failure
from .history_images import PAPER as PAPER_HISTORY, check_history_mode, shown_images
from .prompts import (DEFAULT_MAX_PIXELS, MIDTURN, RESTORATION, Templates, checked_max_pixels, history_text,
                      load_templates)

CONTROLLER = "TextGenerate"


@dataclass(frozen=True)
class ControllerCall:
    """One turn's controller request for TextGenerate, and what Plan from Text needs to read the
    answer (the same history, request, prompt kind and templates)."""

    history: History
    user_instruction: str
    is_restoration: bool
    templates: Templates
    max_pixels: int
    skipped: str | None          # why no call is made this turn (SKIPPED_*), None when one is
    prompt: str                  # TextGenerate's `prompt` ('' when skipped)
    images: tuple = ()           # uint8 H×W×3 arrays, all one size: Image 0 .. Image t-1
    meta: dict = field(default_factory=dict)

    @property
    def turn(self) -> int:
        """The turn t this call plans (the history's next turn)."""
        return self.history.next_turn

    @property
    def needed(self) -> bool:
        """Whether this turn asks the controller (so TextGenerate must run)."""
        return self.skipped is None

    @property
    def kind(self) -> str:
        """Which prompt the call uses: the restoration prompt or the mid-turn rewrite prompt."""
        return RESTORATION if self.is_restoration else MIDTURN


def shared_size(history: History, max_pixels: int) -> tuple[int, int]:
    """(width, height) every history image is shown at: the current image I_{t-1} shrunk to the
    pixel budget (the history's images normally share its size already)."""
    return downscale_to_budget(as_rgb(history.current.image.array), max_pixels).size


def controller_prompt_text(templates: Templates, kind: str, history: History, user_instruction: str,
                           shown: tuple[int, ...] | None = None) -> str:
    """The prompt text: the template, the image order, then the edit history and the request.
    `shown`: the image ids attached when not all of them are (history_images.shown_images)."""
    t = history.next_turn
    if shown is None or tuple(shown) == tuple(range(t)):
        order = ("The image attached to this message is Image 0." if t == 1 else
                 f"The {t} images attached to this message are, in order, Image 0 to Image {t - 1}.")
        return "\n\n".join((templates.text(kind).rstrip(), order, history_text(history, user_instruction)))
    order = (f"The {len(shown)} images attached to this message are, in order, "
             f"Image {', Image '.join(map(str, shown))}.")
    return "\n\n".join((templates.text(kind).rstrip(), order, history_text(history, user_instruction, shown)))


def controller_call(history: History, user_instruction: str, is_restoration: bool, *,
                    skip_non_restoration: bool = False, templates: Templates | None = None,
                    max_pixels: int = DEFAULT_MAX_PIXELS, meta: dict | None = None,
                    history_mode: str = PAPER_HISTORY, max_history_images: int | None = None) -> ControllerCall:
    """This turn's request for TextGenerate (prompt text + images at one size), or a call marked
    skipped on turn 1 / on a non-restoration turn with skip_non_restoration (as plan_turn).
    history_mode / max_history_images: which history images are attached (history_images:
    "paper", every one, the default; "bounded", at most max_history_images, with their true ids)."""
    user_instruction = checked_request(user_instruction)   # the request rule plan_turn applies
    is_restoration = bool(is_restoration)
    templates = templates or load_templates()
    max_pixels = checked_max_pixels(max_pixels)
    history_mode, max_history_images = check_history_mode(history_mode, max_history_images)
    skipped = (SKIPPED_FIRST_TURN if history.next_turn == 1 else
               SKIPPED_NON_RESTORATION if skips_controller(is_restoration, skip_non_restoration) else None)
    meta = dict(meta or {})
    ids: tuple[int, ...] = tuple(range(history.next_turn))
    if history_mode != PAPER_HISTORY and not skipped:
        chosen = shown_images(history, user_instruction, is_restoration, history_mode, max_history_images)
        ids = chosen.ids
        meta.update({"images_shown": list(ids), "history_images": chosen.record()})
    size = shared_size(history, max_pixels)
    images = tuple(as_array(resize(as_rgb(history.image(k).array), size)) for k in ids)
    kind = RESTORATION if is_restoration else MIDTURN
    prompt = "" if skipped else controller_prompt_text(templates, kind, history, user_instruction,
                                                       None if history_mode == PAPER_HISTORY else ids)
    return ControllerCall(history, user_instruction, is_restoration, templates, max_pixels, skipped, prompt,
                          images, meta)


def plan_from_text(call: ControllerCall, generated_text, *, on_parse_failure: str = PAPER,
                   controller: str = CONTROLLER, seconds: float = 0.0) -> Plan:
    """The turn's plan from TextGenerate's generated_text, with the C.2/C.3 rules exactly as the
    pack's VLM node applies them (the same parser and plan builder). A skipped call gives the
    same pass-through plan as plan_turn and reads no text."""
    check_on_parse_failure(on_parse_failure)
    if call.skipped:
        return pass_through_plan(call.history, call.user_instruction, call.is_restoration,
                                 meta={**call.meta, "controller_route": CONTROLLER})
    if generated_text is None:
        raise InputError(f"turn {call.turn} needs the controller's answer (the generated text), and none was given")
    plan = plan_from_answer(call.history, call.user_instruction, call.is_restoration, generated_text,
                            templates=call.templates, max_pixels=call.max_pixels, controller=controller,
                            seconds=seconds, meta={**call.meta, "controller_route": CONTROLLER},
                            on_parse_failure=on_parse_failure)
    return plan


def images_batch(call: ControllerCall) -> np.ndarray:
    """The call's images stacked as one uint8 [N, H, W, 3] array."""
    return np.stack(call.images)
