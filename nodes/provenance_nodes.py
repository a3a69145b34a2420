"""Beyond the paper: the provenance Reference Selector (no VLM) and Reveal Composite (exact reveal).
The logic lives in respec/controller/provenance_selector.py, respec/post_edit/reveal_step.py and
respec/pixels/reveal.py; these classes only translate."""
from __future__ import annotations

import json

import numpy as np

from ..respec import comfy
from ..respec.controller import decide_restoration
from ..respec.controller.provenance_selector import provenance_selection
from ..respec.pixels.reveal import exact_patch
from ..respec.post_edit.reveal_step import reveal_result, reveal_turn
from .boundary import history_in, optional_plan_in, plan_for_history
from .common import HISTORY, PLAN, image_from_comfy, images_to_comfy, masks_to_comfy
from .controller_nodes import (GROUND_TRUTH_INPUT, HISTORY_INPUT, REQUEST_INPUT, RESTORATION_MODE_INPUT, plan_json,
                               selection_outputs)

CATEGORY = "ReSpec/provenance"
REVEAL = "RESPEC_REVEAL"   # what Reveal Composite did (for History Append to keep with the turn)


class ReSpecProvenanceSelector:
    """Pick the editor's images from the history's own change masks, with no VLM (beyond the paper)."""

    CATEGORY = CATEGORY
    FUNCTION = "select"
    SEARCH_ALIASES = ["provenance", "reference", "no vlm", "restore", "reveal", "occlusion"]
    RETURN_TYPES = (PLAN, "IMAGE", "IMAGE", "STRING", "STRING", "STRING")
    RETURN_NAMES = ("plan", "editor_images", "current_image", "image_ids", "instruction", "plan_json")
    OUTPUT_TOOLTIPS = ("This turn's plan (no VLM call; or the connected plan with provenance's ids).",
                       "The images for the editor in order (I_{k-1}, then the current image), resized to the "
                       "current image's size; the current image alone when no reference is used.",
                       "The current image I_{t-1}; its size is the edit's output size.",
                       "JSON list of the chosen image ids (0 = original).",
                       "The editor's instruction: the request plus 'revealing what was there in the first "
                       "image exactly as it was' on restoration turns (or the connected plan's instruction).",
                       "The plan as JSON, with the provenance evidence.")
    DESCRIPTION = ("On a restoration turn, finds the earlier turn k that covered what the request reveals: the "
                   "turn whose added object the request names, confirmed by the pixels that turn changed (or, "
                   "when the request names nothing, the turn that changed a part of the picture), and gives the "
                   "editor I_{k-1} (the latest image before it) and the current image. No VLM call. With a plan "
                   "from Preservation Target connected, that plan's instruction is kept and only its image ids "
                   "are replaced (hybrid); when the evidence is ambiguous the plan's ids stand.")

    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {
                "history": HISTORY_INPUT,
                "instruction": REQUEST_INPUT,
                "restoration_mode": RESTORATION_MODE_INPUT,
                "use_history_reference": ("BOOLEAN", {"default": True, "tooltip":
                                          "HRS: on restoration turns give the editor I_{k-1} and the current "
                                          "image. Off: only the current image (ablation)."}),
            },
            "optional": {
                "plan": (PLAN, {"tooltip": "Optional: a Preservation Target plan for this turn (hybrid: the VLM "
                                "writes the instruction, provenance picks the images)."}),
                "is_restoration": GROUND_TRUTH_INPUT,
            },
            "hidden": {"unique_id": "UNIQUE_ID"},
        }

    def select(self, history, instruction, restoration_mode, use_history_reference, plan=None,
               is_restoration=None, unique_id=None):
        history = history_in(history)
        if plan is not None:
            plan, history = plan_for_history(plan, history, "provenance Reference Selector")
        flag, meta = decide_restoration(restoration_mode, history, instruction, is_restoration)
        plan, chosen = provenance_selection(history, instruction, flag, plan, use_history_reference)
        comfy.send_event("plan", {"node": unique_id, "plan": plan.to_dict()})
        editor_images, current, ids = selection_outputs(chosen, plan, unique_id)
        return (plan, editor_images, current, ids, plan.synthesis_instruction, plan_json(plan))


