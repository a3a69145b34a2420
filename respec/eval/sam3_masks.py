"""Occluder masks from ComfyUI's own SAM3 (`SAM3_Detect`): appendix B.1's rules on another detector.

An alternative to YOLO-World + SAM (respec/eval/masks.py) that needs no AGPL package: ComfyUI 0.24+
runs SAM3 itself (a checkpoint in models/checkpoints, `CLIPTextEncode` of the query with its CLIP,
`SAM3_Detect`). The graph does the detection; this module does what B.1 asks of it:

- **One label at a time, each query its own detection.** `sam3_prompt(label)` writes the label's
  query chain (label -> last word -> the last word's singular, `masks.query_chain`) as one SAM3 text
  prompt, "a, b, c": SAM3's tokenizer splits it at the commas and `SAM3_Detect` runs one detection
  per part, keeping at most one object each.
- **A low internal threshold, a stated acceptance.** B.1 runs YOLO-World at confidence 0.001 and
  accepts a box at 0.2. Here SAM3_Detect runs at `SAM3_THRESHOLD` = 0 (every part returns its best
  object, in the prompt's order) with `individual_masks` on, and `accept_detections` accepts the
  first query in the chain whose score is >= `accept` (0.2): its mask is the label's mask. No
  accepted query gives an all-zero mask, recorded with every attempt's best score.

The paper-exact benchmark keeps YOLO-World + SAM-H; scores from this route are another detector's,
and the records say so (`detector`: "sam3").
"""
from __future__ import annotations

import re
from typing import Any, Sequence

import numpy as np

from ..errors import InputError
from ..records import json_safe
from .masks import ACCEPT_CONF, MaskResult, clip_box, query_chain

DETECTOR = "sam3"
SAM3_THRESHOLD = 0.0   # SAM3_Detect's own threshold: every query returns its best object (B.1's 0.001)
SAM3_REFINE = 2        # SAM3_Detect's default refinement passes of the SAM decoder


def _sam3_query(query: str) -> str:
    """A query as one part of a SAM3 prompt: its tokenizer splits at commas, drops parentheses and
    reads a trailing ':N' as a count, so those characters become spaces."""
    return " ".join(re.sub(r"[,()\[\]:]", " ", query).split())


def sam3_queries(label: str) -> list[tuple[int, str, str]]:
    """(stage, stage name, query) of `label`'s B.1 query chain as SAM3 reads it, duplicates dropped."""
    out, seen = [], set()
    for stage, name, query in query_chain(label):
        q = _sam3_query(query)
        if q and q.lower() not in seen:
            seen.add(q.lower())
            out.append((stage, name, q))
    return out


def sam3_prompt(label: str) -> str:
    """The SAM3 text prompt of `label`: its query chain joined by ", " (one detection per query).
    InputError for a label with nothing to detect."""
    chain = sam3_queries(label)
    if not chain:
        raise InputError(f"the label {label!r} has nothing to detect: give the object's name, e.g. "
                         "'bouquet of flowers'")
    return ", ".join(q for _, _, q in chain)


def _box_of(det: Any, size: tuple[int, int]) -> tuple[float | None, list[float] | None]:
    """(score, xyxy box clipped to the image) of one SAM3_Detect bounding-box dict."""
    if not isinstance(det, dict):
        return None, None
    try:
        x, y, w, h = (float(det[k]) for k in ("x", "y", "width", "height"))
        score = float(det["score"]) if det.get("score") is not None else None
    except (KeyError, TypeError, ValueError):
        return None, None
    return score, clip_box([x, y, x + w, y + h], size)


