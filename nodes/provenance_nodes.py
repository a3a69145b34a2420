"""Beyond the paper: the provenance Reference Selector (no VLM) and Reveal Composite (exact reveal).
The logic lives in respec/controller/provenance_selector.py, respec/post_edit/reveal_step.py and
respec/pixels/reveal.py; these classes only translate."""
from __future__ import annotations

import json

import numpy as np

from ..respec import comfy
from ..respec.comfy import io, node_schema
from ..respec.controller import decide_restoration
from ..respec.controller.provenance_selector import provenance_selection
from ..respec.pixels.reveal import exact_patch
from ..respec.post_edit.reveal_step import reveal_result, reveal_turn
from .boundary import history_in, optional_plan_in, plan_for_history
from .common import History, Plan, image_from_comfy, images_to_comfy, masks_to_comfy
from .controller_nodes import (ground_truth_input, history_input, plan_json, request_input,
                               restoration_mode_input, selection_outputs)

CATEGORY = "ReSpec/provenance"
REVEAL = "RESPEC_REVEAL"   # what Reveal Composite did (for History Append to keep with the turn)
Reveal = io.Custom(REVEAL)


class ReSpecProvenanceSelector(io.ComfyNode):
    """Pick the editor's images from the history's own change masks, with no VLM (beyond the paper)."""

    @classmethod
    def define_schema(cls):
        return node_schema(
            node_id="ReSpecProvenanceSelector", display_name="Reference Selector, provenance (ReSpec)",
            category=CATEGORY,
            description=("On a restoration turn, finds the earlier turn k that covered what the request reveals: "
                         "the turn whose added object the request names, confirmed by the pixels that turn "
                         "changed (or, when the request names nothing, the turn that changed a part of the "
                         "picture), and gives the editor I_{k-1} (the latest image before it) and the current "
                         "image. No VLM call. With a plan from Preservation Target connected, that plan's "
                         "instruction is kept and only its image ids are replaced (hybrid); when the evidence is "
                         "ambiguous the plan's ids stand."),
            search_aliases=["provenance", "reference", "no vlm", "restore", "reveal", "occlusion"],
            inputs=[
                history_input(),
                request_input(),
                restoration_mode_input(),
                io.Boolean.Input(id="use_history_reference", default=True, tooltip=(
                    "HRS: on restoration turns give the editor I_{k-1} and the current image. Off: only the "
                    "current image (ablation).")),
                Plan.Input(id="plan", optional=True, tooltip=(
                    "Optional: a Preservation Target plan for this turn (hybrid: the VLM writes the "
                    "instruction, provenance picks the images).")),
                ground_truth_input(),
            ],
            outputs=[
                Plan.Output(id="plan", tooltip="This turn's plan (no VLM call; or the connected plan with "
                                               "provenance's ids)."),
                io.Image.Output(id="editor_images", tooltip=(
                    "The images for the editor in order (I_{k-1}, then the current image), resized to the "
                    "current image's size; the current image alone when no reference is used.")),
                io.Image.Output(id="current_image",
                                tooltip="The current image I_{t-1}; its size is the edit's output size."),
                io.String.Output(id="image_ids", tooltip="JSON list of the chosen image ids (0 = original)."),
                io.String.Output(id="instruction", tooltip=(
                    "The editor's instruction: the request plus 'revealing what was there in the first image "
                    "exactly as it was' on restoration turns (or the connected plan's instruction).")),
                io.String.Output(id="plan_json", tooltip="The plan as JSON, with the provenance evidence."),
            ],
            hidden=[io.Hidden.unique_id])

    @classmethod
    def execute(cls, history, instruction, restoration_mode, use_history_reference, plan=None,
                is_restoration=None):
        unique_id = cls.hidden.unique_id
        history = history_in(history)
        if plan is not None:
            plan, history = plan_for_history(plan, history, "provenance Reference Selector")
        flag, meta = decide_restoration(restoration_mode, history, instruction, is_restoration)
        plan, chosen = provenance_selection(history, instruction, flag, plan, use_history_reference)
        comfy.send_event("plan", {"node": unique_id, "plan": plan.to_dict()})
        editor_images, current, ids = selection_outputs(chosen, plan, unique_id)
        return io.NodeOutput(plan, editor_images, current, ids, plan.synthesis_instruction, plan_json(plan))


