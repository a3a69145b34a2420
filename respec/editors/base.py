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
        raise InputError("the editor got no images: give it at least the current image (the selector's "
                         "images, in the plan's order)")
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
        """Record step `index` (0-based): its time, the editor_step event, the bar; raises if the user cancelled."""
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


OFFLOAD_MODES = ("auto", "none", "model_cpu_offload", "sequential_cpu_offload", "group_offload")
HEADROOM = 1.25   # weights x this must fit: activations, the VAE decode and the CUDA context need the rest


def module_bytes(module) -> int:
    """Bytes of a module's parameters and buffers (0 for None)."""
    if module is None:
        return 0
    return sum(t.numel() * t.element_size() for t in list(module.parameters()) + list(module.buffers()))


def choose_offload(parts: dict, device) -> str:
    """What `offload="auto"` means on this device with this much free memory.

    Inside ComfyUI, or on the CPU, "none": the parts are under ComfyUI's memory manager, which
    loads one stage at a time (text encoder, then transformer + VAE) when they do not fit together.
    Outside ComfyUI: "none" when all parts fit, "model_cpu_offload" (one part at a time) when the
    largest does, else "group_offload" (blocks streamed to the GPU).
    """
    free = comfy.free_device_memory(device)
    if comfy.in_comfyui() or free is None:
        return "none"
    sizes = [module_bytes(m) for m in parts.values()]
    if sum(sizes) * HEADROOM <= free:
        return "none"
    if max(sizes, default=0) * HEADROOM <= free:
        return "model_cpu_offload"
    return "group_offload"


def place_pipeline(pipe, parts: dict, device, offload: str, blocks_per_group: int = 1) -> tuple[dict, list[str], str]:
    """Put a diffusers-style pipeline's weights where they run, per offload mode.

    parts: the pipeline's stages by name (e.g. text_encoder, transformer, vae), in run order.
    With offload "none" (and "auto" inside ComfyUI) each part becomes a comfy.ManagedModel:
    inside ComfyUI its memory manager loads a part before its stage and may evict it for
    another, and /free unloads it. The diffusers offload modes use diffusers' own hooks.
    Returns (managed parts by name, notes, the offload mode used).
    """
    import torch
    notes: list[str] = []
    if offload == "auto":
        offload = choose_offload(parts, device)
        notes.append(f"offload auto: {offload}")
    if device.type == "cpu" and offload != "none":
        notes.append(f"offload mode {offload!r} ignored: the pipeline runs on the CPU")
        offload = "none"
    if offload == "none":
        managed = {name: comfy.manage(m, device, name=f"{name}") for name, m in parts.items() if m is not None}
        if any(m.patcher is not None for m in managed.values()):
            notes.append("weights managed by ComfyUI's model manager (one stage at a time when memory is short)")
        return managed, notes, offload
    if offload == "model_cpu_offload":
        pipe.enable_model_cpu_offload(device=device)
    elif offload == "sequential_cpu_offload":
        pipe.enable_sequential_cpu_offload(device=device)
    elif offload == "group_offload":
        pipe.enable_group_offload(onload_device=device, offload_device=torch.device("cpu"),
                                  offload_type="block_level", num_blocks_per_group=blocks_per_group,
                                  use_stream=device.type == "cuda")
    notes.append(f"offload: {offload}")
    return {}, notes, offload