def accept_detections(label: str, masks: Sequence[np.ndarray], boxes: Sequence[Any], size: tuple[int, int],
                      accept: float = ACCEPT_CONF) -> MaskResult:
    """B.1's acceptance on one image's SAM3 detections of `sam3_prompt(label)` (run at SAM3_THRESHOLD,
    individual masks): the first query of the chain whose score is >= `accept` gives the mask.

    masks: that image's H×W masks, one per returned object, in the prompt's order; boxes: the
    matching SAM3 bounding-box dicts (x, y, width, height, score); size: (width, height). When SAM3
    returned one object per query, each is that query's; when it returned fewer (a query whose every
    score rounds to 0), the objects cannot be told apart by query: the first accepted one is used and
    the record says its stage is unknown."""
    w, h = size
    chain = sam3_queries(label)
    zero = np.zeros((h, w), bool)
    record: dict = {"detector": DETECTOR, "label": label, "size": [w, h], "accepted_prompt": None,
                    "fallback_stage": None, "fallback_stage_name": None, "confidence": None, "box": None,
                    "accept_threshold": accept, "attempts": []}
    if not chain:
        record.update(status="no_label", reason="empty label: nothing to detect", mask_area=0)
        return MaskResult(zero, record)
    if len(masks) != len(boxes):
        raise InputError(f"SAM3 gave {len(masks)} masks and {len(boxes)} boxes for one image: connect both "
                         "outputs of the same SAM3_Detect, with individual_masks on")
    found = [(*_box_of(b, size), np.asarray(m) > 0.5) for b, m in zip(boxes, masks)]
    attributed = len(found) == len(chain)
    if attributed:
        for (stage, name, query), (score, box, _) in zip(chain, found):
            record["attempts"].append({"query": query, "stage": stage, "stage_name": name,
                                       "best_confidence": score, "boxes": 1})
    else:
        record["attempts"] = [{"query": q, "stage": s, "stage_name": n} for s, n, q in chain]
        record["unattributed_scores"] = [score for score, _, _ in found]
        record["note"] = (f"SAM3 returned {len(found)} objects for {len(chain)} queries (run SAM3_Detect at "
                          f"threshold {SAM3_THRESHOLD:g}): the accepted object's query is unknown")
    for i, (score, box, mask) in enumerate(found):
        if score is None or score < accept or box is None:
            continue
        if mask.shape != (h, w):
            raise InputError(f"SAM3 mask of {mask.shape[1]}x{mask.shape[0]} for a {w}x{h} image: give "
                             "SAM3_Detect the same image")
        stage, name, query = chain[i] if attributed else (None, None, None)
        record.update(status="ok", accepted_prompt=query, fallback_stage=stage, fallback_stage_name=name,
                      confidence=score, box=box, mask_area=int(mask.sum()))
        return MaskResult(mask, json_safe(record))
    best = max((s for s, _, _ in found if s is not None), default=None)
    record.update(status="no_detection", mask_area=0,
                  reason=f"no SAM3 detection reached {accept} for {[q for _, _, q in chain]}"
                         + (f" (best {best:.4f})" if best is not None else " (none returned)"))
    return MaskResult(zero, json_safe(record))


def split_per_image(masks: np.ndarray, boxes: Any, n_images: int) -> list[tuple[list[np.ndarray], list]]:
    """SAM3_Detect's outputs for a batch of `n_images` (individual masks: all images' masks in one
    stack; boxes: one list per image) as (masks, boxes) per image."""
    per_image = boxes if isinstance(boxes, list) and (not boxes or isinstance(boxes[0], list)) else [boxes]
    if len(per_image) != n_images:
        raise InputError(f"SAM3 boxes are for {len(per_image)} images, the batch has {n_images}: connect the "
                         "same image batch to SAM3_Detect and to this node")
    counts = [len(b) for b in per_image]
    stack = np.asarray(masks)
    if stack.ndim == 2:
        stack = stack[None]
    if stack.shape[0] != sum(counts):
        raise InputError(f"SAM3 gave {stack.shape[0]} masks for {sum(counts)} boxes: switch SAM3_Detect's "
                         "individual_masks on (one mask per object)")
    out, at = [], 0
    for b in per_image:
        out.append((list(stack[at:at + len(b)]), list(b)))
        at += len(b)
    return out
