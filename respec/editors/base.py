"""The Editor interface and what every in-context editor shares: size snapping, reference
resizing, seeding, per-step progress and interruption.

An editor turns (the Reference Selector's images, the synthesis instruction) into the next
image I_t (paper section 4.3). Images arrive in the selector's order: on a restoration turn
[restoration source, identity anchor], otherwise [current image]. The output is returned at
`output_size` (the current image's size) exactly, so that masks of I_{t-1} and I_t line up.
"""
from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from typing import Any, Callable, Sequence

from PIL import Image

from .. import comfy
from ..errors import InputError
from ..images import as_rgb


class Editor(ABC):
    """A reference-conditioned image editor.

    Subclasses set `name`, `min_side` / `multiple` (what sizes the model accepts) and the
    paper's defaults, and implement `edit`. `last_run` holds what the latest edit used
    (seed, steps, guidance, generation size, seconds) for the history's metadata.
    """

    name: str = "editor"
    min_side: int = 64          # smallest side the model accepts, in pixels
    multiple: int = 16          # generation sizes are multiples of this
    max_aspect: float = 8.0     # longest / shortest side the model accepts
    default_steps: int = 30
    default_guidance: float = 4.0

    def __init__(self):
        self.last_run: dict = {}

    @abstractmethod
    def edit(self, images: list, instruction: str, *, output_size: tuple[int, int], seed: int,
             steps: int | None = None, guidance: float | None = None, **extra) -> Image.Image:
        """Edit with `images` (selector order) and `instruction`; return a PIL image of `output_size`."""

    def describe(self) -> dict:
        """A JSON-able summary of the loaded editor (shown in node outputs and history metadata)."""
        return {"editor": self.name}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


# --------------------------------------------------------------------------- sizes

def check_size(size: tuple[int, int], min_side: int, max_aspect: float, what: str = "image") -> None:
    """Raise InputError if a (width, height) is smaller than the model's minimum or too elongated."""
    w, h = int(size[0]), int(size[1])
    if w < min_side or h < min_side:
        raise InputError(
            f"The {what} is {w}x{h} pixels; this editor needs at least {min_side} pixels on each side. "
            f"Upscale it first (e.g. ComfyUI's 'Upscale Image' node) or choose a larger output size.")
    if max(w, h) / min(w, h) > max_aspect:
        raise InputError(
            f"The {what} is {w}x{h} pixels, an aspect ratio above {max_aspect:g}:1 that this editor does "
            f"not accept; crop it first.")


