"""OmniGen2 as ReSpec's in-context editor through its official pipeline (paper section 5.1:
50 steps, text guidance 5.0, image guidance 2.0).

OmniGen2's code is neither in diffusers nor on PyPI, and this pack does not copy it: the user
clones https://github.com/VectorSpaceLab/OmniGen2 and installs its requirements; the loader then
imports its `omnigen2` package, either from the Python environment or from the clone's folder
named by the RESPEC_OMNIGEN2_PATH environment variable, which only the server's owner can set.
No workflow value ever names code to import: on a server others can reach, anyone who can queue
a prompt can also upload files (ComfyUI's /upload/image writes any bytes under input/), so a
path widget would let them run their own code. Without the package every call raises
OmniGen2NotInstalled with these instructions. ComfyUI's own OmniGen2 support is the other route (nodes/conditioning.py).
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
import time
from pathlib import Path

from PIL import Image

from .. import comfy, models
from ..errors import CorruptWeightsError, InputError, MissingWeightsError, ReSpecError
from .base import (OFFLOAD_MODES, Editor, StepReporter, check_size, place_pipeline, prepare_references,
                   run_record, seeded_generator, snap_size, to_output_size)

DEFAULT_SOURCE = "OmniGen2/OmniGen2"
INSTALL_HELP = (
    "OmniGen2's official code is not on PyPI and is not bundled with this pack. Install it:\n"
    "  git clone https://github.com/VectorSpaceLab/OmniGen2\n"
    "  pip install -r OmniGen2/requirements.txt   (into the Python that runs ComfyUI; keep your torch)\n"
    "then either `pip install -e OmniGen2` (if your clone has packaging files), put the cloned folder on "
    "PYTHONPATH, or set the environment variable RESPEC_OMNIGEN2_PATH to the cloned folder before starting "
    "ComfyUI (a workflow cannot choose this folder). Alternatively use ComfyUI's native OmniGen2 models with "
    "the 'Reference Latents (ReSpec)' node (see docs/editors.md).")
HOW_TO_GET = ("Download the OmniGen2 weights in diffusers layout: "
              "`hf download OmniGen2/OmniGen2 --local-dir <ComfyUI>/models/diffusers/OmniGen2`, "
              "or allow downloads.")
_PIPELINE_MODULE = "omnigen2.pipelines.omnigen2.pipeline_omnigen2"
_TRANSFORMER_MODULE = "omnigen2.models.transformers.transformer_omnigen2"
_SCHEDULER_MODULE = "omnigen2.schedulers.scheduling_flow_match_euler_discrete"


class OmniGen2NotInstalled(ReSpecError, ImportError):
    """The official OmniGen2 package cannot be imported."""


def import_omnigen2() -> dict:
    """The official package's pipeline, transformer and scheduler classes.

    Imports `omnigen2` from the environment, else from the folder in RESPEC_OMNIGEN2_PATH (the
    cloned repository or its omnigen2/ folder), registered as the top-level package `omnigen2`
    without touching sys.path.
    """
    path = (os.environ.get("RESPEC_OMNIGEN2_PATH") or "").strip()
    try:
        if path and "omnigen2" not in sys.modules:
            _register_from_folder(_owner_folder(Path(path).expanduser()))
        pipeline = importlib.import_module(_PIPELINE_MODULE)
        transformer = importlib.import_module(_TRANSFORMER_MODULE)
        scheduler = importlib.import_module(_SCHEDULER_MODULE)
    except ModuleNotFoundError as e:
        if e.name and (e.name == "omnigen2" or e.name.startswith("omnigen2.")):
            where = f" (looked in {path})" if path else ""
            raise OmniGen2NotInstalled(f"The OmniGen2 package is not installed{where}.\n{INSTALL_HELP}") from None
        _forget_omnigen2()
        where = _package_folder()
        raise OmniGen2NotInstalled(
            f"OmniGen2 was found{f' in {where}' if where else ''} but failed to import: one of its dependencies "
            f"is missing ({e}).\nRun `pip install -r requirements.txt` from the OmniGen2 folder.") from e
    except OmniGen2NotInstalled:
        raise
    except Exception as e:  # ImportError, SyntaxError, anything its package raises while importing
        _forget_omnigen2()
        where = _package_folder()
        raise OmniGen2NotInstalled(f"OmniGen2 was found{f' in {where}' if where else ''} but failed to import "
                                   f"({type(e).__name__}: {e}). Reinstall it (a fresh clone, then `pip install -r "
                                   f"requirements.txt` in it).\n{INSTALL_HELP}") from e
    return {"pipeline": pipeline.OmniGen2Pipeline,
            "transformer": transformer.OmniGen2Transformer2DModel,
            "scheduler": scheduler.FlowMatchEulerDiscreteScheduler}


def _forget_omnigen2() -> None:
    """Drop a half-imported omnigen2 (so a fixed installation imports afresh)."""
    for name in [k for k in sys.modules if k == "omnigen2" or k.startswith("omnigen2.")]:
        del sys.modules[name]


def _package_folder() -> str:
    """Where the omnigen2 package that failed lives, if known."""
    path = (os.environ.get("RESPEC_OMNIGEN2_PATH") or "").strip()
    if path:
        p = Path(path).expanduser()
        return str(p if p.name == "omnigen2" else p / "omnigen2")
    spec = importlib.util.find_spec("omnigen2") if "omnigen2" not in sys.modules else None
    return str(Path(spec.origin).parent) if spec is not None and spec.origin else ""


def _owner_folder(path: Path) -> Path:
    """The RESPEC_OMNIGEN2_PATH folder, refused when it lies where the server accepts uploads."""
    inputs = comfy.input_dir().resolve()
    resolved = path.resolve()
    if resolved == inputs or inputs in resolved.parents:
        raise OmniGen2NotInstalled(
            f"RESPEC_OMNIGEN2_PATH points into ComfyUI's input folder ({resolved}), where anyone who can reach "
            "the server can upload files; this pack will not import code from there. Clone OmniGen2 elsewhere.")
    return path


def _register_from_folder(path: Path) -> None:
    """Make `import omnigen2` find the package in a cloned repository, without sys.path."""
    candidates = [path / "omnigen2", path] if path.name != "omnigen2" else [path]
    pkg = next((c for c in candidates if (c / "__init__.py").is_file() and c.name == "omnigen2"), None)
    if pkg is None:
        raise OmniGen2NotInstalled(f"No omnigen2 package (omnigen2/__init__.py) in {path}.\n{INSTALL_HELP}")
    spec = importlib.util.spec_from_file_location("omnigen2", pkg / "__init__.py",
                                                  submodule_search_locations=[str(pkg)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["omnigen2"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules["omnigen2"]
        raise


class OmniGen2Editor(Editor):
    """OmniGen2's official pipeline with the selector's images as its input images (the output
    size is passed explicitly and align_res is off, so the first image does not set the size)."""

    family = "omnigen2"
    default_steps = 50           # paper section 5.1
    default_guidance = 5.0       # text guidance
    default_image_guidance = 2.0
    multiple = 16

    def __init__(self, pipe, *, name: str = "omnigen2", source: str = "", parts=None, device=None,
                 dtype=None, offload: str = "none", notes=()):
        super().__init__()
        self.pipe, self.name, self.source = pipe, name, source
        self.parts = dict(parts or {})   # stage name -> comfy.ManagedModel (empty with diffusers offload)
        self.device, self.dtype, self.offload, self.notes = device, dtype, offload, list(notes)
        try:
            self._call_params = set(inspect.signature(pipe.__call__).parameters)
        except (TypeError, ValueError):
            self._call_params = set()
        if "step_func" not in self._call_params:
            self.notes.append("this OmniGen2 version has no step_func: no per-step progress or cancel between steps")
        if hasattr(pipe, "set_progress_bar_config"):
            pipe.set_progress_bar_config(disable=True)

    def describe(self) -> dict:
        """JSON-able record of the loaded editor (source, dtype, device, offload) for results rows."""
        return {"editor": self.name, "family": self.family, "source": self.source,
                "dtype": str(self.dtype).replace("torch.", ""), "device": str(self.device),
                "offload": self.offload, "notes": self.notes}

    def edit(self, images: list, instruction: str, *, output_size: tuple[int, int], seed: int,
             steps: int | None = None, guidance: float | None = None, **extra) -> Image.Image:
        """Run OmniGen2 on `images` (selector order); `guidance` is the text guidance.

        extra: image_guidance (2.0), negative_prompt (""), max_pixels (1024*1024),
        cfg_range ((0.0, 1.0)), max_sequence_length (1024).
        """
        unknown = set(extra) - {"image_guidance", "negative_prompt", "max_pixels", "cfg_range", "max_sequence_length"}
        if unknown:
            raise InputError(f"OmniGen2 editor: unknown option(s) {sorted(unknown)}")
        steps = int(steps or self.default_steps)
        text_guidance = float(self.default_guidance if guidance is None else guidance)
        image_guidance = float(extra.get("image_guidance", self.default_image_guidance))
        max_pixels = int(extra.get("max_pixels") or 1024 * 1024)
        if steps < 1:
            raise InputError(f"steps must be at least 1, got {steps}")
        check_size(output_size, self.min_side, self.max_aspect, what="output (current image)")
        gen_size = snap_size(output_size, self.multiple, self.min_side, max_pixels)
        refs = prepare_references(images, gen_size, multiple=self.multiple, min_side=self.min_side,
                                  max_aspect=self.max_aspect)
        comfy.use_models(self.parts.values())
        t0 = time.perf_counter()
        with comfy.progress(steps, f"{self.name} edit") as bar:
            reporter = StepReporter(bar, self.name, steps)
            kwargs = dict(
                prompt=instruction or "", input_images=refs, width=gen_size[0], height=gen_size[1],
                num_inference_steps=steps, text_guidance_scale=text_guidance,
                image_guidance_scale=image_guidance, cfg_range=tuple(extra.get("cfg_range") or (0.0, 1.0)),
                negative_prompt=extra.get("negative_prompt") or "", generator=seeded_generator(seed),
                max_sequence_length=int(extra.get("max_sequence_length") or 1024),
                max_pixels=max_pixels, max_input_image_side_length=max(max(r.size) for r in refs),
                align_res=False, output_type="pil")
            if "step_func" in self._call_params:
                kwargs["step_func"] = lambda i, total: reporter.step_done(i)
            result = self.pipe(**kwargs).images[0]
        seconds = time.perf_counter() - t0
        self.last_run = run_record(
            editor=self.name, seed=int(seed), steps=steps, text_guidance=text_guidance,
            image_guidance=image_guidance, generation_size=list(gen_size),
            output_size=[int(output_size[0]), int(output_size[1])],
            reference_sizes=[list(r.size) for r in refs], seconds=seconds,
            seconds_per_step=(sum(reporter.step_seconds) / len(reporter.step_seconds)) if reporter.step_seconds else 0.0)
        return to_output_size(result, output_size)


def load_omnigen2(source: str = DEFAULT_SOURCE, *, dtype: str = "auto",
                  offload: str = "auto", allow_download: bool | None = None, device=None) -> OmniGen2Editor:
    """Load (once per setting) OmniGen2's official pipeline from a diffusers-layout folder or HF id.

    Components are loaded one by one with the installed package's classes (no remote code).
    """
    models.tiny_seed(source, "omnigen2")   # a tiny source raises: there is no tiny OmniGen2, and why
    if offload not in OFFLOAD_MODES:
        raise InputError(f"offload must be one of {', '.join(OFFLOAD_MODES)}; got {offload!r}")
    classes = import_omnigen2()  # first: without the code, nothing else matters
    import torch
    device = torch.device(device) if device is not None else torch.device(comfy.torch_device())
    torch_dtype = models.torch_dtype(dtype)
    folder = Path(models.resolve_hf(source, "diffusers", allow_download, HOW_TO_GET))
    key = ("omnigen2", str(folder), str(torch_dtype), str(device), offload)
    return models.cached(key, lambda: _build(classes, source, folder, torch_dtype, device, offload))


def _component(folder: Path, name: str, load):
    sub = folder / name
    if not sub.is_dir():
        raise MissingWeightsError(f"the {name} of OmniGen2", [str(sub)], HOW_TO_GET)
    try:
        return load(str(sub))
    except Exception as e:
        raise CorruptWeightsError(f"The OmniGen2 {name} in {sub} could not be loaded ({type(e).__name__}: {e}). "
                                  "The download may be incomplete; download it again.") from e


def _build(classes: dict, source: str, folder: Path, dtype, device, offload: str) -> OmniGen2Editor:
    from diffusers import AutoencoderKL
    from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration

    transformer = _component(folder, "transformer", lambda p: classes["transformer"].from_pretrained(p, torch_dtype=dtype))
    vae = _component(folder, "vae", lambda p: AutoencoderKL.from_pretrained(p, torch_dtype=dtype))
    scheduler = _component(folder, "scheduler", lambda p: classes["scheduler"].from_pretrained(p))
    mllm = _component(folder, "mllm", lambda p: Qwen2_5_VLForConditionalGeneration.from_pretrained(p, dtype=dtype))
    processor = _component(folder, "processor", lambda p: AutoProcessor.from_pretrained(p))
    pipe = classes["pipeline"](transformer=transformer, vae=vae, scheduler=scheduler, mllm=mllm, processor=processor)
    parts, notes, offload = place_pipeline(pipe, {"mllm": pipe.mllm, "transformer": pipe.transformer, "vae": pipe.vae},
                                           device, offload, blocks_per_group=2)
    return OmniGen2Editor(pipe, name="omnigen2" + (f" ({Path(source).name})" if source else ""), source=source,
                          parts=parts, device=device, dtype=dtype, offload=offload, notes=notes)


