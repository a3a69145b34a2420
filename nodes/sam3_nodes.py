"""Occluder masks on ComfyUI's own SAM3 (0.24+): appendix B.1's query chain and acceptance around
`SAM3_Detect`. The rules live in respec/eval/sam3_masks.py; these classes only translate. They need
no eval extra (no AGPL package): SAM3 is ComfyUI's."""
from __future__ import annotations

import json

from ..respec.comfy import io, node_schema
from ..respec.eval.masks import ACCEPT_CONF
from ..respec.eval.sam3_masks import SAM3_THRESHOLD, accept_detections, sam3_prompt, split_per_image
from ..respec.images import resize_mask
from ..respec.records import json_safe
from .common import images_from_comfy, masks_to_comfy

CATEGORY = "ReSpec/evaluation"
BOUNDING_BOX = "BOUNDING_BOX"   # SAM3_Detect's second output: one list of box dicts per image
BoundingBox = io.Custom(BOUNDING_BOX)   # ComfyUI's own type (io.BoundingBox from 0.24; 0.8.0 lacks it)


class ReSpecSam3Query(io.ComfyNode):
    """A label's B.1 query chain as one SAM3 text prompt."""

    @classmethod
    def define_schema(cls):
        return node_schema(
            node_id="ReSpecSam3Query", display_name="SAM3 Query (ReSpec)", category=CATEGORY,
            search_aliases=["sam3", "segment anything", "occlusion", "mask", "query"],
            description=("Appendix B.1's query fallbacks for ComfyUI's SAM3: the label, then its last word, then "
                         "that word's singular, written as one SAM3 prompt so SAM3_Detect runs one detection per "
                         f"query. Run SAM3_Detect at threshold {SAM3_THRESHOLD:g} with individual_masks on; "
                         "'Occluder Mask, SAM3' then accepts the first query whose score reaches B.1's threshold."),
            inputs=[io.String.Input(id="label", default="bouquet of flowers", multiline=None, tooltip=(
                "The object to find, e.g. the scenario's occluder ('bouquet of flowers')."))],
            outputs=[
                io.String.Output(id="prompt", tooltip=(
                    "For 'CLIP Text Encode' with SAM3's CLIP: the label, its last word and that word's "
                    "singular, separated by commas (SAM3 detects each part on its own).")),
                io.String.Output(id="label", tooltip="The label, for 'Occluder Mask, SAM3 (ReSpec)'."),
            ])

    @classmethod
    def execute(cls, label):
        return io.NodeOutput(sam3_prompt(label), label)


class ReSpecSam3OccluderMask(io.ComfyNode):
    """B.1's acceptance on SAM3_Detect's objects: the label's mask per image, or an all-zero mask."""

    @classmethod
    def define_schema(cls):
        return node_schema(
            node_id="ReSpecSam3OccluderMask", display_name="Occluder Mask, SAM3 (ReSpec)", category=CATEGORY,
            search_aliases=["sam3", "occlusion", "mask", "segmentation"],
            description=("The Occluder Mask route on ComfyUI's SAM3 (no YOLO-World): of the objects SAM3_Detect "
                         "returned for 'SAM3 Query (ReSpec)'s prompt (one per query, in order), the first whose "
                         "score reaches the threshold (B.1: 0.2) gives the mask. The paper-exact benchmark uses "
                         "YOLO-World + SAM-H."),
            inputs=[
                io.Image.Input(id="image", tooltip="The image(s) given to SAM3_Detect."),
                io.Mask.Input(id="masks", tooltip="SAM3_Detect's masks (individual_masks on)."),
                # A custom socket type's Input takes no force_input: the V1 key goes in extra_dict.
                BoundingBox.Input(id="bboxes", tooltip="SAM3_Detect's bboxes (their scores decide).",
                                  extra_dict={"forceInput": True}),
                io.String.Input(id="label", force_input=True, multiline=None,
                                tooltip="The label, from 'SAM3 Query (ReSpec)'."),
                io.Float.Input(id="accept_threshold", default=ACCEPT_CONF, min=0.0, max=1.0, step=0.01,
                               tooltip="A query is accepted at this score or above (B.1: 0.2)."),
            ],
            outputs=[
                io.Mask.Output(id="mask", tooltip="The object's mask per image (all zero when no query was "
                                                  "accepted)."),
                io.String.Output(id="record", tooltip="JSON per image: accepted query, fallback stage, score, box, "
                                                      "every query's score."),
            ])

    @classmethod
    def execute(cls, image, masks, bboxes, label, accept_threshold):
        frames = images_from_comfy(image)
        stack = masks.detach().cpu().numpy() if hasattr(masks, "detach") else masks
        results = [accept_detections(label, m, b, (f.shape[1], f.shape[0]), accept_threshold)
                   for f, (m, b) in zip(frames, split_per_image(stack, bboxes, len(frames)))]
        shape = results[0].mask.shape
        record = json.dumps(json_safe([r.record for r in results]), indent=1)
        # The record also goes to the prompt's /history entry (API users read it there).
        return io.NodeOutput(masks_to_comfy([resize_mask(r.mask, shape) for r in results]), record,
                             ui={"respec_masks": [record]})


NODE_CLASS_MAPPINGS = {
    "ReSpecSam3Query": ReSpecSam3Query,
    "ReSpecSam3OccluderMask": ReSpecSam3OccluderMask,
}
NODE_DISPLAY_NAME_MAPPINGS = {
    "ReSpecSam3Query": "SAM3 Query (ReSpec)",
    "ReSpecSam3OccluderMask": "Occluder Mask, SAM3 (ReSpec)",
}
