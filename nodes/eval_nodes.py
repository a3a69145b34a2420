"""OCCUR evaluation nodes: occluder / new-object masks (appendix B.1), the OCCUR score (A.5),
the instruction-faithfulness judge (figure 11) and reference-selection accuracy (D.4).
The work happens in respec/eval/: masks.py, metrics.py, scoring.py and judge.py."""
from __future__ import annotations

import json

from ..respec import comfy, web
from ..respec.comfy import io, node_schema
from ..respec.eval.judge import DEFAULT_MAX_NEW_TOKENS, judge_instruction
from ..respec.eval.masks import ACCEPT_CONF, DEFAULT_YOLO, SAM_FILES, DetectSettings, load_masker
from ..respec.eval.metric_models import DEFAULT_CLIP, DEFAULT_LPIPS_TRUNK, load_scorer
from ..respec.eval.metrics import DEFAULT_PSNR_CAP, reference_selection_correct
from ..respec.eval.scoring import score_result
from ..respec.images import resize_mask
from ..respec.records import json_safe
from .boundary import history_in, plan_in
from .common import (History, Masker, MaskRecords, Plan, Scorer, Vlm, image_from_comfy, images_from_comfy,
                     labels_from_text, masks_to_comfy)

CATEGORY = "ReSpec/evaluation"
DEVICES = ["auto", "cpu", "cuda"]
SAM_AUTO = "(matches sam_type)"


def _choices(kind: str, default: str) -> list[str]:
    """Files in the model folders of `kind`, with the default first (valid even before it is downloaded)."""
    return [default] + [n for n in comfy.list_models(kind) if n != default]


def _dumps(obj) -> str:
    return json.dumps(json_safe(obj), indent=1)


def _model_input(id: str, kind: str, default: str, tooltip: str):
    """A drop-down of the files in `kind`'s model folders, `default` first."""
    return io.Combo.Input(id=id, options=_choices(kind, default), default=default, tooltip=tooltip)


def _device_input():
    return io.Combo.Input(id="device", options=DEVICES, default="auto", tooltip="auto = ComfyUI's device.")


def _masker_input():
    return Masker.Input(id="masker", tooltip="From ReSpec Masker Loader.")


class ReSpecMaskerLoader(io.ComfyNode):
    """Load YOLO-World v2 + SAM (+ the CLIP text encoder for YOLO-World's class names)."""

    @classmethod
    def define_schema(cls):
        return node_schema(
            node_id="ReSpecMaskerLoader", display_name="Masker Loader: YOLO-World + SAM (ReSpec)", category=CATEGORY,
            search_aliases=["yolo", "sam", "yolo-world", "segment anything", "occlusion"],
            description=("Loads the mask models of OCCUR-Bench (appendix B.1): YOLO-World v2 for detection and SAM "
                         "for segmentation, from ComfyUI/models/ultralytics and ComfyUI/models/sams; YOLO-World's "
                         "class names are embedded with OpenAI CLIP ViT-B/32 from ComfyUI/models/respec_metrics. "
                         "Nothing is downloaded unless allow_download is on. YOLO-World is AGPL-3.0."),
            inputs=[
                _model_input("yolo_weights", "ultralytics", DEFAULT_YOLO,
                             "YOLO-World v2 weights in models/ultralytics (paper: yolov8l-worldv2.pt)."),
                io.Combo.Input(id="sam_type", options=list(SAM_FILES), default="vit_h",
                               tooltip="SAM architecture; must match the checkpoint (paper: vit_h)."),
                _model_input("sam_weights", "sams", SAM_AUTO,
                             "SAM checkpoint in models/sams; the default picks the official file of sam_type "
                             "(sam_vit_h_4b8939.pth for vit_h)."),
                _model_input("clip_weights", "respec_metrics", DEFAULT_CLIP,
                             "OpenAI CLIP ViT-B/32 in open_clip format (file or folder in models/respec_metrics, "
                             "or the Hugging Face id) for YOLO-World's text embeddings."),
                io.Float.Input(id="accept_threshold", default=ACCEPT_CONF, min=0.0, max=1.0, step=0.01, tooltip=(
                    "A detection is accepted at this confidence or above (paper: 0.2; the detector itself runs "
                    "at 0.001).")),
                io.Boolean.Input(id="allow_download", default=False, tooltip=(
                    "Download missing weights (YOLO-World from GitHub, SAM from Meta, CLIP from Hugging Face) "
                    "into the model folders.")),
                _device_input(),
            ],
            outputs=[Masker.Output(id="masker", tooltip=(
                "Open-vocabulary detector + box-prompted segmenter for the OCCUR masks."))])

    @classmethod
    def execute(cls, yolo_weights, sam_type, sam_weights, clip_weights, accept_threshold, allow_download, device):
        masker = load_masker(yolo_weights, sam_type, None if sam_weights == SAM_AUTO else sam_weights,
                             clip_weights, allow_download=allow_download, device=device,
                             detect=DetectSettings(accept=accept_threshold))
        return io.NodeOutput(masker)


