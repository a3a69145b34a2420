"""Image helpers for the core. The core's image is a uint8 numpy array H×W×C (C = 1, 3 or 4)
or a PIL image; ComfyUI's float tensors are converted at the node edge (nodes/common.py)."""
from __future__ import annotations

import hashlib

import numpy as np
from PIL import Image

from .errors import InputError

_MODES = {1: "L", 3: "RGB", 4: "RGBA"}


def as_array(img) -> np.ndarray:
    """PIL image or array -> uint8 H×W×C array (C in 1, 3, 4). Raises InputError otherwise."""
    if isinstance(img, Image.Image):
        if img.mode not in ("L", "RGB", "RGBA"):
            img = img.convert("RGBA" if "A" in img.getbands() else "RGB")
        arr = np.asarray(img)
    else:
        arr = np.asarray(img)
    if arr.ndim == 2:
        arr = arr[:, :, None]
    if arr.ndim != 3 or arr.shape[2] not in _MODES:
        raise InputError(f"expected an image of shape H×W×C with C in 1, 3 or 4; got shape {arr.shape}")
    if arr.dtype != np.uint8:
        raise InputError(f"expected uint8 pixels, got {arr.dtype}; convert with to_uint8() first")
    if arr.shape[0] < 1 or arr.shape[1] < 1:
        raise InputError(f"empty image of shape {arr.shape}")
    return arr


def to_uint8(arr: np.ndarray) -> np.ndarray:
    """Float 0..1 -> uint8 with rounding (the inverse of /255 is exact for k/255 values)."""
    arr = np.asarray(arr)
    if arr.dtype == np.uint8:
        return arr
    return np.clip(np.round(arr.astype(np.float64) * 255.0), 0, 255).astype(np.uint8)


def as_pil(img) -> Image.Image:
    """Array or PIL -> PIL (L, RGB or RGBA)."""
    if isinstance(img, Image.Image):
        return img
    arr = as_array(img)
    return Image.fromarray(arr[:, :, 0] if arr.shape[2] == 1 else arr, _MODES[arr.shape[2]])


def as_rgb(img) -> Image.Image:
    """PIL RGB for models: alpha composited over white, grey expanded."""
    pil = as_pil(img)
    if pil.mode == "RGB":
        return pil
    if pil.mode == "RGBA":
        bg = Image.new("RGB", pil.size, (255, 255, 255))
        bg.paste(pil, mask=pil.getchannel("A"))
        return bg
    return pil.convert("RGB")


def content_hash(arr: np.ndarray) -> str:
    """sha256 over shape, dtype and pixels: equal images share one stored copy."""
    arr = np.ascontiguousarray(arr)
    h = hashlib.sha256()
    h.update(f"{arr.shape}|{arr.dtype.str}|".encode())
    h.update(arr.tobytes())
    return h.hexdigest()


def resize(img, size: tuple[int, int], resample=Image.BICUBIC) -> Image.Image:
    """Resize to (width, height) as PIL; no-op when the size already matches."""
    pil = as_pil(img)
    return pil if pil.size == tuple(size) else pil.resize(tuple(size), resample)


def downscale_to_budget(img, max_pixels: int) -> Image.Image:
    """Shrink (keeping aspect) so width*height <= max_pixels; never enlarges."""
    pil = as_pil(img)
    w, h = pil.size
    if max_pixels <= 0 or w * h <= max_pixels:
        return pil
    s = (max_pixels / float(w * h)) ** 0.5
    return pil.resize((max(1, int(w * s)), max(1, int(h * s))), Image.BICUBIC)
