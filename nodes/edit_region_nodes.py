"""Beyond the paper: the edit region a request names, for the Drift Guard's MASK input. The phrase
rule lives in respec/controller/ (the request's words), the mask rule in respec/pixels/named_region.py;
these classes only translate. Between them the graph runs ComfyUI's SAM3 (CLIP Text Encode of the
phrase -> SAM3_Detect on I_(t-1) and I_t)."""
from __future__ import annotations

import json

from ..respec.comfy import io, node_schema
from ..respec.controller.request_language import object_phrase
from ..respec.pixels.named_region import MARGIN_FRAC, edit_region
from .boundary import optional_plan_in
from .common import Plan, image_from_comfy, masks_from_comfy, masks_to_comfy

CATEGORY = "ReSpec/provenance"


class ReSpecEditRegionFromText(io.ComfyNode):
    """The object phrase a request asks to change: what SAM3 should segment."""

    @classmethod
    def define_schema(cls):
        return node_schema(
            node_id="ReSpecEditRegionFromText", display_name="Edit Region from Text (ReSpec)", category=CATEGORY,
            description=("Reads the request (or the plan's request) for the object it asks to change: what an "
                         "add, replace, recolour, move or remove clause names ('add a red hat on the dog' -> "
                         "'red hat'; 'replace the cup with a vase' -> 'cup'). A global request (lighting, style, "
                         "the whole picture) names none: the phrase is empty and the guard decides alone."),
            search_aliases=["edit region", "sam3", "object", "phrase", "drift", "guard", "mask from text"],
            inputs=[
                io.String.Input(id="instruction", optional=True, multiline=None, force_input=True, default="",
                                tooltip="This turn's request P_t."),
                Plan.Input(id="plan", optional=True, tooltip=(
                    "This turn's plan: its user request is read when no instruction is connected.")),
            ],
            outputs=[io.String.Output(id="phrase", tooltip=(
                "The object the request changes ('' for a global request), for 'CLIP Text Encode' with SAM3's "
                "CLIP and for 'Edit Region Mask (ReSpec)'."))])

    @classmethod
    def execute(cls, instruction="", plan=None):
        plan = optional_plan_in(plan)
        text = instruction or (plan.user_instruction if plan is not None else "")
        return io.NodeOutput(object_phrase(text or "") or "")


class ReSpecEditRegionMask(io.ComfyNode):
    """The Drift Guard's MASK: the turn's change inside the (grown) object the request names."""

    @classmethod
    def define_schema(cls):
        return node_schema(
            node_id="ReSpecEditRegionMask", display_name="Edit Region Mask (ReSpec)", category=CATEGORY,
            description=("The change mask keeps whatever the editor re-drew; the request says what the turn "
                         "changes. This keeps the turn's change only inside the object SAM3 found for the phrase "
                         "(in the previous image and in the edit), grown by a margin, holes filled; the Drift "
                         "Guard then restores the previous image's pixels everywhere else. Nothing found, or "
                         "nothing changed there: an empty mask, and the guard decides from its own change mask."),
            search_aliases=["edit region", "sam3", "drift", "guard", "mask"],
            inputs=[
                io.Image.Input(id="previous", tooltip="I_(t-1): the image the edit was made from."),
                io.Image.Input(id="edited", tooltip="I_t: the edit (after Reveal Composite when it runs)."),
                io.String.Input(id="phrase", multiline=None, force_input=True,
                                tooltip="From 'Edit Region from Text (ReSpec)'."),
                io.Float.Input(id="margin", default=MARGIN_FRAC, min=0.0, max=0.5, step=0.005, tooltip=(
                    "The object mask is grown by this share of the shorter side (a shadow, a hand).")),
                io.Mask.Input(id="object_masks", optional=True, tooltip=(
                    "SAM3_Detect's masks of the phrase on [I_(t-1), I_t] (a batch of two, individual_masks "
                    "off).")),
            ],
            outputs=[
                io.Mask.Output(id="mask", tooltip=(
                    "For the Drift Guard's mask input: the change inside the named object, grown by the margin "
                    "(empty when the object was not found or did not change: the guard then decides alone).")),
                io.String.Output(id="report", tooltip="One line of what it did, then its record as JSON."),
            ])

    @classmethod
    def execute(cls, previous, edited, phrase, margin, object_masks=None):
        masks = masks_from_comfy(object_masks) if object_masks is not None else []
        res = edit_region(image_from_comfy(previous, "previous"), image_from_comfy(edited, "edited"), phrase,
                          masks, margin)
        return io.NodeOutput(masks_to_comfy([res.mask]), res.record["reason"] + "\n" + json.dumps(res.record))


NODE_CLASS_MAPPINGS = {
    "ReSpecEditRegionFromText": ReSpecEditRegionFromText,
    "ReSpecEditRegionMask": ReSpecEditRegionMask,
}
NODE_DISPLAY_NAME_MAPPINGS = {
    "ReSpecEditRegionFromText": "Edit Region from Text (ReSpec)",
    "ReSpecEditRegionMask": "Edit Region Mask (ReSpec)",
}