class ReSpecOccluderMask(io.ComfyNode):
    """One label's mask in an image (or in each image of a batch)."""

    @classmethod
    def define_schema(cls):
        return node_schema(
            node_id="ReSpecOccluderMask", display_name="Occluder Mask (ReSpec)", category=CATEGORY,
            search_aliases=["yolo", "sam", "occlusion", "mask", "segmentation"],
            description=("Finds an object by name and segments it (appendix B.1): YOLO-World with the label, then "
                         "its last word, then that word's singular; the best box at confidence >= the threshold "
                         "goes to SAM. No detection, a bad box or a SAM failure give an all-zero mask."),
            inputs=[
                _masker_input(),
                io.Image.Input(id="image", tooltip="The image to look in (each image of a batch is masked)."),
                io.String.Input(id="label", default="flowers", multiline=None, tooltip=(
                    "The object to find, e.g. the scenario's occluder ('bouquet of flowers').")),
            ],
            outputs=[
                io.Mask.Output(id="mask", tooltip="The object's mask (all zero when nothing was accepted)."),
                io.String.Output(id="record", tooltip=(
                    "JSON per image: accepted prompt, fallback stage, confidence, box, every attempt.")),
            ])

    @classmethod
    def execute(cls, masker, image, label):
        results = [masker.mask(arr, label) for arr in images_from_comfy(image)]
        shape = results[0].mask.shape
        masks = [resize_mask(r.mask, shape) for r in results]
        return io.NodeOutput(masks_to_comfy(masks), _dumps([r.record for r in results]))


class ReSpecTrajectoryMasks(io.ComfyNode):
    """M_occ^t and M_new^t for every turn 1..N of a history, in one call."""

    @classmethod
    def define_schema(cls):
        return node_schema(
            node_id="ReSpecTrajectoryMasks", display_name="Trajectory Masks: occluder + new objects (ReSpec)",
            category=CATEGORY, search_aliases=["yolo", "sam", "occlusion", "mask"],
            description=("Masks for the OCCUR score (appendix A.5): on each edited image I_1..I_N of the history, "
                         "the target occluder's mask and the union of the new objects' masks. Turn 0 (the original "
                         "image) is not part of the trajectory."),
            inputs=[
                _masker_input(),
                History.Input(id="history", tooltip=(
                    "The editing history whose turns 1..N are masked (its last turn is N).")),
                io.String.Input(id="occluder_label", default="flowers", multiline=None, tooltip=(
                    "The target occluder: what hid the content that must come back.")),
                io.String.Input(id="new_object_labels", default="", multiline=True, tooltip=(
                    "Objects newly introduced at each turn: one line per turn 1..N ('hat, scarf'; '-' for none), "
                    "or lines 't: labels', or JSON (a list per turn or {\"t\": [labels]}).")),
                io.Boolean.Input(id="cumulative_new", default=True, tooltip=(
                    "At turn t also look for objects introduced at earlier turns, so M_new^N covers every new "
                    "object still in the final image.")),
            ],
            outputs=[
                MaskRecords.Output(id="masks", tooltip="Every turn's masks, for ReSpec OCCUR Score."),
                io.Mask.Output(id="occluder_masks", tooltip="M_occ^t for t = 1..N (batch; resized to turn N's size)."),
                io.Mask.Output(id="new_object_masks", tooltip=(
                    "M_new^t for t = 1..N (batch; resized to turn N's size).")),
                io.String.Output(id="records", tooltip=(
                    "JSON: per turn, the occluder's and each new object's detection record.")),
            ])

    @classmethod
    def execute(cls, masker, history, occluder_label, new_object_labels, cumulative_new):
        tm = masker.history_masks(history_in(history), occluder_label, labels_from_text(new_object_labels),
                                  cumulative_new=cumulative_new)
        shape = tm.occ[-1].shape
        return io.NodeOutput(tm, masks_to_comfy([resize_mask(m, shape) for m in tm.occ]),
                             masks_to_comfy([resize_mask(m, shape) for m in tm.new]), _dumps(tm.to_record()))


