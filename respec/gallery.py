"""A whole conversation as one picture batch: the images of a range of turns of a history, made
the same size so they fit in one IMAGE batch, and a text log of the turns (History to Images).

Sizes: an editor may return another size than its input (and a session may mix sizes after a
branch), but one IMAGE batch holds one size. Every frame is therefore brought to the size of the
FIRST turn of the range: `fit="pad"` (default) scales it to fit inside that size, keeping its
aspect ratio, and centres it on black; `fit="stretch"` scales it to exactly that size; `fit=
"crop"` scales it to cover that size and cuts the overflow, centred. A frame of that size already
is passed through unchanged (bit-exact). The log says which frames were resized, and from what.
"""
from __future__ import annotations

import numpy as np
from PIL import Image

from .errors import InputError
from .history import History
from .text import clip

FITS = ("pad", "stretch", "crop")


def turn_range(history: History, first: int, last: int) -> range:
    """Turn indices first..last (inclusive; last = -1 means the latest turn), checked against the
    history: InputError when the range is empty or outside turns 0..n."""
    n = len(history.turns)
    if not isinstance(first, int) or not isinstance(last, int):
        raise InputError("first_turn and last_turn must be whole numbers")
    stop = n - 1 if last < 0 else last
    if not 0 <= first < n:
        raise InputError(f"first_turn {first} is outside the history, which has turns 0..{n - 1}")
    if stop >= n:
        raise InputError(f"last_turn {last} is outside the history, which has turns 0..{n - 1}")
    if stop < first:
        raise InputError(f"last_turn {stop} is before first_turn {first}: nothing to output")
    return range(first, stop + 1)


def _rgb(arr: np.ndarray) -> np.ndarray:
    if arr.shape[2] == 3:
        return arr
    if arr.shape[2] == 1:
        return np.repeat(arr, 3, axis=2)
    return arr[:, :, :3]   # RGBA: the colour; the batch carries no alpha


def fit_frame(arr: np.ndarray, size: tuple[int, int], fit: str = "pad") -> np.ndarray:
    """An RGB uint8 frame of exactly `size` (width, height) from `arr` (see the module text). The
    work is sized by the output: 'crop' resamples only the part of `arr` that covers the frame
    (PIL's resize box), 'pad' scales into a picture no larger than the frame, so a 1-pixel-wide
    turn in a batch of wide frames costs what the frame costs, not what scaling it up would."""
    if fit not in FITS:
        raise InputError(f"fit must be one of {list(FITS)}, got {clip(fit)}")
    arr = _rgb(arr)
    w, h = size
    ih, iw = arr.shape[:2]
    if (iw, ih) == (w, h):
        return arr
    im = Image.fromarray(arr, "RGB")
    if fit == "stretch":
        return np.asarray(im.resize((w, h), Image.BICUBIC))
    if fit == "crop":
        scale = max(w / iw, h / ih)
        cw, ch = w / scale, h / scale          # the part of the input the frame shows (<= its size)
        left, top = (iw - cw) / 2.0, (ih - ch) / 2.0
        return np.asarray(im.resize((w, h), Image.BICUBIC, box=(left, top, left + cw, top + ch)))
    scale = min(w / iw, h / ih)
    sw, sh = max(1, min(w, round(iw * scale))), max(1, min(h, round(ih * scale)))
    im = im.resize((sw, sh), Image.BICUBIC)
    canvas = Image.new("RGB", (w, h))
    canvas.paste(im, ((w - sw) // 2, (h - sh) // 2))
    return np.asarray(canvas)


def _line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def history_images(history: History, first: int = 0, last: int = -1, fit: str = "pad") -> tuple[list[np.ndarray], str, list[int]]:
    """The images of turns first..last as same-size RGB uint8 frames, a text log (one line per turn:
    index, size, the user's request, the sent instruction when it differs, resizing), and the
    turn indices. Raises InputError for a bad range or fit."""
    if fit not in FITS:
        raise InputError(f"fit must be one of {list(FITS)}, got {fit!r}")
    indices = list(turn_range(history, first, last))
    target = history.turns[indices[0]].image.size
    frames, lines = [], []
    sid = history.session_id or "(in-graph history)"
    lines.append(f"session {sid}: turns {indices[0]}..{indices[-1]} of 0..{len(history.turns) - 1}, "
                 f"frames {target[0]}x{target[1]} ({fit})")
    for k in indices:
        t = history.turns[k]
        arr = np.asarray(t.image.array)
        if arr.ndim == 2:
            arr = arr[:, :, None]
        size = (arr.shape[1], arr.shape[0])
        frames.append(fit_frame(arr, target, fit))
        what = "original image" if k == 0 else f"“{_line(t.instruction)}”"
        line = f"I{k} {size[0]}x{size[1]}: {what}"
        if k > 0 and t.sent_instruction and t.sent_instruction != t.instruction:
            line += f" \u2192 sent “{_line(t.sent_instruction)}”"
        if size != tuple(target):
            line += f" [{fit} {size[0]}x{size[1]} \u2192 {target[0]}x{target[1]}]"
        lines.append(line)
    return frames, "\n".join(lines), indices