class ReSpecRevealComposite(io.ComfyNode):
    """Put the hidden pixels back exactly where the scene's geometry held (beyond the paper)."""

    @classmethod
    def define_schema(cls):
        return node_schema(
            node_id="ReSpecRevealComposite", display_name="Reveal Composite (ReSpec)", category=CATEGORY,
            description=("After the editor: finds the pixels turn k covered that the edit revealed (they changed "
                         "and now look more like I_{k-1} than like the occluder), checks that the scene did not "
                         "move around them (a ring of untouched pixels must match I_{k-1} within the editor's "
                         "own noise, at no shift), and if so pastes I_{k-1}'s pixels there in the edit's colours "
                         "with a soft seam. Otherwise the edit is kept unchanged and the report says why. Other "
                         "turns pass through."),
            search_aliases=["reveal", "restore", "paste", "composite", "occlusion", "exact"],
            inputs=[
                History.Input(id="history",
                              tooltip="The history before this turn (the one the edit was made from)."),
                io.Image.Input(id="image", tooltip="The editor's output I_t (one image)."),
                io.String.Input(id="instruction", multiline=True, default="", tooltip=(
                    "This turn's request P_t (finds the covering turn when no plan names it).")),
                io.Boolean.Input(id="enabled", default=True, tooltip=(
                    "Off: pass the edit through unchanged (compare with and without). Only restoration turns "
                    "are composited.")),
                restoration_mode_input(),
                Plan.Input(id="plan", optional=True, tooltip=(
                    "This turn's plan (its provenance evidence or restoration source helps find the covering "
                    "turn).")),
                ground_truth_input(),
            ],
            outputs=[
                io.Image.Output(id="image", tooltip=(
                    "I_t with I_{k-1}'s pixels in the revealed region (or I_t unchanged when it refused).")),
                Reveal.Output(id="reveal", tooltip=(
                    "What was pasted from where: connect it to History Append to keep it with the turn, and to "
                    "the Drift Guard (its paste then keeps I_{k-1}'s own pixels inside).")),
                io.Mask.Output(id="source_mask", tooltip=(
                    "Weight of the pasted historical pixels per pixel (1 = I_{k-1}, 0 = the editor's).")),
                io.String.Output(id="report", tooltip=(
                    "JSON: applied or not and why, the covering turn, the geometry check's numbers.")),
            ])

    @classmethod
    def execute(cls, history, image, instruction, enabled, restoration_mode, plan=None, is_restoration=None):
        history, plan = history_in(history), optional_plan_in(plan)
        edited = image_from_comfy(image, "image")
        empty = np.zeros(edited.shape[:2], np.float32)
        if not enabled:
            entry = {"applied": False, "reason": "switched off"}
            return io.NodeOutput(image, reveal_result(None, entry), masks_to_comfy([empty]), json.dumps(entry))
        flag, _ = decide_restoration(restoration_mode, history, instruction, is_restoration)
        res, entry = reveal_turn(history, edited, plan, instruction, flag)
        if res is None or not res.applied:
            return io.NodeOutput(image, reveal_result(res, entry), masks_to_comfy([empty]), json.dumps(entry))
        value = reveal_result(res, entry, exact=exact_patch(history, res.source_weight, res.record()))
        return io.NodeOutput(images_to_comfy([res.image]), value, masks_to_comfy([res.source_weight]),
                             json.dumps(entry))


NODE_CLASS_MAPPINGS = {
    "ReSpecProvenanceSelector": ReSpecProvenanceSelector,
    "ReSpecRevealComposite": ReSpecRevealComposite,
}
NODE_DISPLAY_NAME_MAPPINGS = {
    "ReSpecProvenanceSelector": "Reference Selector, provenance (ReSpec)",
    "ReSpecRevealComposite": "Reveal Composite (ReSpec)",
}
