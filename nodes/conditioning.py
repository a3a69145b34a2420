"""The ComfyUI-native route: the selector's images as reference latents on a CONDITIONING.

ComfyUI's own FLUX.2 and OmniGen2 models read reference images from the conditioning's
"reference_latents" list (what its ReferenceLatent node fills). This module does the same for a
whole batch of references, in the selector's order, without importing ComfyUI: a CONDITIONING
is a list of [tensor, dict] pairs and ComfyUI's VAE object has `encode(pixels[B,H,W,C])`.
It speaks ComfyUI's types only, so it lives with the adapters, not in the core.
"""
from __future__ import annotations

import math

from ..respec.errors import InputError


def scale_to_megapixels(image, megapixels: float, multiple: int = 16):
    """IMAGE [1,H,W,C] float -> about `megapixels` * 2**20 pixels, aspect kept, sides on `multiple`.

    megapixels <= 0 keeps the size. Mirrors the "scale to total pixels" step that ComfyUI's
    FLUX.2 / OmniGen2 edit workflows put before their reference VAE encode.
    """
    import torch.nn.functional as F
    if megapixels is None or megapixels <= 0:
        return image
    _, h, w, _ = image.shape
    s = math.sqrt(megapixels * 1024 * 1024 / float(w * h))
    nw = max(multiple, int(round(w * s / multiple)) * multiple)
    nh = max(multiple, int(round(h * s / multiple)) * multiple)
    if (nw, nh) == (w, h):
        return image
    x = image.movedim(-1, 1)
    x = F.interpolate(x, size=(nh, nw), mode="bicubic", antialias=True, align_corners=False)
    return x.movedim(1, -1).clamp(0.0, 1.0)


def append_reference_latents(conditioning, vae, images, megapixels: float = 1.0) -> list:
    """A new CONDITIONING whose every entry's "reference_latents" list has one VAE latent per image
    appended, in the images' order (paper: restoration source first, identity anchor second).

    conditioning: ComfyUI CONDITIONING (list of [tensor, dict]); never modified.
    vae: ComfyUI's VAE (anything with `encode(pixels [B,H,W,C] float 0..1)` returning latents).
    images: IMAGE [N,H,W,C] (the Reference Selector's editor_images).
    """
    if not isinstance(conditioning, (list, tuple)) or not all(
            isinstance(c, (list, tuple)) and len(c) >= 2 and isinstance(c[1], dict) for c in conditioning):
        raise InputError("conditioning must be a ComfyUI CONDITIONING (a list of [tensor, dict] pairs), "
                         "e.g. the output of 'CLIP Text Encode'")
    if images is None or getattr(images, "ndim", 0) != 4 or images.shape[0] == 0:
        raise InputError(f"editor_images must be a non-empty IMAGE batch [N,H,W,C]; got "
                         f"{tuple(getattr(images, 'shape', ())) or type(images).__name__}")
    if not hasattr(vae, "encode"):
        raise InputError("vae must be a ComfyUI VAE (from 'Load VAE' or a checkpoint loader)")
    latents = []
    for i in range(images.shape[0]):
        pixels = scale_to_megapixels(images[i:i + 1, :, :, :3], megapixels)
        latents.append(vae.encode(pixels))
    out = []
    for entry in conditioning:
        values = dict(entry[1])
        values["reference_latents"] = list(values.get("reference_latents") or []) + latents
        out.append([entry[0], values, *entry[2:]])
    return out
