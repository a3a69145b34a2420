"""The editing history H_{t-1} = (I_0, P_1, I_1, ..., P_{t-1}, I_{t-1}) as an immutable value.

Appending returns a new History that shares every earlier Turn (and so every image array):
nothing is copied when a history flows from node to node. The persistent, multi-prompt form
lives in respec/store/.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Iterable

import numpy as np
from PIL import Image

from .errors import InputError
from .images import as_array, as_pil, as_rgb, content_hash
from .plan import Plan


class StoredImage:
    """A read-only uint8 H×W×C image with its content hash, shared by every holder."""

    __slots__ = ("array", "digest")

    def __init__(self, array: np.ndarray, digest: str | None = None):
        arr = as_array(array)
        if arr.flags.writeable:
            arr = arr.copy()  # the one copy: we own it and freeze it
            arr.flags.writeable = False
        self.array = arr
        self.digest = digest or content_hash(arr)

    @classmethod
    def of(cls, img: Any) -> "StoredImage":
        """`img` itself when it is a StoredImage, else a new one holding its pixels."""
        return img if isinstance(img, StoredImage) else cls(as_array(img))

    @property
    def size(self) -> tuple[int, int]:
        """(width, height), as PIL reports it."""
        return (self.array.shape[1], self.array.shape[0])

    def pil(self) -> Image.Image:
        """The pixels as a PIL image (L, RGB or RGBA, as stored)."""
        return as_pil(self.array)

    def __array__(self, dtype=None, copy=None):
        # np.asarray(stored) reads the pixels (read-only), so a StoredImage goes where an array did.
        return self.array if dtype is None else self.array.astype(dtype)

    def rgb(self) -> Image.Image:
        """The pixels as an RGB PIL image (alpha over white, grey expanded)."""
        return as_rgb(self.array)

    def __eq__(self, other) -> bool:
        return isinstance(other, StoredImage) and other.digest == self.digest

    def __hash__(self) -> int:
        return hash(self.digest)

    def __repr__(self) -> str:
        return f"StoredImage({self.array.shape}, {self.digest[:10]})"


# Names of the per-turn masks (Turn.masks); the store keeps them beside the turn.
CHANGE = "change"                # C_t: the pixels turn t changed (respec/pixels/change_mask.py)
REVEAL_SOURCE = "reveal_source"  # weight of the pasted historical pixels (Reveal Composite)


@dataclass(frozen=True, eq=False)
class TurnMask:
    """A per-pixel record kept with a turn: an L image (0..255; 255 = fully inside, values in
    between are weights, e.g. a feathered seam) and a JSON-able `info` saying how it was made."""

    image: StoredImage
    info: dict = field(default_factory=dict)

    @classmethod
    def from_mask(cls, mask: np.ndarray, info: dict | None = None) -> "TurnMask":
        """From a boolean H×W mask (True = 255) or float weights in 0..1."""
        m = np.asarray(mask)
        if m.ndim != 2:
            raise InputError(f"a turn mask must be H×W, got shape {m.shape}")
        arr = (m.astype(np.uint8) * 255 if m.dtype == bool
               else np.clip(np.round(m.astype(np.float64) * 255), 0, 255).astype(np.uint8))
        return cls(StoredImage(arr[:, :, None]), dict(info or {}))

    @property
    def mask(self) -> np.ndarray:
        """bool H×W: the pixels at least half inside."""
        return self.image.array[:, :, 0] >= 128

    @property
    def weights(self) -> np.ndarray:
        """float32 H×W in 0..1."""
        return self.image.array[:, :, 0].astype(np.float32) / 255.0

    def to_record(self) -> dict:
        """JSON-able reference: the mask image's digest, its size and info (the store keeps the pixels)."""
        return {"image": self.image.digest, "size": list(self.image.size), "info": self.info}


_MASK_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")


def check_masks(masks: Any) -> dict:
    """A turn's masks as a new dict, checked: names are short lowercase identifiers, values TurnMasks."""
    if masks is None:
        return {}
    if not isinstance(masks, dict):
        raise InputError(f"a turn's masks must be a dict of name -> TurnMask, got {type(masks).__name__}")
    for name, m in masks.items():
        if not isinstance(name, str) or not _MASK_NAME.fullmatch(name):
            raise InputError(f"mask name {name!r} is not allowed: use 1-32 lowercase letters, digits or '_'")
        if not isinstance(m, TurnMask):
            raise InputError(f"mask {name!r} must be a TurnMask, got {type(m).__name__}")
    return dict(masks)