class ReSpecScorerLoader(io.ComfyNode):
    """Load the scoring models: AlexNet-LPIPS and CLIP ViT-B/32."""

    @classmethod
    def define_schema(cls):
        return node_schema(
            node_id="ReSpecScorerLoader", display_name="Scorer Loader: LPIPS + CLIP (ReSpec)", category=CATEGORY,
            description=("Loads LPIPS (AlexNet; its trunk is torchvision's alexnet-owt-7be5be79.pth, the linear "
                         "heads ship with the lpips package) and OpenAI CLIP ViT-B/32 from "
                         "ComfyUI/models/respec_metrics. Nothing is downloaded unless allow_download is on."),
            inputs=[
                _model_input("lpips_trunk", "respec_metrics", DEFAULT_LPIPS_TRUNK,
                             "torchvision's AlexNet weights file (models/respec_metrics or torch's hub cache)."),
                _model_input("clip_weights", "respec_metrics", DEFAULT_CLIP,
                             "OpenAI CLIP ViT-B/32 in open_clip format (file or folder in models/respec_metrics, "
                             "or the Hugging Face id)."),
                io.Boolean.Input(id="allow_download", default=False, tooltip=(
                    "Download missing weights (AlexNet from download.pytorch.org, CLIP from Hugging Face).")),
                _device_input(),
            ],
            outputs=[Scorer.Output(id="scorer", tooltip="Masked PSNR / LPIPS / CLIP scorer for ReSpec OCCUR Score.")])

    @classmethod
    def execute(cls, lpips_trunk, clip_weights, allow_download, device):
        return io.NodeOutput(load_scorer(lpips_trunk, clip_weights, allow_download=allow_download, device=device))


