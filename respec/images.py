"""Image helpers for the core. The core's image is a uint8 numpy array H×W×C (C = 1, 3 or 4)
or a PIL image; ComfyUI's float tensors are converted at the node edge (nodes/common.py)."""
from __future__ import annotations

import hashlib
from typing import Any

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


def rgb_array(img: Any) -> np.ndarray:
    """Any image -> uint8 H×W×3 (alpha composited over white, grey expanded): a PIL image, a
    StoredImage, or an H×W / H×W×C array of uint8, bool (True = white) or float (0..1, or 0..255
    when its maximum is above 1)."""
    img = getattr(img, "array", img)
    if not isinstance(img, Image.Image):
        arr = np.asarray(img)
        if arr.dtype == bool:
            arr = arr.astype(np.uint8) * 255
        elif arr.dtype != np.uint8:
            arr = to_uint8(arr) if arr.size and float(arr.max()) <= 1.0 else \
                np.clip(np.round(arr.astype(np.float64)), 0, 255).astype(np.uint8)
        img = as_array(arr)
    return np.asarray(as_rgb(img))


def as_mask(mask: Any, what: str = "mask") -> np.ndarray:
    """bool H×W from a mask array of any dtype: bool as is; values that are all 0 or 1 mark
    their ones; otherwise a 0..255 scale (any value above 1) counts above 127 as inside, and a
    0..1 float scale above 0.5."""
    m = np.asarray(mask)
    if m.ndim == 3 and m.shape[0] == 1:
        m = m[0]
    if m.ndim == 3 and m.shape[2] == 1:
        m = m[:, :, 0]
    if m.ndim != 2:
        raise InputError(f"{what}: expected an H×W mask, got shape {m.shape}")
    if m.dtype == bool:
        return m
    if m.dtype.kind not in "uif":
        raise InputError(f"{what}: expected a numeric or bool mask, got dtype {m.dtype}")
    if ((m == 0) | (m == 1)).all():
        return m == 1
    m = m.astype(np.float64)
    return m > 127.5 if m.max(initial=0.0) > 1.0 else m > 0.5


def resize_mask(mask: np.ndarray, shape_hw: tuple[int, int]) -> np.ndarray:
    """Nearest-neighbour resize of a bool mask to (H, W); a no-op when the shape already matches."""
    mask = as_mask(mask)
    if mask.shape == tuple(shape_hw):
        return mask
    pil = Image.fromarray(mask.astype(np.uint8) * 255, "L").resize((shape_hw[1], shape_hw[0]), Image.NEAREST)
    return np.asarray(pil) > 127
