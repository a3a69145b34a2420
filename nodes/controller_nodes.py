"""The controller stage: load a VLM, make the turn's plan (Preservation Target), pick the
editor's images (Reference Selector) and its instruction (Instruction Rewriter).
The logic lives in respec/controller/; these classes only translate."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..respec import comfy, models, paths
from ..respec.comfy import io, node_schema
from ..respec.controller import (DEFAULT_MAX_NEW_TOKENS, DEFAULT_MAX_PIXELS, RESTORATION_MODES,
                                 PlanOptions, decide_restoration, load_backend, load_templates, plan_turn,
                                 rewrite_instruction, select_references, skips_controller)
from ..respec.controller.backends import DEFAULT_MODELS
from ..respec.controller.backends.openai_compat import RESPONSE_FORMATS
from ..respec.controller.backends.transformers_vlm import QUANTIZATIONS, resolve_model_dir
from ..respec.controller.history_images import BOUNDED, DEFAULT_MAX_HISTORY_IMAGES, HISTORY_MODES, MIN_HISTORY_IMAGES
from ..respec.controller.prompts import template_fingerprint
from ..respec.controller.request import ON_PARSE_FAILURE, REQUEST
from ..respec.errors import InputError
from ..respec.images import as_array, as_rgb, resize
from .boundary import controller_in, history_in, plan_for_history, plan_in
from .common import HISTORY, History, Plan, Vlm, images_to_comfy, validate_loader

CATEGORY = "ReSpec/controller"
# The max_pixels widget every node that sends history images to a controller shares (the VLM
# loaders here, Controller Prompt in textgen_nodes.py): one budget, one tooltip.
def max_pixels_input():
    return io.Int.Input(id="max_pixels", default=DEFAULT_MAX_PIXELS, min=3136, max=16_777_216, step=3136, tooltip=
                        "Pixel budget per history image sent to the VLM (width x height); larger images are "
                        "shrunk keeping their aspect. 262144 = 512x512.")


def _max_new_tokens_input():
    return io.Int.Input(id="max_new_tokens", default=DEFAULT_MAX_NEW_TOKENS, min=16, max=8192, tooltip=
                        "Cap on the tokens the VLM may generate per call (the JSON plan needs a few hundred).")


BUILTIN = "(built-in)"
_TEMPLATE_SUFFIXES = (".txt", ".md", ".jinja")


def on_parse_failure_input(optional: bool = False):
    """Shared by every node that turns a controller answer into a plan (respec/controller/request.py)."""
    return io.Combo.Input(id="on_parse_failure", options=list(ON_PARSE_FAILURE), default=REQUEST, optional=optional,
                          tooltip="When the controller's answer holds no JSON: 'request' sends your own words to the "
                          "editor (conversations); 'paper' sends the answer's raw text, appendix C.2's rule "
                          "(the benchmark graphs). The plan's fallbacks record it.")


def template_choices() -> list[str]:
    """The template drop-down: the built-in prompt, then the files in user/respec/templates."""
    return [BUILTIN] + paths.list_files(paths.templates_dir(), _TEMPLATE_SUFFIXES)


def template_inputs() -> list:
    """The restoration and mid-turn prompt drop-downs (Preservation Target, Controller Prompt)."""
    where = "built-in, or a UTF-8 text file you put in ComfyUI's user/respec/templates folder."
    return [io.Combo.Input(id="restoration_template", options=template_choices(), default=BUILTIN,
                           tooltip="The restoration prompt: " + where),
            io.Combo.Input(id="midturn_template", options=template_choices(), default=BUILTIN,
                           tooltip="The mid-turn rewrite prompt: " + where)]


def template_path(choice: str, kind: str) -> Path | None:
    """None for the built-in prompt, else the chosen file, which must lie in user/respec/templates."""
    if (choice or "").strip() in ("", BUILTIN):
        return None
    return paths.confine(choice, paths.templates_dir(), f"the {kind} prompt template")


def templates_fingerprint(restoration_template: str, midturn_template: str):
    """Changes when an override template file's text changes (the nodes' fingerprint_inputs)."""
    try:
        return template_fingerprint(template_path(restoration_template, "restoration"),
                                    template_path(midturn_template, "mid-turn"))
    except InputError:
        return float("nan")  # the run itself reports the refused path


BACKENDS = ["qwen3-vl", "internvl3"]
LLM_KNOWN = [DEFAULT_MODELS["qwen3-vl"], DEFAULT_MODELS["internvl3"]]   # valid before a download


def _llm_choices() -> tuple[list[str], dict]:
    """What is installed first (the known Hugging Face ids in the local cache, the folders in
    models/LLM), then the known ids that are not (valid before a download); and the options that
    say which are installed (models.installed_first)."""
    return models.installed_first("LLM", LLM_KNOWN)


def plan_json(plan) -> str:
    """The plan as indented JSON (what the plan_json output shows)."""
    return json.dumps(plan.to_dict(), indent=2, ensure_ascii=False, default=str)


def plan_outputs(plan_tooltip: str) -> list:
    """The outputs of a node that makes the turn's plan (Preservation Target, Plan from Text)."""
    return [Plan.Output(id="plan", tooltip=plan_tooltip),
            io.String.Output(id="plan_json", tooltip="The plan as JSON (for display or saving)."),
            io.String.Output(id="synthesis_instruction",
                             tooltip="The rewritten instruction (the user's request when no call was made).")]