def snap_size(size: tuple[int, int], multiple: int, min_side: int, max_pixels: int | None = None) -> tuple[int, int]:
    """The generation size for an output of `size` (width, height).

    Scaled down (aspect kept) when above `max_pixels`, then floored to a multiple of
    `multiple`, never below `min_side`. The result is what the model is asked for; the
    caller resizes the output back to `size`.
    """
    w, h = float(size[0]), float(size[1])
    if max_pixels and w * h > max_pixels:
        s = math.sqrt(max_pixels / (w * h))
        w, h = w * s, h * s
    low = int(math.ceil(min_side / multiple) * multiple)
    return (max(low, int(w) // multiple * multiple), max(low, int(h) // multiple * multiple))


def fit_reference(image: Image.Image, area: int, multiple: int, min_side: int) -> Image.Image:
    """Resize one reference to about `area` pixels, keeping its aspect ratio, sides on `multiple`.

    References of mixed sizes (a history can hold a crop or an upscale) are all brought to the
    generation's pixel budget so each contributes a comparable number of tokens.
    """
    w, h = image.size
    s = math.sqrt(area / float(w * h))
    low = int(math.ceil(min_side / multiple) * multiple)
    nw = max(low, int(round(w * s / multiple)) * multiple)
    nh = max(low, int(round(h * s / multiple)) * multiple)
    return image if (nw, nh) == (w, h) else image.resize((nw, nh), Image.LANCZOS)


def prepare_references(images: Sequence, gen_size: tuple[int, int], *, multiple: int, min_side: int,
                       max_aspect: float) -> list[Image.Image]:
    """Validate and convert the selector's images to RGB PIL images sized for the generation.

    Order is kept (the paper's instruction speaks of "the first image"). An empty list or an
    image below the model's minimum raises InputError.
    """
    if not images:
        raise InputError("The editor got no images. Connect the Reference Selector's editor_images "
                         "(on a non-restoration turn it holds just the current image).")
    area = gen_size[0] * gen_size[1]
    out = []
    for i, img in enumerate(images):
        pil = as_rgb(getattr(img, "array", img))
        check_size(pil.size, min_side, max_aspect, what=f"reference image {i + 1} of {len(images)}")
        out.append(fit_reference(pil, area, multiple, min_side))
    return out


def to_output_size(image: Image.Image, output_size: tuple[int, int]) -> Image.Image:
    """The generated image at exactly `output_size` (width, height), RGB."""
    image = image.convert("RGB")
    size = (int(output_size[0]), int(output_size[1]))
    return image if image.size == size else image.resize(size, Image.LANCZOS)


# --------------------------------------------------------------------------- seeds & steps

def seeded_generator(seed: int):
    """A CPU torch.Generator seeded with `seed`: the same seed gives the same noise on any device."""
    import torch
    seed = int(seed)
    if not 0 <= seed <= 0xFFFF_FFFF_FFFF_FFFF:
        raise InputError(f"seed must be between 0 and 2**64-1, got {seed}")
    return torch.Generator(device="cpu").manual_seed(seed)


class StepReporter:
    """Per-denoising-step bookkeeping: progress bar, a `respec.editor_step` event, the interrupt
    check (raises between steps) and step timings."""

    def __init__(self, bar, editor: str, total: int):
        self.bar, self.editor, self.total = bar, editor, int(total)
        self.step_seconds: list[float] = []
        self._t = time.perf_counter()

    def step_done(self, index: int) -> None:
        now = time.perf_counter()
        self.step_seconds.append(now - self._t)
        self._t = now
        comfy.send_event("editor_step", {"editor": self.editor, "step": int(index) + 1, "total": self.total})
        self.bar.update(1)  # also the interrupt point: raises when the user cancelled

    def diffusers_callback(self) -> Callable[..., dict]:
        """A `callback_on_step_end` for diffusers pipelines."""
        def callback(pipe, index, timestep, callback_kwargs) -> dict:
            self.step_done(index)
            return {}
        return callback


def run_record(**items: Any) -> dict:
    """A plain dict for `Editor.last_run`, rounding float timings for display."""
    return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in items.items()}


def place_pipeline(pipe, modules, device, offload: str, blocks_per_group: int = 1) -> tuple[list, list[str]]:
    """Put a diffusers-style pipeline's weights where they run, per offload mode.

    Inside ComfyUI with offload "none", `modules` are handed to ComfyUI's model manager
    (moved to the GPU before each edit, evicted by "Free memory" or by other models' loads).
    Returns (patchers, notes).
    """
    import torch
    notes: list[str] = []
    if device.type == "cpu":
        if offload != "none":
            notes.append(f"offload mode {offload!r} ignored: the pipeline runs on the CPU")
        pipe.to(device)
        return [], notes
    if offload == "none":
        modules = [m for m in modules if m is not None]
        patchers = [comfy.register_with_model_manager(m, load_device=device) for m in modules] if comfy.in_comfyui() else []
        if any(p is not None for p in patchers):
            notes.append("weights managed by ComfyUI's model manager")
            return patchers, notes
        pipe.to(device)
        return [], notes
    if offload == "model_cpu_offload":
        pipe.enable_model_cpu_offload(device=device)
    elif offload == "sequential_cpu_offload":
        pipe.enable_sequential_cpu_offload(device=device)
    elif offload == "group_offload":
        pipe.enable_group_offload(onload_device=device, offload_device=torch.device("cpu"),
                                  offload_type="block_level", num_blocks_per_group=blocks_per_group,
                                  use_stream=device.type == "cuda")
    notes.append(f"offload: {offload}")
    return [], notes