@dataclass(frozen=True)
class Turn:
    """Turn t: the user's P_t, what the editor was actually sent, the plan, and I_t.
    Turn 0 holds the original image I_0 and empty instructions."""

    index: int
    image: StoredImage
    instruction: str = ""
    sent_instruction: str = ""
    plan: Plan | None = None
    meta: dict = field(default_factory=dict)   # seed, editor, timings, ... (JSON-able)
    masks: dict = field(default_factory=dict)  # name -> TurnMask (CHANGE, REVEAL_SOURCE, ...)

    @property
    def change(self) -> "TurnMask | None":
        """C_t, the stored change mask of this turn (None for turn 0 or when not recorded)."""
        return self.masks.get(CHANGE)

    def mask_records(self) -> dict:
        """The turn's masks as JSON-able records: {name: {"image": digest, "size", "info"}}."""
        return {name: m.to_record() for name, m in sorted(self.masks.items())}

    def to_record(self) -> dict:
        """JSON-able description (the image by digest only)."""
        rec = {"index": self.index, "image": self.image.digest, "size": list(self.image.size),
               "instruction": self.instruction, "sent_instruction": self.sent_instruction,
               "plan": self.plan.to_dict() if self.plan else None, "meta": self.meta}
        if self.masks:
            rec["masks"] = self.mask_records()
        return rec

    def summary(self) -> dict:
        """What a timeline shows of this turn: texts, the image by digest with its width and
        height, the plan's summary, meta, the masks' records. No pixels."""
        w, h = self.image.size
        return {"index": self.index, "instruction": self.instruction,
                "sent_instruction": self.sent_instruction, "image": self.image.digest,
                "width": w, "height": h, "plan": self.plan.summary() if self.plan else None,
                "meta": self.meta, "masks": self.mask_records()}


@dataclass(frozen=True)
class History:
    """All turns so far. `session_id`/`version` tie it to a persistent session, when it has one;
    `store_root` names the session store (directory) it lives in. `turns` is a tuple, or for a
    history loaded from the store a sequence that reads its earlier turns on first access."""

    turns: tuple[Turn, ...]
    session_id: str | None = None
    version: int = 0
    store_root: str | None = None

    def __post_init__(self):
        if not len(self.turns):
            raise InputError("a history needs at least the original image (turn 0)")
        if not isinstance(self.turns, tuple):
            return   # a lazy sequence from the session store, which checks the indices it reads
        for i, t in enumerate(self.turns):
            if t.index != i:
                raise InputError(f"turn indices must be 0..n-1 in order; turn at {i} says {t.index}")

    @classmethod
    def start(cls, image: Any, session_id: str | None = None, meta: dict | None = None) -> "History":
        """A history holding only I_0."""
        return cls((Turn(0, StoredImage.of(image), meta=dict(meta or {})),), session_id, 0)

    # -- reading -----------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.turns)

    @property
    def next_turn(self) -> int:
        """t for the edit about to happen (1 after only I_0)."""
        return len(self.turns)

    @property
    def current(self) -> Turn:
        """The latest turn: its image is I_{t-1}, the editor's input."""
        return self.turns[-1]

    @property
    def images(self) -> list[StoredImage]:
        """[I_0, ..., I_{t-1}]; index = image id used by the controller."""
        return [t.image for t in self.turns]

    @property
    def instructions(self) -> list[str]:
        """[P_1, ..., P_{t-1}] (turn 0 has none)."""
        return [t.instruction for t in self.turns[1:]]

    def image(self, image_id: int) -> StoredImage:
        """I_{image_id}; an InputError naming the valid ids when there is no such image."""
        if not 0 <= image_id < len(self.turns):
            raise InputError(f"image id {image_id} does not exist; this history has ids 0..{len(self.turns) - 1}")
        return self.turns[image_id].image

    def summary(self) -> dict:
        """JSON-able description: session id, version, each turn's summary, and the latest plan
        (with the turn it was applied at). The one shape every panel reads (GET /respec/sessions/{id},
        the `respec.history` event)."""
        turns = [t.summary() for t in self.turns]
        latest = next((dict(t["plan"], applied_turn=t["index"]) for t in reversed(turns) if t["plan"]), None)
        return {"session_id": self.session_id, "version": self.version, "turns": turns,
                "latest_plan": latest}

    @cached_property
    def fingerprint(self) -> str:
        """Changes whenever any turn changes (used as ComfyUI's IS_CHANGED value)."""
        import hashlib, json
        h = hashlib.sha256()
        for t in self.turns:
            h.update(json.dumps(t.to_record(), sort_keys=True, default=str).encode())
        return h.hexdigest()

    # -- new values --------------------------------------------------------------------
    def append(self, image: Any, instruction: str, sent_instruction: str | None = None,
               plan: Plan | None = None, meta: dict | None = None,
               masks: dict | None = None) -> "History":
        """A new history with turn t added; this one is unchanged. `masks`: per-pixel records of
        the turn by name (e.g. {CHANGE: change_mask.change_for(history, image)})."""
        turn = Turn(len(self.turns), StoredImage.of(image), instruction,
                    instruction if sent_instruction is None else sent_instruction,
                    plan, dict(meta or {}), check_masks(masks))
        return replace(self, turns=self.turns + (turn,), version=self.version + 1)

    def rewind(self, k: int) -> "History":
        """Keep turns 0..k (undo the later ones)."""
        if not 0 <= k < len(self.turns):
            raise InputError(f"cannot rewind to turn {k}: this history has turns 0..{len(self.turns) - 1}")
        return replace(self, turns=self.turns[: k + 1], version=self.version + 1)

    def with_turns(self, turns: Iterable[Turn]) -> "History":
        """A copy of this history with these turns (every other field kept)."""
        return replace(self, turns=tuple(turns))
