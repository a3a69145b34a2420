"""Conversions between ComfyUI values and core types, and shared node declarations.

ComfyUI IMAGE: float32 torch tensor [B, H, W, C] in 0..1. MASK: float32 [B, H, W] (or [H, W]).
The core works on uint8 H×W×C arrays / PIL images (respec/images.py). The new-object labels'
text format (a multiline widget) is written and read here too.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import json
import re

import numpy as np

from ..respec import models
from ..respec.comfy import io
from ..respec.errors import InputError
from ..respec.images import as_array, images_from_array, masks_from_array

if TYPE_CHECKING:   # for the string annotations only; torch is imported where it is used
    import torch

CATEGORY = "ReSpec"

# Custom socket types that flow between our nodes.
HISTORY = "RESPEC_HISTORY"
PLAN = "RESPEC_PLAN"
SCENARIO = "OCCUR_SCENARIO"
VLM = "RESPEC_VLM"          # a loaded controller backend
EDITOR = "RESPEC_EDITOR"    # a loaded in-context editor
MASKER = "RESPEC_MASKER"    # loaded YOLO-World + SAM
SCORER = "RESPEC_SCORER"    # loaded LPIPS + CLIP
MASK_RECORDS = "RESPEC_MASKS"  # masks of every turn of a trajectory (for the score)

# The same socket types for nodes declared with the V3 schema (io.Custom(...).Input / .Output).
History, Plan, Scenario, Vlm, Editor, Masker, Scorer, MaskRecords = (
    io.Custom(t) for t in (HISTORY, PLAN, SCENARIO, VLM, EDITOR, MASKER, SCORER, MASK_RECORDS))


def _numpy(value):
    """A tensor's values as numpy (no copy for a CPU tensor), anything else as numpy reads it."""
    return value.detach().cpu().numpy() if hasattr(value, "detach") else np.asarray(value)


def images_from_comfy(image, what: str = "image") -> list[np.ndarray]:
    """IMAGE [B,H,W,C] float -> list of uint8 H×W×C arrays (C = 1, 3 or 4), checked once for every
    node (respec.images.images_from_array: layout, size, finite values; errors name `what`)."""
    return images_from_array(_numpy(image), what)


def image_from_comfy(image, what: str = "image") -> np.ndarray:
    """IMAGE with exactly one picture -> uint8 array; a batch of several is refused clearly."""
    frames = images_from_comfy(image, what)
    if len(frames) != 1:
        raise InputError(f"{what}: expected one image, got a batch of {len(frames)}; "
                         "pick one with ComfyUI's 'ImageFromBatch' node")
    return frames[0]


def images_to_comfy(images) -> "torch.Tensor":
    """Arrays / PIL / StoredImage -> IMAGE [B,H,W,C] float32. Sizes must match (resize first)."""
    import torch
    arrs = [as_array(getattr(im, "array", im)) for im in images]
    if not arrs:
        raise InputError("no images to output")
    shapes = {a.shape for a in arrs}
    if len(shapes) != 1:
        raise InputError(f"images in one IMAGE batch must share a size and channel count; got {sorted(shapes)}")
    # Divided straight into the float batch: no uint8 stack, one float copy of the pixels (x / 255 in
    # float32, as the tensor division rounds it).
    out = np.empty((len(arrs), *arrs[0].shape), np.float32)
    for i, a in enumerate(arrs):
        np.divide(a, np.float32(255.0), out=out[i])
    return torch.from_numpy(out)


def masks_from_comfy(mask, what: str = "mask") -> list[np.ndarray]:
    """MASK [B,H,W] (or [H,W], [H,W,1], [B,H,W,1]) -> list of bool H×W arrays (> 0.5), checked once
    for every node (respec.images.masks_from_array; errors name `what`)."""
    return masks_from_array(_numpy(mask), what)


def mask_from_comfy(mask, what: str = "mask") -> np.ndarray:
    """A MASK holding exactly one mask -> bool H×W; a batch of several is refused clearly."""
    masks = masks_from_comfy(mask, what)
    if len(masks) != 1:
        raise InputError(f"{what}: expected one mask, got a batch of {len(masks)}; pick one with a batch node")
    return masks[0]


def masks_to_comfy(masks) -> "torch.Tensor":
    """bool/float H×W arrays -> MASK [B,H,W] float32 0/1. One writable float32 mask is shared, not
    copied (a 64 MP weight is 256 MB; ComfyUI's nodes never write into their inputs)."""
    import torch
    arrs = [np.asarray(m, dtype=np.float32) for m in masks]
    if not arrs:
        raise InputError("no masks to output")
    if len(arrs) == 1 and arrs[0].flags.writeable and arrs[0].flags.c_contiguous:
        return torch.from_numpy(arrs[0][None])
    return torch.from_numpy(np.stack(arrs))


def read_only(arr: np.ndarray) -> np.ndarray:
    """`arr` (a fresh array this node made) marked read-only, so the core keeps it without a copy."""
    arr.flags.writeable = False
    return arr


def labels_text(per_turn) -> str:
    """New-object labels of turns 1..N as the widget's text: one line per turn ("hat, scarf"; "-" for none)."""
    return "\n".join(", ".join(labels) or "-" for labels in per_turn)


def labels_from_text(text: str):
    """The new-object labels widget's text as the core takes it (respec.eval.masks.labels_per_turn):
    JSON (a list per turn, or {"t": labels}) as it is; lines "t: labels" naming the turn as
    {t: labels}; otherwise one line per turn 1..N in order ("hat, scarf"; "-", "none" or an empty
    line for none). The core checks the turns against the trajectory."""
    text = (text or "").strip()
    if not text:
        return []
    if text[0] in "[{":
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            raise InputError(f"new-object labels look like JSON but do not parse: {e}") from None
    lines = text.splitlines()
    named = [re.match(r"^\s*(?:turn\s*)?(\d+)\s*[:=]\s*(.*)$", ln, re.I) for ln in lines if ln.strip()]
    if named and all(named):
        return {m.group(1): m.group(2) for m in named}
    return lines


def validate_loader(choices: dict, values: dict, check) -> bool | str:
    """A loader's VALIDATE_INPUTS (ComfyUI runs it on a prompt before any node runs, so a missing model
    fails the prompt at once, before any other model loads). Declaring an input there turns off
    ComfyUI's own drop-down check for it, so `values` (input name -> value; None when linked) are
    checked against `choices` (input name -> the drop-down's list) here. Then `check` (a resolution
    that loads and fetches nothing) runs: its missing-weights words, or True. A linked input is left
    out of what ComfyUI passes, so a loader's VALIDATE_INPUTS defaults each to None, "not known
    yet", and leaves that case to the run."""
    for name, allowed in choices.items():
        value = values.get(name)
        if value is not None and value not in allowed:
            return f"{name} {value!r} is not one of its choices ({', '.join(map(str, allowed[:6]))}" + (
                ", ..." if len(allowed) > 6 else "") + ")"
    try:
        return models.missing_words(check) or True
    except InputError as e:
        return str(e)

