"""The controller on ComfyUI's own TextGenerate node (ComfyUI 0.24+): Controller Prompt builds its
`prompt` and `image` inputs, Plan from Text reads its `generated_text` into a plan.
The logic lives in respec/controller/textgen.py; these classes only translate."""
from __future__ import annotations

from ..respec import comfy
from ..respec.controller import decide_restoration, load_templates
from ..respec.controller.textgen import ControllerCall, controller_call, images_batch, plan_from_text
from .boundary import controller_call_in, generated_text_in, history_in
from .common import PLAN
from .controller_nodes import (BUILTIN, GROUND_TRUTH_INPUT, HISTORY_INPUT, MAX_PIXELS_OPTIONS, ON_PARSE_FAILURE_INPUT,
                               REQUEST_INPUT, RESTORATION_MODE_INPUT, plan_json, template_choices, template_path)
from .controller_nodes import ReSpecPreservationTarget

CATEGORY = "ReSpec/controller"
CONTROLLER_CALL = "RESPEC_CONTROLLER_CALL"


class ReSpecControllerPrompt:
    """This turn's controller prompt and history images, for ComfyUI's TextGenerate (paper §4, C.2)."""

    CATEGORY = CATEGORY
    SEARCH_ALIASES = ["textgenerate", "text generate", "controller prompt", "qwen3.5", "gemma"]
    FUNCTION = "build"
    RETURN_TYPES = ("STRING", "IMAGE", CONTROLLER_CALL)
    RETURN_NAMES = ("prompt", "images", "controller_call")
    OUTPUT_TOOLTIPS = ("The paper's restoration or rewrite prompt, the image order and the edit history as one "
                       "text: connect it to TextGenerate's prompt.",
                       "I_0 .. I_{t-1} as one IMAGE batch at one size (the current image's, within max_pixels): "
                       "connect it to TextGenerate's image.",
                       "What Plan from Text needs to read the answer (history, request, prompt kind, templates).")
    DESCRIPTION = ("Builds the controller's request for ComfyUI's own TextGenerate node (Qwen3.5, Gemma 3/4, "
                   "Qwen2.5-VL ... loaded with CLIPLoader): the restoration prompt on restoration turns, the "
                   "rewrite prompt otherwise, with the history images. Plan from Text reads the answer. Turn 1 "
                   "and skipped turns call no model (Plan from Text then never asks TextGenerate to run).")

    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {
                "history": HISTORY_INPUT,
                "instruction": REQUEST_INPUT,
                "restoration_mode": RESTORATION_MODE_INPUT,
                "skip_non_restoration": ("BOOLEAN", {"default": False, "tooltip":
                                         "On: non-restoration turns make no controller call and pass the request "
                                         "through unchanged. Off: every turn after the first makes one (the paper)."}),
                "max_pixels": ("INT", dict(MAX_PIXELS_OPTIONS)),
                "restoration_template": (template_choices(), {"default": BUILTIN, "tooltip":
                                         "The restoration prompt: built-in, or a UTF-8 text file you put in "
                                         "ComfyUI's user/respec/templates folder."}),
                "midturn_template": (template_choices(), {"default": BUILTIN, "tooltip":
                                     "The mid-turn rewrite prompt: built-in, or a UTF-8 text file you put in "
                                     "ComfyUI's user/respec/templates folder."}),
            },
            "optional": {"is_restoration": GROUND_TRUTH_INPUT},
        }

    @classmethod
    def IS_CHANGED(cls, restoration_template="", midturn_template="", **kwargs):
        """Re-run when an override template file's text changes (as Preservation Target)."""
        return ReSpecPreservationTarget.IS_CHANGED(restoration_template=restoration_template,
                                                   midturn_template=midturn_template)

    def build(self, history, instruction, restoration_mode, skip_non_restoration, max_pixels, restoration_template,
              midturn_template, is_restoration=None):
        import torch
        history = history_in(history)
        flag, meta = decide_restoration(restoration_mode, history, instruction, is_restoration)
        templates = load_templates(template_path(restoration_template, "restoration"),
                                   template_path(midturn_template, "mid-turn"))
        call = controller_call(history, instruction, flag, skip_non_restoration=skip_non_restoration,
                               templates=templates, max_pixels=max_pixels,
                               meta={**meta, "restoration_mode": restoration_mode})
        images = torch.from_numpy(images_batch(call).astype("float32") / 255.0)
        return (call.prompt, images, call)


class ReSpecPlanFromText:
    """TextGenerate's answer -> this turn's plan, with the paper's C.2/C.3 rules (appendix C)."""

    CATEGORY = CATEGORY
    SEARCH_ALIASES = ["textgenerate", "generated text", "parse plan", "controller"]
    FUNCTION = "plan"
    RETURN_TYPES = (PLAN, "STRING", "STRING")
    RETURN_NAMES = ("plan", "plan_json", "synthesis_instruction")
    OUTPUT_TOOLTIPS = ("This turn's plan, as Preservation Target VLM (ReSpec) makes it: connect it to Reference "
                       "Selector, Instruction Rewriter and History Append.",
                       "The plan as JSON (for display or saving).",
                       "The rewritten instruction (the user's request when no call was made).")
    DESCRIPTION = ("Reads TextGenerate's generated_text as the controller's answer: the JSON plan is found and "
                   "read exactly as the pack's own VLM node reads it (C.2), missing ids are filled (C.3), and "
                   "every rule that fired is recorded in the plan. generated_text is asked for only on turns "
                   "that call the controller, so TextGenerate does not run on turn 1 or on skipped turns.")

    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {
                "controller_call": (CONTROLLER_CALL, {"tooltip":
                                    "Controller Prompt (ReSpec)'s controller_call: the same history and request "
                                    "the prompt was made from."}),
                "generated_text": ("STRING", {"forceInput": True, "lazy": True, "tooltip":
                                   "TextGenerate's generated_text (the controller's answer). Only evaluated on "
                                   "turns that call the controller."}),
                "on_parse_failure": ON_PARSE_FAILURE_INPUT,
            },
            "hidden": {"unique_id": "UNIQUE_ID"},
        }

    def check_lazy_status(self, controller_call, generated_text=None, on_parse_failure="request", unique_id=None):
        """Ask ComfyUI for TextGenerate's answer only when this turn calls the controller."""
        # Anything but a Controller Prompt's call asks for nothing: plan() then refuses it clearly.
        if generated_text is None and isinstance(controller_call, ControllerCall) and controller_call.needed:
            return ["generated_text"]
        return []

    def plan(self, controller_call, generated_text=None, on_parse_failure="request", unique_id=None):
        call = controller_call_in(controller_call)
        plan = plan_from_text(call, generated_text_in(call, generated_text), on_parse_failure=on_parse_failure)
        comfy.send_event("plan", {"node": unique_id, "plan": plan.to_dict()})
        return (plan, plan_json(plan), plan.synthesis_instruction)


NODE_CLASS_MAPPINGS = {
    "ReSpecControllerPrompt": ReSpecControllerPrompt,
    "ReSpecPlanFromText": ReSpecPlanFromText,
}
NODE_DISPLAY_NAME_MAPPINGS = {
    "ReSpecControllerPrompt": "Controller Prompt (ReSpec)",
    "ReSpecPlanFromText": "Plan from Text (ReSpec)",
}