def _vlm_output(tooltip: str):
    return Vlm.Output(id="vlm", tooltip=tooltip)


class ReSpecVLMLoader(io.ComfyNode):
    """Load a local VLM controller (Qwen3-VL or InternVL3) once and keep it for later prompts."""

    @classmethod
    def define_schema(cls):
        listed, installed = _llm_choices()
        return node_schema(
            node_id="ReSpecVLMLoader", display_name="VLM Controller Loader: Qwen3-VL / InternVL3 (ReSpec)",
            category=CATEGORY,
            description=("Loads the VLM that plans each turn (paper: Qwen3-VL-8B-Instruct). The model is a folder "
                         "in ComfyUI's models/LLM or a Hugging Face id found in the local cache (downloaded only "
                         "with allow_download); inside ComfyUI its memory manager holds the weights. InternVL3 "
                         "needs the '-hf' checkpoints. Weights load once and are reused until the settings change."),
            inputs=[
                io.Combo.Input(id="backend", options=BACKENDS, default="qwen3-vl", tooltip=
                               "qwen3-vl: Qwen3-VL (the paper's controller). internvl3: InternVL3 '-hf' checkpoints."),
                io.Combo.Input(id="model", options=listed, default=DEFAULT_MODELS["qwen3-vl"],
                               extra_dict={k: v for k, v in installed.items() if k != "tooltip"}, tooltip=
                               "A model folder in ComfyUI's models/LLM (sub-folders and extra_model_paths.yaml "
                               "included), or a Hugging Face id (found in the local Hugging Face cache, downloaded "
                               "only with allow_download). " + installed["tooltip"]),
                io.Combo.Input(id="dtype", options=["auto", "bf16", "fp16", "fp32"], default="auto", tooltip=
                               "Weight precision. auto: bf16 on a GPU, fp32 on the CPU."),
                io.Combo.Input(id="device", options=["auto", "cpu", "cuda", "mps"], default="auto", tooltip=
                               "Where the VLM runs. auto: ComfyUI's device."),
                io.Boolean.Input(id="keep_loaded", default=True, tooltip=
                                 "On (default): the VLM stays on the GPU between calls while memory allows; inside "
                                 "ComfyUI its memory manager moves it out when the editor needs the room, so On "
                                 "costs nothing there. Off: outside ComfyUI the VLM is parked in CPU memory after "
                                 "every call, freeing ~16 GB (8B model) for the editor but moving it back on every "
                                 "turn (about 3 s a call). Inside ComfyUI the memory manager decides either way."),
                io.Boolean.Input(id="allow_download", default=False, tooltip=
                                 "Allow downloading a Hugging Face id that is not on this machine yet."),
                max_pixels_input(),
                _max_new_tokens_input(),
                io.Combo.Input(id="json_constrained", options=["auto", "on", "off"], default="auto", tooltip=
                               "Constrain decoding to the plan's JSON schema with xgrammar. auto: on when "
                               "xgrammar is installed."),
                io.Combo.Input(id="quantization", options=list(QUANTIZATIONS), default="none", tooltip=
                               "Load the weights quantised with bitsandbytes (CUDA only): 8-bit (~9 GB for the 8B "
                               "model) or 4-bit (~6 GB). Needs `pip install bitsandbytes`."),
                io.String.Input(id="hf_model", optional=True, default="", multiline=None, tooltip=
                                "A Hugging Face id (e.g. Qwen/Qwen3-VL-4B-Instruct) or a folder inside models/LLM; "
                                "overrides 'model' when set. Ids are found in the local Hugging Face cache, "
                                "downloaded only with allow_download; paths outside the LLM model folders are "
                                "refused."),
            ],
            outputs=[_vlm_output("The loaded controller; connect it to Preservation Target VLM (ReSpec).")])

    @classmethod
    def validate_inputs(cls, backend=None, model=None, allow_download=None, hf_model=""):
        """A model not on this machine, with downloads off, fails the prompt before anything loads."""
        def check():
            source = (paths.model_source(hf_model, "LLM", "the VLM loader's hf_model")
                      if (hf_model or "").strip() else model)
            if source is not None and allow_download is False and models.tiny_seed(source) is None:
                resolve_model_dir(backend or BACKENDS[0], source, allow_download=False)
        return validate_loader({"backend": BACKENDS, "model": models.listed("LLM", LLM_KNOWN)},
                               {"backend": backend, "model": model}, check)

    @classmethod
    def execute(cls, backend, model, dtype, device, keep_loaded, allow_download, max_pixels, max_new_tokens,
                json_constrained, quantization="none", hf_model=""):
        constrained = {"auto": "auto", "on": True, "off": False}[json_constrained]
        source = paths.model_source(hf_model, "LLM", "the VLM loader's hf_model") if (hf_model or "").strip() else model
        vlm = load_backend(backend, source, dtype=dtype, device=device,
                           keep_loaded=keep_loaded, allow_download=allow_download, max_pixels=max_pixels,
                           max_new_tokens=max_new_tokens, json_constrained=constrained, quantization=quantization)
        return io.NodeOutput(vlm)