class ReSpecOccurScore(io.ComfyNode):
    """S_restore, S_preserve and S_TC of the final image against I_ref (appendix A.5)."""

    @classmethod
    def define_schema(cls):
        return node_schema(
            node_id="ReSpecOccurScore", display_name="OCCUR Score (ReSpec)", category=CATEGORY,
            search_aliases=["occlusion", "restore", "metric", "psnr", "lpips", "clip"], is_output_node=True,
            description=("OCCUR-Bench scores: R_restore = occluder area over the trajectory minus what the occluder "
                         "and new objects cover in the final image; R_preserve = everything never covered. On each, "
                         "sim = mean(PSNR/cap, 1 - LPIPS, CLIP) between the final image and the reference I_ref."),
            inputs=[
                Scorer.Input(id="scorer", tooltip="From ReSpec Scorer Loader."),
                MaskRecords.Input(id="masks", tooltip="From ReSpec Trajectory Masks (turns 1..N)."),
                io.Float.Input(id="psnr_cap", default=DEFAULT_PSNR_CAP, min=1.0, max=200.0, step=1.0, tooltip=(
                    "PSNR is normalised as min(max(PSNR, 0), cap) / cap; identical regions give 1.")),
                io.Int.Input(id="reference_turn", default=-1, min=-1, max=1000, tooltip=(
                    "I_ref as a turn of the history (0 = original image); -1 = use reference_image.")),
                History.Input(id="history", optional=True, tooltip=(
                    "The history: its last image is the final image unless final_image is given; "
                    "reference_turn indexes it.")),
                io.Image.Input(id="final_image", optional=True, tooltip=(
                    "The generated final image Î_N (default: the history's last image).")),
                io.Image.Input(id="reference_image", optional=True, tooltip="I_ref, when reference_turn is -1."),
            ],
            outputs=[
                io.Float.Output(id="S_restore", tooltip="Restoration consistency on R_restore (NaN when the region is empty)."),
                io.Float.Output(id="S_preserve", tooltip=(
                    "Preservation consistency on R_preserve (NaN when the region is empty).")),
                io.Float.Output(id="S_TC", tooltip="Temporal consistency: the mean of the two."),
                io.Mask.Output(id="regions", tooltip="Batch of 2 masks: R_restore, R_preserve (at the reference's size)."),
                io.String.Output(id="record", tooltip=(
                    "JSON: the scores, their PSNR / LPIPS / CLIP parts, areas, whole-image metrics, reasons.")),
            ],
            hidden=[io.Hidden.unique_id])

    @classmethod
    def execute(cls, scorer, masks, psnr_cap, reference_turn, history=None, final_image=None, reference_image=None):
        history = history_in(history) if history is not None else None   # optional: scoring says what is missing
        final = image_from_comfy(final_image, "final_image") if final_image is not None else None
        ref = image_from_comfy(reference_image, "reference_image") if reference_image is not None else None
        result = score_result(scorer, masks, history=history, final_image=final, reference_image=ref,
                              reference_turn=reference_turn, psnr_cap=psnr_cap)
        regions = result.pop("regions")
        record = json_safe(result)
        # The panel draws the regions over the latest image and files the scores under the session.
        event = {"node": cls.hidden.unique_id, **record, "regions": web.publish_region_masks(regions)}
        if history is not None and history.session_id:
            event["session_id"] = history.session_id
        comfy.send_event("scores", event)
        return io.NodeOutput(result["S_restore"], result["S_preserve"], result["S_TC"],
                             masks_to_comfy([regions["R_restore"], regions["R_preserve"]]),
                             json.dumps(record, indent=1), ui={"respec_scores": [record]})


class ReSpecInstructionJudge(io.ComfyNode):
    """S_IF: a VLM grades (0-3) whether the edit followed its instruction (figure 11)."""

    @classmethod
    def define_schema(cls):
        return node_schema(
            node_id="ReSpecInstructionJudge", display_name="Instruction Faithfulness: VLM judge (ReSpec)",
            category=CATEGORY, is_output_node=True,
            description=("Instruction faithfulness, the auxiliary OCCUR metric: any controller backend (the paper "
                         "used GPT-4o-mini; use the OpenAI-compatible backend) sees the image before and after "
                         "the edit and the instruction, and grades only whether the edit was carried out."),
            inputs=[
                Vlm.Input(id="backend", tooltip="The judge: a loaded controller backend."),
                io.Image.Input(id="before", tooltip="The image before the edit (I_{t-1})."),
                io.Image.Input(id="after", tooltip="The edited image to grade (I_t)."),
                io.String.Input(id="instruction", default="", multiline=True,
                                tooltip="The user's instruction for this edit (P_t)."),
                io.Int.Input(id="max_new_tokens", default=DEFAULT_MAX_NEW_TOKENS, min=16, max=4096,
                             tooltip="Cap on the judge's reply length."),
                io.Boolean.Input(id="use_json_schema", default=True, tooltip=(
                    "Ask the backend to force the reply into {score, reason} JSON when it can.")),
            ],
            outputs=[
                io.Float.Output(id="S_IF", tooltip="score / 3 in [0, 1]; NaN when the judge's reply could not be read."),
                io.String.Output(id="record", tooltip="JSON: score 0-3, reason, raw reply, parse mode or failure."),
            ],
            hidden=[io.Hidden.unique_id])

    @classmethod
    def execute(cls, backend, before, after, instruction, max_new_tokens, use_json_schema):
        res = judge_instruction(backend, image_from_comfy(before, "before"), image_from_comfy(after, "after"),
                                instruction, max_new_tokens=max_new_tokens, use_json_schema=use_json_schema)
        record = json_safe(res)
        # Its own event: a "scores" event would replace the panel's latest OCCUR scores.
        comfy.send_event("judge", {"node": cls.hidden.unique_id, **record})
        return io.NodeOutput(res["S_IF"], json.dumps(record, indent=1), ui={"respec_scores": [record]})


