"""The controller's two prompts (paper appendix C.2, figures 12 and 13) and the message built
around them.

The template is the system message. The user message interleaves the history images, each
preceded by its label ("Image k:"), then the edit history and the current request. Image ids
follow the paper: Image 0 is the original I_0, Images 1..N-1 are the earlier edits, and the
last one, I_{N-1}, is the editor's input; it is shown once, not duplicated.
"""
from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np
from PIL import Image

from ..errors import InputError
from ..history import History, StoredImage
from ..images import as_rgb, downscale_to_budget
from ..pixels.analysis_cache import CACHE, AnalysisCache
from ..text import clip

RESTORATION = "restoration"
MIDTURN = "midturn"

# Default pixel budget per history image: 512x512 gives Qwen3-VL 256 visual tokens an image,
# so a 5-turn history stays well inside its context and memory on a 24 GB card.
DEFAULT_MAX_PIXELS = 512 * 512
MAX_PIXELS = 4096 * 4096        # the most pixels per history image a controller is sent (the nodes' widget limit)

TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"


@dataclass(frozen=True)
class Templates:
    """The restoration prompt (figure 12) and the mid-turn rewrite prompt (figure 13)."""

    restoration: str
    midturn: str
    restoration_source: str = "built-in"
    midturn_source: str = "built-in"

    def text(self, kind: str) -> str:
        """The template for `kind` ("restoration" or "midturn")."""
        if kind == RESTORATION:
            return self.restoration
        if kind == MIDTURN:
            return self.midturn
        raise ValueError(f"unknown prompt kind {kind!r}; use 'restoration' or 'midturn'")

    def describe(self, kind: str) -> dict:
        """Where the template came from and a short digest of its text (for plan.meta)."""
        text = self.text(kind)
        src = self.restoration_source if kind == RESTORATION else self.midturn_source
        return {"source": src, "sha256": hashlib.sha256(text.encode()).hexdigest()[:16]}


# The shipped templates, read once when the module loads (they only change with the pack).
BUILTIN_TEMPLATES: Mapping[str, str] = MappingProxyType(
    {kind: (TEMPLATE_DIR / f"{kind}.txt").read_text(encoding="utf-8") for kind in (RESTORATION, MIDTURN)})


def builtin_template(kind: str) -> str:
    """The template text shipped with the pack (respec/controller/templates/<kind>.txt)."""
    if kind not in BUILTIN_TEMPLATES:
        raise ValueError(f"unknown prompt kind {kind!r}; use 'restoration' or 'midturn'")
    return BUILTIN_TEMPLATES[kind]


def _read_override(path: str, kind: str) -> str:
    p = Path(path).expanduser()
    if not p.is_file():
        raise InputError(f"the {kind} prompt template file {str(p)!r} does not exist; give the path of a "
                         f"UTF-8 text file, or leave the field empty to use the built-in template")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"the {kind} prompt template file {str(p)!r} is not UTF-8 text ({e}); save it "
                         "as UTF-8") from e
    if not text.strip():
        raise InputError(f"the {kind} prompt template file {str(p)!r} is empty")
    return text


def load_templates(restoration_path: str | None = None, midturn_path: str | None = None) -> Templates:
    """The built-in templates, each replaced by the text of a file when its path is given."""
    rest = _read_override(restoration_path, RESTORATION) if restoration_path else builtin_template(RESTORATION)
    mid = _read_override(midturn_path, MIDTURN) if midturn_path else builtin_template(MIDTURN)
    return Templates(rest, mid,
                     str(Path(restoration_path).expanduser()) if restoration_path else "built-in",
                     str(Path(midturn_path).expanduser()) if midturn_path else "built-in")


def template_fingerprint(restoration_path: str | os.PathLike | None = None,
                         midturn_path: str | os.PathLike | None = None) -> str:
    """The Preservation Target's cache key for its template files: a digest of the override
    templates' paths and text, read the way load_templates reads them; '' when no override is
    given (the built-in text only changes with the pack). A file that cannot be read gets a key of
    its own, so the run itself reports what is wrong."""
    rest, mid = (str(p or "").strip() for p in (restoration_path, midturn_path))
    if not (rest or mid):
        return ""
    try:
        t = load_templates(rest or None, mid or None)
        key = "\0".join((t.restoration_source, t.restoration, t.midturn_source, t.midturn))
    except (InputError, OSError) as e:
        key = f"unreadable\0{rest}\0{mid}\0{e}"
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def history_text(history: History, user_instruction: str, shown: Sequence[int] | None = None) -> str:
    """The edit history and the current request, as text (user instructions only: the
    controller never sees ground truth or earlier rewrites). `shown`: the image ids shown above
    when not all of them are (respec/controller/history_images.py); every turn is listed anyway."""
    t = history.next_turn
    lines = ["Edit history:"]
    if t == 1:
        lines.append("(no earlier turns)")
    for k, instr in enumerate(history.instructions, start=1):
        lines.append(f"Turn {k} (Image {k - 1} -> Image {k}): {instr}")
    lines.append("")
    ids = list(range(t)) if shown is None else sorted(set(int(i) for i in shown))
    if ids == list(range(t)):
        seen = f"Images 0 to {t - 1} are shown above"
    else:
        seen = (f"Images {', '.join(map(str, ids[:-1]))} and {ids[-1]} are shown above, with their history ids "
                f"(the other images are left out to keep the prompt short)")
    lines.append(f"This is turn N = {t}. {seen}; Image {t - 1} is I_{{N-1}}, "
                 f"the current image the editor will edit.")
    lines.append(f"[Current Request] (turn {t}): {user_instruction}")
    return "\n".join(lines)


def checked_max_pixels(value: Any) -> int:
    """The pixel budget per history image: None or 0 -> DEFAULT_MAX_PIXELS, else a whole number
    1..MAX_PIXELS (InputError otherwise)."""
    if value is None or (isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value == 0):
        return DEFAULT_MAX_PIXELS
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 1 <= value <= MAX_PIXELS:
        raise InputError(f"max_pixels must be a whole number of pixels from 1 to {MAX_PIXELS:,} "
                         f"(262144 = 512x512), got {clip(value)}")
    return int(value)


def build_parts(history: History, user_instruction: str, max_pixels: int = DEFAULT_MAX_PIXELS,
                shown: Sequence[int] | None = None, cache: AnalysisCache = CACHE) -> list:
    """The user message: "Image k:" then I_k for k = 0..t-1, or for the ids in `shown` (in
    history order; respec/controller/history_images.py chooses them), each downscaled to
    `max_pixels` (kept in `cache`), then the edit history and the current request."""
    ids = range(history.next_turn) if shown is None else sorted(set(int(i) for i in shown))
    parts: list = []
    for k in ids:
        parts.append(f"Image {k}:")
        parts.append(downscaled(history.image(k), max_pixels, cache))
    parts.append(history_text(history, user_instruction, None if shown is None else ids))
    return parts


def downscaled(img: StoredImage, max_pixels: int, cache: AnalysisCache = CACHE) -> Image.Image:
    """`img` as RGB, shrunk (keeping aspect) to at most `max_pixels`; kept in `cache.downscaled` by
    content hash and budget (a conversation's earlier images are shrunk once, not on every turn).
    Callers must not change the returned image."""
    key = (img.digest, int(max_pixels))
    hit = cache.downscaled.get(key)
    if hit is not None:
        return hit
    out = downscale_to_budget(as_rgb(img.array), max_pixels)
    cache.downscaled.put(key, out)
    return out