class ReSpecOpenAIController(io.ComfyNode):
    """Use a VLM served behind an OpenAI-compatible chat-completions API as the controller."""

    @classmethod
    def define_schema(cls):
        return node_schema(
            node_id="ReSpecOpenAIController", display_name="OpenAI-compatible Controller (ReSpec)",
            category=CATEGORY,
            description=("A controller served by vLLM, Ollama, LM Studio, llama.cpp or a hosted API. Images are "
                         "sent inline. The API key is read from the environment variable you name, so it is never "
                         "saved in the workflow."),
            inputs=[
                io.String.Input(id="base_url", default="http://127.0.0.1:8000/v1", multiline=None, tooltip=
                                "The API's base URL ending in /v1 (vLLM: http://127.0.0.1:8000/v1, Ollama: "
                                "http://127.0.0.1:11434/v1, LM Studio: http://127.0.0.1:1234/v1)."),
                io.String.Input(id="model", default="Qwen/Qwen3-VL-8B-Instruct", multiline=None, tooltip=
                                "The model name the server serves (see its /v1/models)."),
                io.String.Input(id="api_key_env", default="", multiline=None, tooltip=
                                "NAME of the environment variable holding the API key (e.g. OPENAI_API_KEY); "
                                "never the key itself. Empty: send no key (local servers)."),
                io.Int.Input(id="timeout", default=120, min=1, max=3600, tooltip=
                             "Seconds to wait for the server on each attempt."),
                io.Int.Input(id="retries", default=2, min=0, max=10, tooltip=
                             "Extra attempts after a timeout, a lost connection, HTTP 408/429 or 5xx "
                             "(waiting 1, 2, 4 ... s in between)."),
                max_pixels_input(),
                _max_new_tokens_input(),
                io.Combo.Input(id="response_format", options=list(RESPONSE_FORMATS), default="none", tooltip=
                               "Ask the server for JSON: json_schema (vLLM, recent Ollama / LM Studio), "
                               "json_object, or none (plain text; the plan parser copes)."),
            ],
            outputs=[_vlm_output("The remote controller; connect it to Preservation Target VLM (ReSpec).")])

    @classmethod
    def execute(cls, base_url, model, api_key_env, timeout, retries, max_pixels, max_new_tokens, response_format):
        vlm = load_backend("openai", model, base_url=base_url, api_key_env=api_key_env, timeout=timeout,
                           retries=retries, max_pixels=max_pixels, max_new_tokens=max_new_tokens,
                           response_format=response_format)
        return io.NodeOutput(vlm)


# Inputs the controller-stage nodes share (Preservation Target, Controller Prompt, the provenance nodes).
_HISTORY_TOOLTIP = "The editing history up to the previous turn (I_0 ... I_{t-1})."
_REQUEST_TOOLTIP = "This turn's request P_t, as the user wrote it."
_RESTORATION_MODE_TOOLTIP = ("Is this a restoration turn (the request uncovers something an earlier edit hid)? "
                             "auto: decided from the requests' words (a remove / move / shrink / replace verb "
                             "acting on something an earlier turn added). Or force it either way.")
_GROUND_TRUTH_TOOLTIP = ("Ground-truth restoration flag (the benchmark's revelation turn). When connected it "
                         "overrides restoration_mode.")


def history_input():
    return History.Input(id="history", tooltip=_HISTORY_TOOLTIP)