class ReSpecReferenceCheck(io.ComfyNode):
    """Whether the plan picked the ground-truth reference image (appendix D.4)."""

    @classmethod
    def define_schema(cls):
        return node_schema(
            node_id="ReSpecReferenceCheck", display_name="Reference Selection Check (ReSpec)", category=CATEGORY,
            description=("Reference-selection accuracy for one restoration turn: the controller's "
                         "restoration_source_id against the scenario's ground-truth I_ref turn. A plan without a "
                         "restoration source counts as wrong. Average 'correct' over scenarios for the paper's "
                         "Ref. Acc."),
            inputs=[
                Plan.Input(id="plan", tooltip="The restoration turn's plan (from Preservation Target VLM (ReSpec))."),
                io.Int.Input(id="ground_truth_turn", default=0, min=0, max=1000,
                             tooltip="The scenario's reference turn (the image id of I_ref)."),
            ],
            outputs=[
                io.Boolean.Output(id="correct", tooltip=(
                    "True when restoration_source_id equals the ground-truth reference turn.")),
                io.Int.Output(id="chosen_id", tooltip="The plan's restoration_source_id (-1 when it has none)."),
                io.String.Output(id="record", tooltip="JSON: chosen id, ground truth, correct."),
            ])

    @classmethod
    def execute(cls, plan, ground_truth_turn):
        plan = plan_in(plan)
        ok = bool(reference_selection_correct(plan, ground_truth_turn))
        chosen = plan.restoration_source_id
        return io.NodeOutput(ok, -1 if chosen is None else int(chosen),
                             json.dumps({"chosen": chosen, "ground_truth": ground_truth_turn, "correct": ok}))


# These need the eval extra (ultralytics, segment-anything, lpips, open_clip): see nodes/__init__.py.
EVAL_NODES = {"ReSpecMaskerLoader", "ReSpecOccluderMask", "ReSpecTrajectoryMasks", "ReSpecScorerLoader",
              "ReSpecOccurScore"}
NODE_CLASS_MAPPINGS = {
    "ReSpecMaskerLoader": ReSpecMaskerLoader,
    "ReSpecOccluderMask": ReSpecOccluderMask,
    "ReSpecTrajectoryMasks": ReSpecTrajectoryMasks,
    "ReSpecScorerLoader": ReSpecScorerLoader,
    "ReSpecOccurScore": ReSpecOccurScore,
    "ReSpecInstructionJudge": ReSpecInstructionJudge,
    "ReSpecReferenceCheck": ReSpecReferenceCheck,
}
NODE_DISPLAY_NAME_MAPPINGS = {
    "ReSpecMaskerLoader": "Masker Loader: YOLO-World + SAM (ReSpec)",
    "ReSpecOccluderMask": "Occluder Mask (ReSpec)",
    "ReSpecTrajectoryMasks": "Trajectory Masks: occluder + new objects (ReSpec)",
    "ReSpecScorerLoader": "Scorer Loader: LPIPS + CLIP (ReSpec)",
    "ReSpecOccurScore": "OCCUR Score (ReSpec)",
    "ReSpecInstructionJudge": "Instruction Faithfulness: VLM judge (ReSpec)",
    "ReSpecReferenceCheck": "Reference Selection Check (ReSpec)",
}