class ReSpecRevealComposite:
    """Put the hidden pixels back exactly where the scene's geometry held (beyond the paper)."""

    CATEGORY = CATEGORY
    FUNCTION = "composite"
    SEARCH_ALIASES = ["reveal", "restore", "paste", "composite", "occlusion", "exact"]
    RETURN_TYPES = ("IMAGE", REVEAL, "MASK", "STRING")
    RETURN_NAMES = ("image", "reveal", "source_mask", "report")
    OUTPUT_TOOLTIPS = ("I_t with I_{k-1}'s pixels in the revealed region (or I_t unchanged when it refused).",
                       "What was pasted from where: connect it to History Append to keep it with the turn, and to "
                       "the Drift Guard (its paste then keeps I_{k-1}'s own pixels inside).",
                       "Weight of the pasted historical pixels per pixel (1 = I_{k-1}, 0 = the editor's).",
                       "JSON: applied or not and why, the covering turn, the geometry check's numbers.")
    DESCRIPTION = ("After the editor: finds the pixels turn k covered that the edit revealed (they changed and "
                   "now look more like I_{k-1} than like the occluder), checks that the scene did not move "
                   "around them (a ring of untouched pixels must match I_{k-1} within the editor's own noise, "
                   "at no shift), and if so pastes I_{k-1}'s pixels there in the edit's colours with a soft seam. "
                   "Otherwise the edit is kept unchanged and the report says why. Other turns pass through.")

    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {
                "history": (HISTORY, {"tooltip": "The history before this turn (the one the edit was made from)."}),
                "image": ("IMAGE", {"tooltip": "The editor's output I_t (one image)."}),
                "instruction": ("STRING", {"multiline": True, "default": "", "tooltip":
                                "This turn's request P_t (finds the covering turn when no plan names it)."}),
                "enabled": ("BOOLEAN", {"default": True, "tooltip":
                            "Off: pass the edit through unchanged (compare with and without). Only "
                            "restoration turns are composited."}),
                "restoration_mode": RESTORATION_MODE_INPUT,
            },
            "optional": {
                "plan": (PLAN, {"tooltip": "This turn's plan (its provenance evidence or restoration source "
                                "helps find the covering turn)."}),
                "is_restoration": GROUND_TRUTH_INPUT,
            },
        }

    def composite(self, history, image, instruction, enabled, restoration_mode, plan=None, is_restoration=None):
        history, plan = history_in(history), optional_plan_in(plan)
        edited = image_from_comfy(image, "image")
        empty = np.zeros(edited.shape[:2], np.float32)
        if not enabled:
            entry = {"applied": False, "reason": "switched off"}
            return (image, reveal_result(None, entry), masks_to_comfy([empty]), json.dumps(entry))
        flag, _ = decide_restoration(restoration_mode, history, instruction, is_restoration)
        res, entry = reveal_turn(history, edited, plan, instruction, flag)
        if res is None or not res.applied:
            return (image, reveal_result(res, entry), masks_to_comfy([empty]), json.dumps(entry))
        value = reveal_result(res, entry, exact=exact_patch(history, res.source_weight, res.record()))
        return (images_to_comfy([res.image]), value, masks_to_comfy([res.source_weight]), json.dumps(entry))


NODE_CLASS_MAPPINGS = {
    "ReSpecProvenanceSelector": ReSpecProvenanceSelector,
    "ReSpecRevealComposite": ReSpecRevealComposite,
}
NODE_DISPLAY_NAME_MAPPINGS = {
    "ReSpecProvenanceSelector": "Reference Selector, provenance (ReSpec)",
    "ReSpecRevealComposite": "Reveal Composite (ReSpec)",
}
