"""The controller stage: load a VLM, make the turn's plan (Preservation Target), pick the
editor's images (Reference Selector) and its instruction (Instruction Rewriter).
The logic lives in respec/controller/; these classes only translate."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..respec import comfy, models, paths
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
from .common import HISTORY, PLAN, VLM, images_to_comfy, validate_loader

CATEGORY = "ReSpec/controller"
# The max_pixels widget every node that sends history images to a controller shares (the VLM
# loaders here, Controller Prompt in textgen_nodes.py): one budget, one tooltip.
MAX_PIXELS_OPTIONS = {"default": DEFAULT_MAX_PIXELS, "min": 3136, "max": 16_777_216, "step": 3136, "tooltip":
           "Pixel budget per history image sent to the VLM (width x height); larger images are shrunk "
           "keeping their aspect. 262144 = 512x512."}
_TOKENS = {"default": DEFAULT_MAX_NEW_TOKENS, "min": 16, "max": 8192, "tooltip":
           "Cap on the tokens the VLM may generate per call (the JSON plan needs a few hundred)."}


BUILTIN = "(built-in)"
_TEMPLATE_SUFFIXES = (".txt", ".md", ".jinja")
# Shared by every node that turns a controller answer into a plan (respec/controller/request.py).
ON_PARSE_FAILURE_INPUT = (list(ON_PARSE_FAILURE), {"default": REQUEST, "tooltip":
                          "When the controller's answer holds no JSON: 'request' sends your own words to the "
                          "editor (conversations); 'paper' sends the answer's raw text, appendix C.2's rule "
                          "(the benchmark graphs). The plan's fallbacks record it."})


def template_choices() -> list[str]:
    """The template drop-down: the built-in prompt, then the files in user/respec/templates."""
    return [BUILTIN] + paths.list_files(paths.templates_dir(), _TEMPLATE_SUFFIXES)


def template_path(choice: str, kind: str) -> Path | None:
    """None for the built-in prompt, else the chosen file, which must lie in user/respec/templates."""
    if (choice or "").strip() in ("", BUILTIN):
        return None
    return paths.confine(choice, paths.templates_dir(), f"the {kind} prompt template")


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


class ReSpecVLMLoader:
    """Load a local VLM controller (Qwen3-VL or InternVL3) once and keep it for later prompts."""

    CATEGORY = CATEGORY
    FUNCTION = "load"
    RETURN_TYPES = (VLM,)
    RETURN_NAMES = ("vlm",)
    OUTPUT_TOOLTIPS = ("The loaded controller; connect it to Preservation Target VLM (ReSpec).",)
    DESCRIPTION = ("Loads the VLM that plans each turn (paper: Qwen3-VL-8B-Instruct). The model is a folder "
                   "in ComfyUI's models/LLM or a Hugging Face id found in the local cache (downloaded only "
                   "with allow_download); inside ComfyUI its memory manager holds the weights. InternVL3 "
                   "needs the '-hf' checkpoints. Weights load once and are reused until the settings change.")

    @classmethod
    def INPUT_TYPES(cls):
        listed, installed = _llm_choices()
        return {"required": {
            "backend": (BACKENDS, {"default": "qwen3-vl", "tooltip":
                        "qwen3-vl: Qwen3-VL (the paper's controller). internvl3: InternVL3 '-hf' checkpoints."}),
            "model": (listed, {**installed, "default": DEFAULT_MODELS["qwen3-vl"], "tooltip":
                      "A model folder in ComfyUI's models/LLM (sub-folders and extra_model_paths.yaml "
                      "included), or a Hugging Face id (found in the local Hugging Face cache, downloaded only "
                      "with allow_download). " + installed["tooltip"]}),
            "dtype": (["auto", "bf16", "fp16", "fp32"], {"default": "auto", "tooltip":
                      "Weight precision. auto: bf16 on a GPU, fp32 on the CPU."}),
            "device": (["auto", "cpu", "cuda", "mps"], {"default": "auto", "tooltip":
                       "Where the VLM runs. auto: ComfyUI's device."}),
            "keep_loaded": ("BOOLEAN", {"default": True, "tooltip":
                            "On (default): the VLM stays on the GPU between calls while memory allows; inside "
                            "ComfyUI its memory manager moves it out when the editor needs the room, so On costs "
                            "nothing there. Off: outside ComfyUI the VLM is parked in CPU memory after every call, "
                            "freeing ~16 GB (8B model) for the editor but moving it back on every turn (about 3 s "
                            "a call). Inside ComfyUI the memory manager decides either way."}),
            "allow_download": ("BOOLEAN", {"default": False, "tooltip":
                               "Allow downloading a Hugging Face id that is not on this machine yet."}),
            "max_pixels": ("INT", dict(MAX_PIXELS_OPTIONS)),
            "max_new_tokens": ("INT", dict(_TOKENS)),
            "json_constrained": (["auto", "on", "off"], {"default": "auto", "tooltip":
                                 "Constrain decoding to the plan's JSON schema with xgrammar. auto: on when "
                                 "xgrammar is installed."}),
            "quantization": (list(QUANTIZATIONS), {"default": "none", "tooltip":
                             "Load the weights quantised with bitsandbytes (CUDA only): 8-bit (~9 GB for the 8B "
                             "model) or 4-bit (~6 GB). Needs `pip install bitsandbytes`."}),
        }, "optional": {
            "hf_model": ("STRING", {"default": "", "tooltip":
                         "A Hugging Face id (e.g. Qwen/Qwen3-VL-4B-Instruct) or a folder inside models/LLM; "
                         "overrides 'model' when set. Ids are found in the local Hugging Face cache, downloaded "
                         "only with allow_download; paths outside the LLM model folders are refused."}),
        }}

    @classmethod
    def VALIDATE_INPUTS(cls, backend=None, model=None, allow_download=None, hf_model=""):
        """A model not on this machine, with downloads off, fails the prompt before anything loads."""
        def check():
            source = (paths.model_source(hf_model, "LLM", "the VLM loader's hf_model")
                      if (hf_model or "").strip() else model)
            if source is not None and allow_download is False and models.tiny_seed(source) is None:
                resolve_model_dir(backend or BACKENDS[0], source, allow_download=False)
        return validate_loader({"backend": BACKENDS, "model": models.listed("LLM", LLM_KNOWN)},
                               {"backend": backend, "model": model}, check)

    def load(self, backend, model, dtype, device, keep_loaded, allow_download, max_pixels, max_new_tokens,
             json_constrained, quantization="none", hf_model=""):
        constrained = {"auto": "auto", "on": True, "off": False}[json_constrained]
        source = paths.model_source(hf_model, "LLM", "the VLM loader's hf_model") if (hf_model or "").strip() else model
        vlm = load_backend(backend, source, dtype=dtype, device=device,
                           keep_loaded=keep_loaded, allow_download=allow_download, max_pixels=max_pixels,
                           max_new_tokens=max_new_tokens, json_constrained=constrained, quantization=quantization)
        return (vlm,)


class ReSpecOpenAIController:
    """Use a VLM served behind an OpenAI-compatible chat-completions API as the controller."""

    CATEGORY = CATEGORY
    FUNCTION = "connect"
    RETURN_TYPES = (VLM,)
    RETURN_NAMES = ("vlm",)
    OUTPUT_TOOLTIPS = ("The remote controller; connect it to Preservation Target VLM (ReSpec).",)
    DESCRIPTION = ("A controller served by vLLM, Ollama, LM Studio, llama.cpp or a hosted API. Images are "
                   "sent inline. The API key is read from the environment variable you name, so it is never "
                   "saved in the workflow.")

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {
            "base_url": ("STRING", {"default": "http://127.0.0.1:8000/v1", "tooltip":
                         "The API's base URL ending in /v1 (vLLM: http://127.0.0.1:8000/v1, Ollama: "
                         "http://127.0.0.1:11434/v1, LM Studio: http://127.0.0.1:1234/v1)."}),
            "model": ("STRING", {"default": "Qwen/Qwen3-VL-8B-Instruct", "tooltip":
                      "The model name the server serves (see its /v1/models)."}),
            "api_key_env": ("STRING", {"default": "", "tooltip":
                            "NAME of the environment variable holding the API key (e.g. OPENAI_API_KEY); "
                            "never the key itself. Empty: send no key (local servers)."}),
            "timeout": ("INT", {"default": 120, "min": 1, "max": 3600, "tooltip":
                        "Seconds to wait for the server on each attempt."}),
            "retries": ("INT", {"default": 2, "min": 0, "max": 10, "tooltip":
                        "Extra attempts after a timeout, a lost connection, HTTP 408/429 or 5xx "
                        "(waiting 1, 2, 4 ... s in between)."}),
            "max_pixels": ("INT", dict(MAX_PIXELS_OPTIONS)),
            "max_new_tokens": ("INT", dict(_TOKENS)),
            "response_format": (list(RESPONSE_FORMATS), {"default": "none", "tooltip":
                                "Ask the server for JSON: json_schema (vLLM, recent Ollama / LM Studio), "
                                "json_object, or none (plain text; the plan parser copes)."}),
        }}

    def connect(self, base_url, model, api_key_env, timeout, retries, max_pixels, max_new_tokens,
                response_format):
        vlm = load_backend("openai", model, base_url=base_url, api_key_env=api_key_env, timeout=timeout,
                           retries=retries, max_pixels=max_pixels, max_new_tokens=max_new_tokens,
                           response_format=response_format)
        return (vlm,)


# Inputs the controller-stage nodes share (Preservation Target, the provenance nodes).
HISTORY_INPUT = (HISTORY, {"tooltip": "The editing history up to the previous turn (I_0 ... I_{t-1})."})
REQUEST_INPUT = ("STRING", {"multiline": True, "default": "", "tooltip":
                            "This turn's request P_t, as the user wrote it."})
RESTORATION_MODE_INPUT = (list(RESTORATION_MODES), {"default": "auto", "tooltip":
                          "Is this a restoration turn (the request uncovers something an earlier edit hid)? "
                          "auto: decided from the requests' words (a remove / move / shrink / replace verb "
                          "acting on something an earlier turn added). Or force it either way."})
GROUND_TRUTH_INPUT = ("BOOLEAN", {"forceInput": True, "default": False, "tooltip":
                      "Ground-truth restoration flag (the benchmark's revelation turn). When connected it "
                      "overrides restoration_mode."})


class ReSpecPreservationTarget:
    """One controller call for this turn -> the plan (paper §4.1-4.3, appendix C)."""

    CATEGORY = CATEGORY
    SEARCH_ALIASES = ["restore", "reveal", "occlusion", "controller", "planner", "vlm"]
    FUNCTION = "plan"
    RETURN_TYPES = (PLAN, "STRING", "STRING")
    RETURN_NAMES = ("plan", "plan_json", "synthesis_instruction")
    OUTPUT_TOOLTIPS = ("This turn's plan: preservation target, reference ids, rewritten instruction, "
                       "fallbacks that fired.",
                       "The plan as JSON (for display or saving).",
                       "The rewritten instruction (the user's request when no call was made).")
    DESCRIPTION = ("Reads the editing history and this turn's request and asks the VLM, once, what must be "
                   "preserved: on a restoration turn it names the hidden content, the past image that shows "
                   "it and the anchor image, and rewrites the request; on other turns it only rewrites the "
                   "request. Turn 1 makes no call. The VLM never sees ground truth.")

    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {
                "history": HISTORY_INPUT,
                "instruction": REQUEST_INPUT,
                "vlm": (VLM, {"lazy": True, "tooltip":
                        "The controller (VLM Loader or OpenAI-compatible Controller). Only evaluated when a "
                        "call is needed: turn 1 and skipped turns never load it."}),
                "restoration_mode": RESTORATION_MODE_INPUT,
                "skip_non_restoration": ("BOOLEAN", {"default": False, "tooltip":
                                         "On: non-restoration turns make no VLM call and pass the request "
                                         "through unchanged (saves time). Off: every turn after the first "
                                         "makes one call (the paper)."}),
                "restoration_template": (template_choices(), {"default": BUILTIN, "tooltip":
                                         "The restoration prompt: built-in, or a UTF-8 text file you put in "
                                         "ComfyUI's user/respec/templates folder."}),
                "midturn_template": (template_choices(), {"default": BUILTIN, "tooltip":
                                     "The mid-turn rewrite prompt: built-in, or a UTF-8 text file you put in "
                                     "ComfyUI's user/respec/templates folder."}),
            },
            "optional": {
                "is_restoration": GROUND_TRUTH_INPUT,
                "on_parse_failure": ON_PARSE_FAILURE_INPUT,
                "history_images": (list(HISTORY_MODES), {"default": BOUNDED, "tooltip":
                                   "Which history images the VLM sees: 'bounded' at most max_history_images "
                                   "(the original, the turns that changed what this request reveals and the "
                                   "image before each, the latest), so long conversations stay fast; 'paper' "
                                   "every image, as in the paper (the benchmark graphs)."}),
                "max_history_images": ("INT", {"default": DEFAULT_MAX_HISTORY_IMAGES, "min": MIN_HISTORY_IMAGES,
                                       "max": 64, "tooltip": "The most history images the VLM sees in "
                                       "'bounded' mode (the original and the latest always among them)."}),
            },
            "hidden": {"unique_id": "UNIQUE_ID"},
        }

    @classmethod
    def IS_CHANGED(cls, restoration_template="", midturn_template="", **_inputs):
        """Re-run when an override template file's text changes (the other inputs are ComfyUI's
        own cache key already, so only the two template paths are read here)."""
        try:
            return template_fingerprint(template_path(restoration_template, "restoration"),
                                        template_path(midturn_template, "mid-turn"))
        except InputError:
            return float("nan")  # the run itself reports the refused path

    def check_lazy_status(self, history=None, instruction=None, vlm=None, restoration_mode=None,
                          skip_non_restoration=False, is_restoration=None, **_inputs):
        """Ask ComfyUI for the VLM only when this turn will call it (the inputs that decide it; the
        rest of the node's inputs arrive in `_inputs` and do not matter here)."""
        if vlm is not None or history is None or history_in(history).next_turn == 1:
            return []
        flag, _ = decide_restoration(restoration_mode, history, instruction, is_restoration)
        return [] if skips_controller(flag, skip_non_restoration) else ["vlm"]

    def plan(self, history, instruction, vlm, restoration_mode, skip_non_restoration, restoration_template,
             midturn_template, is_restoration=None, on_parse_failure=REQUEST, history_images=BOUNDED,
             max_history_images=DEFAULT_MAX_HISTORY_IMAGES, unique_id=None):
        history = history_in(history)
        flag, meta = decide_restoration(restoration_mode, history, instruction, is_restoration)
        templates = load_templates(template_path(restoration_template, "restoration"),
                                   template_path(midturn_template, "mid-turn"))
        options = PlanOptions(skip_non_restoration=skip_non_restoration, templates=templates,
                              on_parse_failure=on_parse_failure, history_mode=history_images,
                              max_history_images=int(max_history_images))
        vlm = controller_in(vlm, history, flag, skip_non_restoration)
        plan = plan_turn(history, instruction, vlm, flag, options, meta={**meta, "restoration_mode": restoration_mode})
        comfy.send_event("plan", {"node": unique_id, "plan": plan.to_dict()})
        return (plan, plan_json(plan), plan.synthesis_instruction)


class ReSpecReferenceSelector:
    """The editor's images for this turn, in the plan's order (paper §4.2, appendix C.3)."""

    CATEGORY = CATEGORY
    SEARCH_ALIASES = ["reference", "restore", "reveal", "history image"]
    FUNCTION = "select"
    RETURN_TYPES = ("IMAGE", "IMAGE", "STRING")
    RETURN_NAMES = ("editor_images", "current_image", "image_ids")
    OUTPUT_TOOLTIPS = ("The images for the editor in order (restoration source, then identity anchor), "
                       "resized to the current image's size; the current image alone when no reference is used.",
                       "The current image I_{t-1}; its size is the edit's output size.",
                       "JSON list of the chosen image ids (0 = original).")
    DESCRIPTION = ("Turns the plan into the editor's reference images. On restoration turns with HRS on it "
                   "passes the plan's image_ids that exist (none left: the latest image); otherwise the "
                   "current image alone. No model call.")

    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {
                "history": (HISTORY, {"tooltip": "The same history the plan was made from."}),
                "plan": (PLAN, {"tooltip": "This turn's plan (Preservation Target)."}),
                "use_history_reference": ("BOOLEAN", {"default": True, "tooltip":
                                          "HRS: on restoration turns give the editor the historical reference "
                                          "and anchor images. Off: only the current image (ablation)."}),
            },
            "hidden": {"unique_id": "UNIQUE_ID"},
        }

    def select(self, history, plan, use_history_reference, unique_id=None):
        plan, history = plan_for_history(plan, history, "Reference Selector")
        return selection_outputs(select_references(history, plan, use_history_reference), plan, unique_id)


