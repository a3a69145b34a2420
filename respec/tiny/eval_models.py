"""Tiny random-weight evaluation networks: the real classes (ultralytics YOLO-World v2, segment-anything
SAM, an AlexNet trunk for lpips, open_clip CLIP) at toy sizes, built offline in a few seconds. The
loaders reach them through respec.models.build_tiny (the "tiny" source); a ready Masker or Scorer of
them is masks.build_tiny_masker / metric_models.build_tiny_scorer (respec/eval).

Random detectors find nothing: YOLO-World's class head starts with a bias of -10. Two ways to get
boxes out of the real detection path:
  * `zero_class_bias=True` (default): every anchor scores ~ 0.5 for any query, so every query is
    accepted at the first stage;
  * `tune_detector(yolo, masker.text_features, concept, ...)`: rewire the class head so the detector
    responds to one text concept only (its class embedding is pinned to that concept's CLIP text
    embedding and the logit threshold sits between it and every other query). Tests use this to
    walk the B.1 query fallback chain through ultralytics' real predictor.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import math
from functools import partial
from pathlib import Path
from typing import Callable, Sequence

if TYPE_CHECKING:   # for the string annotations only; torch is imported where it is used
    import torch

# open_clip CLIP config: 512-d embeddings (what YOLO-World's head expects), one-layer towers.
TINY_CLIP_CFG = dict(
    embed_dim=512,
    vision_cfg=dict(image_size=224, layers=1, width=32, patch_size=32, head_width=16),
    text_cfg=dict(context_length=77, vocab_size=49408, width=32, heads=2, layers=1),
    quick_gelu=True,
)
TINY_YOLO_YAML = "yolov8n-worldv2.yaml"   # same architecture family as yolov8l-worldv2, 3.7 M parameters


def build_tiny_clip(seed: int = 0):
    """A one-layer open_clip CLIP with 512-d embeddings (random weights)."""
    import torch
    from open_clip.model import CLIP
    torch.manual_seed(seed)
    return CLIP(**TINY_CLIP_CFG).eval().requires_grad_(False)


def build_tiny_yolo_world(yaml: str = TINY_YOLO_YAML, seed: int = 0, zero_class_bias: bool = True):
    """ultralytics YOLOWorld built from its yaml (no weights file, offline)."""
    import torch
    from ..ultralytics_scope import ultralytics_scope
    with ultralytics_scope():
        from ultralytics import YOLOWorld
        torch.manual_seed(seed)
        model = YOLOWorld(yaml)
    model.model.eval()
    if zero_class_bias:
        for head in model.model.model[-1].cv4:
            head.bias.data.zero_()
    return model


def tune_detector(yolo, text_features: Callable[[str], "torch.Tensor"], concept: str,
                  others: Sequence[str], sharpness: float = 200.0, concept_confidence: float | None = None) -> dict:
    """Make the detector see `concept` and none of `others` (all given as text queries).

    Every anchor's image embedding is pinned to the concept's text embedding (the last 1×1 conv of
    each class branch gets zero weights and the embedding as bias); the contrastive head's scale is
    `sharpness` and its bias puts the decision point halfway between cos = 1 (the concept) and the
    most similar other query. With `concept_confidence`, the bias instead makes the concept score
    exactly that confidence (the others stay far below it). Returns the cosine margins used.
    """
    import torch
    target = text_features(concept).reshape(-1).float()
    cos_others = [float(torch.dot(target, text_features(q).reshape(-1).float())) for q in others
                  if q.lower() != concept.lower()]
    top = max(cos_others) if cos_others else 0.0
    if top > 0.999:
        raise ValueError(f"the tiny text encoder cannot tell {concept!r} from the other queries (cos {top:.4f})")
    threshold = (1.0 + top) / 2.0
    head = yolo.model.model[-1]
    for i in range(head.nl):
        conv = head.cv3[i][-1]
        conv.weight.data.zero_()
        conv.bias.data.copy_(target.to(conv.bias.dtype))
        contrast = head.cv4[i]
        contrast.logit_scale.data.fill_(math.log(sharpness))
        if concept_confidence is None:
            contrast.bias.data.fill_(-sharpness * threshold)
        else:
            c = float(concept_confidence)
            contrast.bias.data.fill_(math.log(c / (1.0 - c)) - sharpness)
    yolo.predictor = None
    return {"concept": concept, "threshold_cos": threshold, "max_other_cos": top}


def build_tiny_sam(seed: int = 0, img_size: int = 256, prompt_dim: int = 32):
    """segment-anything's Sam with a one-block ViT encoder at 256 px (the real classes, toy sizes)."""
    import torch
    from segment_anything.modeling import ImageEncoderViT, MaskDecoder, PromptEncoder, Sam, TwoWayTransformer
    torch.manual_seed(seed)
    grid = img_size // 16
    sam = Sam(
        image_encoder=ImageEncoderViT(
            depth=1, embed_dim=32, img_size=img_size, mlp_ratio=2,
            norm_layer=partial(torch.nn.LayerNorm, eps=1e-6), num_heads=2, patch_size=16, qkv_bias=True,
            use_rel_pos=True, global_attn_indexes=[0], window_size=4, out_chans=prompt_dim),
        prompt_encoder=PromptEncoder(embed_dim=prompt_dim, image_embedding_size=(grid, grid),
                                     input_image_size=(img_size, img_size), mask_in_chans=8),
        mask_decoder=MaskDecoder(num_multimask_outputs=3,
                                 transformer=TwoWayTransformer(depth=1, embedding_dim=prompt_dim, mlp_dim=64, num_heads=2),
                                 transformer_dim=prompt_dim, iou_head_depth=2, iou_head_hidden_dim=32),
        pixel_mean=[123.675, 116.28, 103.53], pixel_std=[58.395, 57.12, 57.375],
    )
    return sam.eval().requires_grad_(False)


def tiny_alexnet_state(seed: int = 0) -> dict:
    """A random torchvision AlexNet state dict (features.* keys, as the real trunk file has)."""
    import torch
    import torchvision
    torch.manual_seed(seed)
    net = torchvision.models.alexnet(weights=None)
    return {k: v for k, v in net.state_dict().items() if k.startswith("features.")}


def save_tiny_eval_files(folder: str | Path, seed: int = 0) -> dict:
    """Write tiny weight files the loaders can read: a YOLO-World .pt, an AlexNet trunk, a CLIP
    state file. Returns their paths (the tiny CLIP needs `clip_arch=TINY_CLIP_CFG`)."""
    import torch
    from safetensors.torch import save_file
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    yolo = build_tiny_yolo_world(seed=seed)
    yolo_path = folder / "tiny-worldv2.pt"
    yolo.save(str(yolo_path))
    trunk_path = folder / "tiny-alexnet.pth"
    torch.save(tiny_alexnet_state(seed), trunk_path)
    clip_path = folder / "tiny-clip.safetensors"
    save_file({k: v.contiguous() for k, v in build_tiny_clip(seed).state_dict().items()}, str(clip_path))
    return {"yolo": yolo_path, "lpips_trunk": trunk_path, "clip": clip_path}
