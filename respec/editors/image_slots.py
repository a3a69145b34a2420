"""The editor's images as numbered slots, for editors whose node takes image1, image2, image3
(ComfyUI's `TextEncodeQwenImageEditPlus` for Qwen-Image-Edit 2509 / 2511).

The Reference Selector gives the editor's images in the plan's `image_ids` order (appendix C.3:
restoration source, then identity anchor; the current image alone on a turn without a history
reference). They go in as image1, image2, ... in that order, so "the first image" of the rewritten
instruction is Picture 1 of the editor's prompt; slots beyond them stay empty.
"""
from __future__ import annotations

from typing import Sequence, TypeVar

from ..errors import InputError

T = TypeVar("T")
QWEN_EDIT_SLOTS = 3   # TextEncodeQwenImageEditPlus: image1..image3


def image_slots(images: Sequence[T], slots: int = QWEN_EDIT_SLOTS) -> list[T | None]:
    """`images` in order, padded with None to `slots` entries. InputError when there are none or
    more than the editor takes (it would silently drop a reference the plan chose)."""
    images = list(images)
    if not images:
        raise InputError("no editor images: give at least the current image (the selector's images)")
    if len(images) > slots:
        raise InputError(f"the plan gives the editor {len(images)} images, but this editor takes {slots} at most "
                         f"(image1..image{slots}); switch HRS off or use an editor that reads more references")
    return images + [None] * (slots - len(images))
