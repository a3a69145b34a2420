"""Occluder masks on ComfyUI's own SAM3 (0.24+): appendix B.1's query chain and acceptance around
`SAM3_Detect`. The rules live in respec/eval/sam3_masks.py; these classes only translate. They need
no eval extra (no AGPL package): SAM3 is ComfyUI's."""
from __future__ import annotations

import json

from ..respec.eval.masks import ACCEPT_CONF
from ..respec.eval.sam3_masks import SAM3_THRESHOLD, accept_detections, sam3_prompt, split_per_image
from ..respec.images import resize_mask
from ..respec.records import json_safe
from .common import images_from_comfy, masks_to_comfy

CATEGORY = "ReSpec/evaluation"
BOUNDING_BOX = "BOUNDING_BOX"   # SAM3_Detect's second output: one list of box dicts per image


class ReSpecSam3Query:
    """A label's B.1 query chain as one SAM3 text prompt."""

    CATEGORY = CATEGORY
    SEARCH_ALIASES = ["sam3", "segment anything", "occlusion", "mask", "query"]
    FUNCTION = "query"
    RETURN_TYPES = ("STRING", "STRING")
    RETURN_NAMES = ("prompt", "label")
    OUTPUT_TOOLTIPS = ("For 'CLIP Text Encode' with SAM3's CLIP: the label, its last word and that word's "
                       "singular, separated by commas (SAM3 detects each part on its own).",
                       "The label, for 'Occluder Mask, SAM3 (ReSpec)'.")
    DESCRIPTION = ("Appendix B.1's query fallbacks for ComfyUI's SAM3: the label, then its last word, then that "
                   "word's singular, written as one SAM3 prompt so SAM3_Detect runs one detection per query. Run "
                   f"SAM3_Detect at threshold {SAM3_THRESHOLD:g} with individual_masks on; 'Occluder Mask, SAM3' then "
                   "accepts the first query whose score reaches B.1's threshold.")

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {
            "label": ("STRING", {"default": "bouquet of flowers", "tooltip":
                      "The object to find, e.g. the scenario's occluder ('bouquet of flowers')."}),
        }}

    def query(self, label):
        return (sam3_prompt(label), label)


class ReSpecSam3OccluderMask:
    """B.1's acceptance on SAM3_Detect's objects: the label's mask per image, or an all-zero mask."""

    CATEGORY = CATEGORY
    SEARCH_ALIASES = ["sam3", "occlusion", "mask", "segmentation"]
    FUNCTION = "mask"
    RETURN_TYPES = ("MASK", "STRING")
    RETURN_NAMES = ("mask", "record")
    OUTPUT_TOOLTIPS = ("The object's mask per image (all zero when no query was accepted).",
                       "JSON per image: accepted query, fallback stage, score, box, every query's score.")
    DESCRIPTION = ("The Occluder Mask route on ComfyUI's SAM3 (no YOLO-World): of the objects SAM3_Detect "
                   "returned for 'SAM3 Query (ReSpec)'s prompt (one per query, in order), the first whose "
                   "score reaches the threshold (B.1: 0.2) gives the mask. The paper-exact benchmark uses "
                   "YOLO-World + SAM-H.")

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {
            "image": ("IMAGE", {"tooltip": "The image(s) given to SAM3_Detect."}),
            "masks": ("MASK", {"tooltip": "SAM3_Detect's masks (individual_masks on)."}),
            "bboxes": (BOUNDING_BOX, {"forceInput": True, "tooltip": "SAM3_Detect's bboxes (their scores decide)."}),
            "label": ("STRING", {"forceInput": True, "tooltip": "The label, from 'SAM3 Query (ReSpec)'."}),
            "accept_threshold": ("FLOAT", {"default": ACCEPT_CONF, "min": 0.0, "max": 1.0, "step": 0.01, "tooltip":
                                 "A query is accepted at this score or above (B.1: 0.2)."}),
        }}

    def mask(self, image, masks, bboxes, label, accept_threshold):
        frames = images_from_comfy(image)
        stack = masks.detach().cpu().numpy() if hasattr(masks, "detach") else masks
        results = [accept_detections(label, m, b, (f.shape[1], f.shape[0]), accept_threshold)
                   for f, (m, b) in zip(frames, split_per_image(stack, bboxes, len(frames)))]
        shape = results[0].mask.shape
        record = json.dumps(json_safe([r.record for r in results]), indent=1)
        # The record also goes to the prompt's /history entry (API users read it there).
        return {"ui": {"respec_masks": [record]},
                "result": (masks_to_comfy([resize_mask(r.mask, shape) for r in results]), record)}


NODE_CLASS_MAPPINGS = {
    "ReSpecSam3Query": ReSpecSam3Query,
    "ReSpecSam3OccluderMask": ReSpecSam3OccluderMask,
}
NODE_DISPLAY_NAME_MAPPINGS = {
    "ReSpecSam3Query": "SAM3 Query (ReSpec)",
    "ReSpecSam3OccluderMask": "Occluder Mask, SAM3 (ReSpec)",
}
