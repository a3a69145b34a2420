"""Image helpers for the core. The core's image is a uint8 numpy array H×W×C (C = 1, 3 or 4)
or a PIL image; ComfyUI's float tensors are converted at the node edge (nodes/common.py)."""
from __future__ import annotations

import hashlib
import math
import os
import stat
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from .errors import InputError

_MODES = {1: "L", 3: "RGB", 4: "RGBA"}

# The largest image the pack opens from a file (photos, scenario images): 40 megapixels, checked
# from the header before any pixel is decoded. A 12000×12000 PNG compresses to 50 kB and decodes
# to 2 GB; a decompression bomb is smaller still. Shrink larger photos before giving them.
MAX_IMAGE_PIXELS = 40_000_000


def clip_text(value: Any, limit: int = 200) -> str:
    """repr-like text of `value` cut to `limit` characters (what an error message may echo back)."""
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def image_file_problem(path: str | Path, max_pixels: int | None = MAX_IMAGE_PIXELS) -> str | None:
    """Why the file `path` cannot be opened as an image, or None when it can: it must be a regular
    file (not a FIFO, device or folder) whose header PIL reads and whose size is within
    `max_pixels` (None: PIL's own decompression-bomb limit only). Reads the header only."""
    try:
        st = os.stat(path)
    except (OSError, ValueError) as e:
        return f"cannot be read ({getattr(e, 'strerror', None) or e})"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    try:
        with open(path, "rb") as fh, warnings.catch_warnings():
            if max_pixels is not None:   # our own limit is checked below, PIL's warning would only be noise
                warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(fh) as im:
                w, h = im.size
    except Image.DecompressionBombError as e:
        return f"is refused as a decompression bomb ({e}); the pack opens images of at most {_mp(max_pixels)}"
    except (OSError, ValueError, SyntaxError, EOFError) as e:
        return f"is not an image file PIL can read ({clip_text(str(e))})"
    if max_pixels is not None and w * h > max_pixels:
        return (f"is {w}×{h} pixels ({w * h / 1e6:.1f} MP), over the limit of {_mp(max_pixels)} "
                f"(respec.images.MAX_IMAGE_PIXELS); shrink it first")
    return None


def _mp(max_pixels: int | None) -> str:
    return f"{max_pixels / 1e6:g} MP" if max_pixels is not None else f"{Image.MAX_IMAGE_PIXELS / 1e6:g} MP (PIL's limit)"


def open_image(path: str | Path, what: str = "image", max_pixels: int | None = MAX_IMAGE_PIXELS) -> Image.Image:
    """The one way the pack opens an image file: a decoded PIL image of `path`. Refuses (InputError
    naming the file and the limit) what `image_file_problem` refuses, before decoding anything;
    `what` names the input in the message."""
    problem = image_file_problem(path, max_pixels)
    if problem:
        raise InputError(f"{what} {clip_text(str(path))} {problem}")
    try:
        with open(path, "rb") as fh, warnings.catch_warnings():
            if max_pixels is not None:
                warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            im = Image.open(fh)
            if max_pixels is not None and im.size[0] * im.size[1] > max_pixels:   # replaced since the check
                raise InputError(f"{what} {clip_text(str(path))} is over the limit of {_mp(max_pixels)}")
            im.load()
    except Image.DecompressionBombError as e:
        raise InputError(f"{what} {clip_text(str(path))} is refused as a decompression bomb ({e})") from None
    except (OSError, ValueError, SyntaxError, EOFError) as e:
        if isinstance(e, InputError):
            raise
        raise InputError(f"{what} {clip_text(str(path))} could not be decoded ({clip_text(str(e))})") from e
    return im


def finite_array(value: Any, what: str) -> np.ndarray:
    """`value` as a numpy array, refusing NaN or infinite entries with an InputError naming `what`
    (a NaN pixel would make every threshold and record computed from it NaN)."""
    arr = np.asarray(getattr(value, "array", value))
    if arr.dtype.kind in "fc" and arr.size and not np.isfinite(arr).all():
        bad = int(arr.size - np.isfinite(arr).sum())
        raise InputError(f"{what} holds {bad} NaN or infinite value(s); give finite pixel values "
                         f"(0..1 floats or 0..255 integers)")
    return arr


MIN_IMAGE_SIDE = 2        # the smallest picture side the pack works on (gradients, seams, alignment need 2)
_CHUNK = 1 << 20          # values converted at a time (a 64 MP float batch never gets a float64 copy)


def check_image_size(shape_hw: tuple[int, int], what: str) -> None:
    """InputError naming `what` unless an image of (H, W) `shape_hw` is at least MIN_IMAGE_SIDE on both sides."""
    h, w = int(shape_hw[0]), int(shape_hw[1])
    if h < MIN_IMAGE_SIDE or w < MIN_IMAGE_SIDE:
        raise InputError(f"{what} is {w}×{h} pixels; ReSpec needs at least {MIN_IMAGE_SIDE}×{MIN_IMAGE_SIDE}: "
                         "give a real picture (resize it first)")


