"""The controller on ComfyUI's own TextGenerate node (ComfyUI 0.24+): Controller Prompt builds its
`prompt` and `image` inputs, Plan from Text reads its `generated_text` into a plan.
The logic lives in respec/controller/textgen.py; these classes only translate."""
from __future__ import annotations

from ..respec import comfy
from ..respec.comfy import io, node_schema
from ..respec.controller import decide_restoration, load_templates
from ..respec.controller.textgen import ControllerCall, controller_call, images_batch, plan_from_text
from .boundary import controller_call_in, generated_text_in, history_in
from .controller_nodes import (ground_truth_input, history_input, max_pixels_input, on_parse_failure_input, plan_json,
                               plan_outputs, request_input, restoration_mode_input, template_inputs, template_path,
                               templates_fingerprint)

CATEGORY = "ReSpec/controller"
CONTROLLER_CALL = "RESPEC_CONTROLLER_CALL"
ControllerCallType = io.Custom(CONTROLLER_CALL)


class ReSpecControllerPrompt(io.ComfyNode):
    """This turn's controller prompt and history images, for ComfyUI's TextGenerate (paper §4, C.2)."""

    @classmethod
    def define_schema(cls):
        return node_schema(
            node_id="ReSpecControllerPrompt", display_name="Controller Prompt (ReSpec)", category=CATEGORY,
            search_aliases=["textgenerate", "text generate", "controller prompt", "qwen3.5", "gemma"],
            description=("Builds the controller's request for ComfyUI's own TextGenerate node (Qwen3.5, Gemma 3/4, "
                         "Qwen2.5-VL ... loaded with CLIPLoader): the restoration prompt on restoration turns, the "
                         "rewrite prompt otherwise, with the history images. Plan from Text reads the answer. Turn 1 "
                         "and skipped turns call no model (Plan from Text then never asks TextGenerate to run)."),
            inputs=[
                history_input(),
                request_input(),
                restoration_mode_input(),
                io.Boolean.Input(id="skip_non_restoration", default=False, tooltip=
                                 "On: non-restoration turns make no controller call and pass the request through "
                                 "unchanged. Off: every turn after the first makes one (the paper)."),
                max_pixels_input(),
                *template_inputs(),
                ground_truth_input(),
            ],
            outputs=[
                io.String.Output(id="prompt", tooltip=
                                 "The paper's restoration or rewrite prompt, the image order and the edit history "
                                 "as one text: connect it to TextGenerate's prompt."),
                io.Image.Output(id="images", tooltip=
                                "I_0 .. I_{t-1} as one IMAGE batch at one size (the current image's, within "
                                "max_pixels): connect it to TextGenerate's image."),
                ControllerCallType.Output(id="controller_call", tooltip=
                                          "What Plan from Text needs to read the answer (history, request, prompt "
                                          "kind, templates)."),
            ])

    @classmethod
    def fingerprint_inputs(cls, restoration_template="", midturn_template="", **kwargs):
        """Re-run when an override template file's text changes (as Preservation Target)."""
        return templates_fingerprint(restoration_template, midturn_template)

    @classmethod
    def execute(cls, history, instruction, restoration_mode, skip_non_restoration, max_pixels, restoration_template,
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
        return io.NodeOutput(call.prompt, images, call)


class ReSpecPlanFromText(io.ComfyNode):
    """TextGenerate's answer -> this turn's plan, with the paper's C.2/C.3 rules (appendix C)."""

    @classmethod
    def define_schema(cls):
        return node_schema(
            node_id="ReSpecPlanFromText", display_name="Plan from Text (ReSpec)", category=CATEGORY,
            search_aliases=["textgenerate", "generated text", "parse plan", "controller"],
            description=("Reads TextGenerate's generated_text as the controller's answer: the JSON plan is found "
                         "and read exactly as the pack's own VLM node reads it (C.2), missing ids are filled (C.3), "
                         "and every rule that fired is recorded in the plan. generated_text is asked for only on "
                         "turns that call the controller, so TextGenerate does not run on turn 1 or on skipped "
                         "turns."),
            inputs=[
                ControllerCallType.Input(id="controller_call", tooltip=
                                         "Controller Prompt (ReSpec)'s controller_call: the same history and "
                                         "request the prompt was made from."),
                io.String.Input(id="generated_text", force_input=True, lazy=True, multiline=None, tooltip=
                                "TextGenerate's generated_text (the controller's answer). Only evaluated on turns "
                                "that call the controller."),
                on_parse_failure_input(),
            ],
            outputs=plan_outputs("This turn's plan, as Preservation Target VLM (ReSpec) makes it: connect it to "
                                 "Reference Selector, Instruction Rewriter and History Append."),
            hidden=[io.Hidden.unique_id])

    @classmethod
    def check_lazy_status(cls, controller_call, generated_text=None, on_parse_failure="request"):
        """Ask ComfyUI for TextGenerate's answer only when this turn calls the controller."""
        # Anything but a Controller Prompt's call asks for nothing: execute() then refuses it clearly.
        if generated_text is None and isinstance(controller_call, ControllerCall) and controller_call.needed:
            return ["generated_text"]
        return []

    @classmethod
    def execute(cls, controller_call, generated_text=None, on_parse_failure="request"):
        call = controller_call_in(controller_call)
        plan = plan_from_text(call, generated_text_in(call, generated_text), on_parse_failure=on_parse_failure)
        comfy.send_event("plan", {"node": cls.hidden.unique_id, "plan": plan.to_dict()})
        return io.NodeOutput(plan, plan_json(plan), plan.synthesis_instruction)


NODE_CLASS_MAPPINGS = {
    "ReSpecControllerPrompt": ReSpecControllerPrompt,
    "ReSpecPlanFromText": ReSpecPlanFromText,
}
NODE_DISPLAY_NAME_MAPPINGS = {
    "ReSpecControllerPrompt": "Controller Prompt (ReSpec)",
    "ReSpecPlanFromText": "Plan from Text (ReSpec)",
}