def request_input():
    return io.String.Input(id="instruction", multiline=True, default="", tooltip=_REQUEST_TOOLTIP)


def restoration_mode_input():
    return io.Combo.Input(id="restoration_mode", options=list(RESTORATION_MODES), default="auto",
                          tooltip=_RESTORATION_MODE_TOOLTIP)


def ground_truth_input():
    return io.Boolean.Input(id="is_restoration", optional=True, force_input=True, default=False,
                            tooltip=_GROUND_TRUTH_TOOLTIP)


def plan_input():
    return Plan.Input(id="plan", tooltip="This turn's plan (Preservation Target).")


class ReSpecPreservationTarget(io.ComfyNode):
    """One controller call for this turn -> the plan (paper §4.1-4.3, appendix C)."""

    @classmethod
    def define_schema(cls):
        return node_schema(
            node_id="ReSpecPreservationTarget", display_name="Preservation Target VLM (ReSpec)", category=CATEGORY,
            search_aliases=["restore", "reveal", "occlusion", "controller", "planner", "vlm"],
            description=("Reads the editing history and this turn's request and asks the VLM, once, what must be "
                         "preserved: on a restoration turn it names the hidden content, the past image that shows "
                         "it and the anchor image, and rewrites the request; on other turns it only rewrites the "
                         "request. Turn 1 makes no call. The VLM never sees ground truth."),
            inputs=[
                history_input(),
                request_input(),
                Vlm.Input(id="vlm", lazy=True, tooltip=
                          "The controller (VLM Loader or OpenAI-compatible Controller). Only evaluated when a "
                          "call is needed: turn 1 and skipped turns never load it."),
                restoration_mode_input(),
                io.Boolean.Input(id="skip_non_restoration", default=False, tooltip=
                                 "On: non-restoration turns make no VLM call and pass the request through "
                                 "unchanged (saves time). Off: every turn after the first makes one call (the "
                                 "paper)."),
                *template_inputs(),
                ground_truth_input(),
                on_parse_failure_input(optional=True),
                io.Combo.Input(id="history_images", options=list(HISTORY_MODES), default=BOUNDED, optional=True,
                               tooltip="Which history images the VLM sees: 'bounded' at most max_history_images "
                               "(the original, the turns that changed what this request reveals and the image "
                               "before each, the latest), so long conversations stay fast; 'paper' every image, "
                               "as in the paper (the benchmark graphs)."),
                io.Int.Input(id="max_history_images", default=DEFAULT_MAX_HISTORY_IMAGES, min=MIN_HISTORY_IMAGES,
                             max=64, optional=True, tooltip="The most history images the VLM sees in 'bounded' "
                             "mode (the original and the latest always among them)."),
            ],
            outputs=plan_outputs("This turn's plan: preservation target, reference ids, rewritten instruction, "
                                 "fallbacks that fired."),
            hidden=[io.Hidden.unique_id])

    @classmethod
    def fingerprint_inputs(cls, restoration_template="", midturn_template="", **_inputs):
        """Re-run when an override template file's text changes (the other inputs are ComfyUI's
        own cache key already, so only the two template paths are read here)."""
        return templates_fingerprint(restoration_template, midturn_template)

    @classmethod
    def check_lazy_status(cls, history=None, instruction=None, vlm=None, restoration_mode=None,
                          skip_non_restoration=False, is_restoration=None, **_inputs):
        """Ask ComfyUI for the VLM only when this turn will call it (the inputs that decide it; the
        rest of the node's inputs arrive in `_inputs` and do not matter here)."""
        if vlm is not None or history is None or history_in(history).next_turn == 1:
            return []
        flag, _ = decide_restoration(restoration_mode, history, instruction, is_restoration)
        return [] if skips_controller(flag, skip_non_restoration) else ["vlm"]

    @classmethod
    def execute(cls, history, instruction, vlm, restoration_mode, skip_non_restoration, restoration_template,
                midturn_template, is_restoration=None, on_parse_failure=REQUEST, history_images=BOUNDED,
                max_history_images=DEFAULT_MAX_HISTORY_IMAGES):
        history = history_in(history)
        flag, meta = decide_restoration(restoration_mode, history, instruction, is_restoration)
        templates = load_templates(template_path(restoration_template, "restoration"),
                                   template_path(midturn_template, "mid-turn"))
        options = PlanOptions(skip_non_restoration=skip_non_restoration, templates=templates,
                              on_parse_failure=on_parse_failure, history_mode=history_images,
                              max_history_images=int(max_history_images))
        vlm = controller_in(vlm, history, flag, skip_non_restoration)
        plan = plan_turn(history, instruction, vlm, flag, options, meta={**meta, "restoration_mode": restoration_mode})
        comfy.send_event("plan", {"node": cls.hidden.unique_id, "plan": plan.to_dict()})
        return io.NodeOutput(plan, plan_json(plan), plan.synthesis_instruction)