def selection_outputs(chosen, plan, unique_id=None) -> tuple:
    """(editor_images, current_image, image_ids JSON) of a Selection, and the panel's
    `references` event: the images resized to the current image's size."""
    size = chosen.current.size
    refs = [as_array(resize(as_rgb(img.array), size)) for img in chosen.images]
    comfy.send_event("references", {"node": unique_id, "turn": plan.turn, "ids": chosen.ids,
                                    "digests": [img.digest for img in chosen.images],
                                    "fallbacks": chosen.fallbacks})
    return (images_to_comfy(refs), images_to_comfy([np.asarray(chosen.current.array)]), json.dumps(chosen.ids))


class ReSpecInstructionRewriter:
    """The instruction the editor receives (paper §4.3)."""

    CATEGORY = CATEGORY
    SEARCH_ALIASES = ["rewrite", "prompt", "instruction"]
    FUNCTION = "rewrite"
    RETURN_TYPES = ("STRING",)
    RETURN_NAMES = ("instruction",)
    OUTPUT_TOOLTIPS = ("The editor's instruction.",)
    DESCRIPTION = ("PTI on: the plan's restoration-aware synthesis instruction. PTI off: the user's own "
                   "request (ablation). With the Reference Selector's HRS switch this gives the paper's "
                   "table 2 rows: base, +HRS, +PTI, +PTI+HRS.")

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {
            "plan": (PLAN, {"tooltip": "This turn's plan (Preservation Target)."}),
            "use_pti": ("BOOLEAN", {"default": True, "tooltip":
                        "PTI: send the rewritten instruction that names what must be preserved. Off: send "
                        "the user's request unchanged."}),
        }}

    def rewrite(self, plan, use_pti):
        return (rewrite_instruction(plan_in(plan), use_pti),)


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