def _values_to_uint8(arr: np.ndarray, what: str) -> np.ndarray:
    """Float 0..1 values (any shape) -> uint8 as `to_uint8` rounds them, refusing NaN or infinite
    values; converted a few million values at a time, so the only full-size copy is the uint8 result."""
    if arr.dtype == np.uint8:
        return arr
    if arr.dtype.kind != "f":
        raise InputError(f"{what} must hold float values 0..1 (or uint8), got {arr.dtype}")
    flat = arr.reshape(-1)
    out = np.empty(flat.shape, np.uint8)
    buf = np.empty(min(flat.size, _CHUNK), np.float64)
    for i in range(0, flat.size, _CHUNK):
        part = flat[i:i + _CHUNK]
        if not np.isfinite(part).all():
            raise InputError(f"{what} holds NaN or infinite values; give finite pixel values 0..1 (the node "
                             "before it produced them: check its settings)")
        b = buf[:part.size]
        np.multiply(part, 255.0, out=b, dtype=np.float64)   # to_uint8's rounding, without its temporaries
        np.clip(np.round(b, out=b), 0, 255, out=b)
        out[i:i + part.size] = b
    return out.reshape(arr.shape)


def images_from_array(value: Any, what: str = "image") -> list[np.ndarray]:
    """The one check of an IMAGE input: an array (or anything numpy reads) [B,H,W,C] or [H,W,C] of
    float 0..1 (ComfyUI's IMAGE) or uint8, C in 1, 3, 4 -> a non-empty list of uint8 H×W×C arrays,
    each at least MIN_IMAGE_SIDE on both sides, no NaN or infinite value. InputError naming
    `what` and saying what to do otherwise."""
    arr = np.asarray(value)
    if arr.ndim == 3:
        arr = arr[None]
    if arr.ndim != 4 or arr.shape[-1] not in _MODES:
        raise InputError(f"{what}: expected an IMAGE [batch, height, width, channels] with 1, 3 or 4 channels, got "
                         f"shape {tuple(arr.shape)}; connect an IMAGE output (a MASK needs MaskToImage)")
    if arr.shape[0] == 0:
        raise InputError(f"{what}: the IMAGE batch is empty; connect a node that outputs at least one image")
    check_image_size(arr.shape[1:3], what)
    return list(_values_to_uint8(arr, what))


def masks_from_array(value: Any, what: str = "mask") -> list[np.ndarray]:
    """The one check of a MASK input: [H,W], [B,H,W], [H,W,1] or [B,H,W,1] (ComfyUI's MASK is
    [B,H,W] float 0..1) -> a non-empty list of bool H×W masks (> 0.5; uint8 > 127), each at least
    MIN_IMAGE_SIDE on both sides, no NaN. (A trailing axis of 1 is a channel: a mask 1 px wide is
    refused anyway.) InputError naming `what` and saying what to do otherwise."""
    arr = np.asarray(value)
    if arr.ndim in (3, 4) and arr.shape[-1] == 1:
        arr = arr[..., 0]
    if arr.ndim == 2:
        arr = arr[None]
    if arr.ndim != 3:
        raise InputError(f"{what}: expected a MASK [batch, height, width], got shape {tuple(arr.shape)}; "
                         "connect a MASK output (an IMAGE needs ImageToMask)")
    if arr.shape[0] == 0:
        raise InputError(f"{what}: the MASK batch is empty; connect a node that outputs at least one mask")
    check_image_size(arr.shape[1:], what)
    if arr.dtype == bool:
        return list(arr)
    if arr.dtype == np.uint8:
        return list(arr > 127)
    if arr.dtype.kind != "f":
        raise InputError(f"{what} must hold float values 0..1 (or bool / uint8), got {arr.dtype}")
    if not np.isfinite(arr).all():
        raise InputError(f"{what} holds NaN or infinite values; give finite mask values 0..1")
    return list(arr > 0.5)


def finite_pixels(img: Any, what: str) -> np.ndarray:
    """The core's check of an image argument (uint8 H×W×C, or float 0..1): at least MIN_IMAGE_SIDE
    on both sides, no NaN or infinite value. Returns it as an array."""
    arr = finite_array(getattr(img, "array", img) if not isinstance(img, Image.Image) else np.asarray(img), what)
    if arr.ndim < 2:
        raise InputError(f"{what}: expected an H×W or H×W×C image, got shape {arr.shape}")
    check_image_size(arr.shape[:2], what)
    return arr


def image_id_arg(value: Any, what: str) -> int:
    """An image id argument (0 = I_0): an int, or text of one; anything else is an InputError naming `what`."""
    if isinstance(value, bool):
        raise InputError(f"{what} must be an image id (an integer, 0 = the original image); got {value!r}")
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("+-").isdigit() and len(value.strip()) <= 30:
        return int(value.strip())
    raise InputError(f"{what} must be an image id (an integer, 0 = the original image); got {clip_text(value, 80)}")


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