class ReSpecReferenceSelector(io.ComfyNode):
    """The editor's images for this turn, in the plan's order (paper §4.2, appendix C.3)."""

    @classmethod
    def define_schema(cls):
        return node_schema(
            node_id="ReSpecReferenceSelector", display_name="Reference Selector (ReSpec)", category=CATEGORY,
            search_aliases=["reference", "restore", "reveal", "history image"],
            description=("Turns the plan into the editor's reference images. On restoration turns with HRS on it "
                         "passes the plan's image_ids that exist (none left: the latest image); otherwise the "
                         "current image alone. No model call."),
            inputs=[
                History.Input(id="history", tooltip="The same history the plan was made from."),
                plan_input(),
                io.Boolean.Input(id="use_history_reference", default=True, tooltip=
                                 "HRS: on restoration turns give the editor the historical reference and anchor "
                                 "images. Off: only the current image (ablation)."),
            ],
            outputs=[
                io.Image.Output(id="editor_images", tooltip=
                                "The images for the editor in order (restoration source, then identity anchor), "
                                "resized to the current image's size; the current image alone when no reference "
                                "is used."),
                io.Image.Output(id="current_image", tooltip=
                                "The current image I_{t-1}; its size is the edit's output size."),
                io.String.Output(id="image_ids", tooltip="JSON list of the chosen image ids (0 = original)."),
            ],
            hidden=[io.Hidden.unique_id])

    @classmethod
    def execute(cls, history, plan, use_history_reference):
        plan, history = plan_for_history(plan, history, "Reference Selector")
        return io.NodeOutput(*selection_outputs(select_references(history, plan, use_history_reference), plan,
                                                cls.hidden.unique_id))


def selection_outputs(chosen, plan, unique_id=None) -> tuple:
    """(editor_images, current_image, image_ids JSON) of a Selection, and the panel's
    `references` event: the images resized to the current image's size."""
    size = chosen.current.size
    refs = [as_array(resize(as_rgb(img.array), size)) for img in chosen.images]
    comfy.send_event("references", {"node": unique_id, "turn": plan.turn, "ids": chosen.ids,
                                    "digests": [img.digest for img in chosen.images],
                                    "fallbacks": chosen.fallbacks})
    return (images_to_comfy(refs), images_to_comfy([np.asarray(chosen.current.array)]), json.dumps(chosen.ids))


class ReSpecInstructionRewriter(io.ComfyNode):
    """The instruction the editor receives (paper §4.3)."""

    @classmethod
    def define_schema(cls):
        return node_schema(
            node_id="ReSpecInstructionRewriter", display_name="Instruction Rewriter (ReSpec)", category=CATEGORY,
            search_aliases=["rewrite", "prompt", "instruction"],
            description=("PTI on: the plan's restoration-aware synthesis instruction. PTI off: the user's own "
                         "request (ablation). With the Reference Selector's HRS switch this gives the paper's "
                         "table 2 rows: base, +HRS, +PTI, +PTI+HRS."),
            inputs=[
                plan_input(),
                io.Boolean.Input(id="use_pti", default=True, tooltip=
                                 "PTI: send the rewritten instruction that names what must be preserved. Off: send "
                                 "the user's request unchanged."),
            ],
            outputs=[io.String.Output(id="instruction", tooltip="The editor's instruction.")])

    @classmethod
    def execute(cls, plan, use_pti):
        return io.NodeOutput(rewrite_instruction(plan_in(plan), use_pti))


NODE_CLASS_MAPPINGS = {
    "ReSpecVLMLoader": ReSpecVLMLoader,
    "ReSpecOpenAIController": ReSpecOpenAIController,
    "ReSpecPreservationTarget": ReSpecPreservationTarget,
    "ReSpecReferenceSelector": ReSpecReferenceSelector,
    "ReSpecInstructionRewriter": ReSpecInstructionRewriter,
}
NODE_DISPLAY_NAME_MAPPINGS = {
    "ReSpecVLMLoader": "VLM Controller Loader: Qwen3-VL / InternVL3 (ReSpec)",
    "ReSpecOpenAIController": "OpenAI-compatible Controller (ReSpec)",
    "ReSpecPreservationTarget": "Preservation Target VLM (ReSpec)",
    "ReSpecReferenceSelector": "Reference Selector (ReSpec)",
    "ReSpecInstructionRewriter": "Instruction Rewriter (ReSpec)",
}
