"""FLUX.2 [klein] as ReSpec's in-context editor (paper section 5.1: klein base 9B, 30 steps,
guidance 4.0), on diffusers' `Flux2KleinPipeline`.

Weights come from one of two places (both cached once per setting in respec.models):
- a diffusers folder (in models/diffusers, an absolute path) or a Hugging Face id;
- ComfyUI single files: the transformer from models/diffusion_models (BFL key names, optional
  `model.diffusion_model.` prefix), the Qwen3 text encoder from models/text_encoders (Hugging Face
  key names) and the VAE from models/vae (LDM key names); bf16 / fp16, or ComfyUI's scaled-fp8 and
  fp8-mixed files, dequantised on load (editors/fp8.py). The configs, tokenizer and scheduler
  then come from the `source` folder / id, which needs no weights for the parts given as files.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from PIL import Image

from .. import comfy, models
from . import fp8
from ..errors import CorruptWeightsError, InputError, MissingWeightsError
from .base import (OFFLOAD_MODES, Editor, StepReporter, check_size, place_pipeline, prepare_references,
                   run_record, seeded_generator, snap_size, to_output_size)

log = logging.getLogger("respec")

DEFAULT_SOURCE = "black-forest-labs/FLUX.2-klein-base-9B"

# Known checkpoints: licence and whether it is the step-distilled variant (no real CFG).
KLEIN_VARIANTS: dict[str, dict[str, Any]] = {
    "black-forest-labs/FLUX.2-klein-base-9B": {"licence": "FLUX Non-Commercial License", "distilled": False},
    "black-forest-labs/FLUX.2-klein-base-4B": {"licence": "Apache-2.0", "distilled": False},
    "black-forest-labs/FLUX.2-klein-9B": {"licence": "FLUX Non-Commercial License", "distilled": True},
    "black-forest-labs/FLUX.2-klein-4B": {"licence": "Apache-2.0", "distilled": True},
}


HOW_TO_GET = (
    "Download a FLUX.2 [klein] pipeline in diffusers layout, e.g. "
    "`hf download black-forest-labs/FLUX.2-klein-base-9B --local-dir <ComfyUI>/models/diffusers/FLUX.2-klein-base-9B` "
    "(klein 9B is under the FLUX Non-Commercial License; klein 4B is Apache-2.0), or let the loader download "
    "it (allow_download).")
HOW_TO_GET_FILES = {
    "transformer": "Put the FLUX.2 [klein] transformer file (e.g. flux-2-klein-base-9b.safetensors from the "
                   "black-forest-labs/FLUX.2-klein-base-9B repository) into <ComfyUI>/models/diffusion_models.",
    "text_encoder": "Put the Qwen3 text encoder file for klein (Qwen3-8B for 9B, Qwen3-4B for 4B, bf16, "
                    "Hugging Face key names) into <ComfyUI>/models/text_encoders.",
    "vae": "Put the FLUX.2 VAE file (e.g. flux2-vae.safetensors) into <ComfyUI>/models/vae.",
}
HOW_TO_GET_CONFIGS = (
    "Single files still need the pipeline's configs and tokenizer (a few MB, no weights): "
    "`hf download black-forest-labs/FLUX.2-klein-base-9B --exclude \"*.safetensors\" "
    "--local-dir <ComfyUI>/models/diffusers/FLUX.2-klein-base-9B` and choose that folder as the source "
    "(use the 4B repository for 4B files), or allow downloads.")
# What the single-file route reads from the source folder (and downloads, when allowed).
CONFIG_PATTERNS = ["model_index.json", "*/config.json", "scheduler/*", "tokenizer/*"]
_CONFIG_FILES = ["model_index.json", "transformer/config.json", "vae/config.json", "text_encoder/config.json",
                 "scheduler/scheduler_config.json"]


# --------------------------------------------------------------------------- the editor

class Flux2Editor(Editor):
    """FLUX.2 [klein] with the selector's images as reference tokens (every image is a reference;
    the output size is passed explicitly, so no image is special beyond its order)."""

    family = "flux2"
    default_steps = 30        # paper section 5.1 (the pipeline's own default is 50)
    default_guidance = 4.0

    def __init__(self, pipe, *, name: str = "flux2-klein", source: str = "", text_encoder_out_layers=None,
                 parts=None, device=None, dtype=None, offload: str = "none", notes=()):
        super().__init__()
        self.pipe, self.name, self.source = pipe, name, source
        self.multiple = int(pipe.vae_scale_factor) * 2
        self.is_distilled = bool(pipe.config.get("is_distilled", False))
        if self.is_distilled:
            self.default_steps = 4  # step-distilled klein is made for 4 steps; guidance is ignored
        n_layers = int(pipe.text_encoder.config.num_hidden_layers)
        self.text_encoder_out_layers = tuple(text_encoder_out_layers or _out_layers(n_layers))
        self.parts = dict(parts or {})   # stage name -> comfy.ManagedModel (empty with diffusers offload)
        self.device, self.dtype, self.offload = device, dtype, offload
        self.notes = list(notes)
        self._empty_negative: dict = {}   # (text encoder, max_sequence_length, device) -> embeddings of ""
        pipe.set_progress_bar_config(disable=True)  # our own progress bar reports the steps

    def describe(self) -> dict:
        """JSON-able record of the loaded editor (family, source, distilled, dtype, device, offload)."""
        return {"editor": self.name, "family": self.family, "source": self.source,
                "distilled": self.is_distilled, "dtype": str(self.dtype).replace("torch.", ""),
                "device": str(self.device), "offload": self.offload, "notes": self.notes}

    def edit(self, images: list, instruction: str, *, output_size: tuple[int, int], seed: int,
             steps: int | None = None, guidance: float | None = None, **extra) -> Image.Image:
        """Run klein on `images` (selector order) and return the result at `output_size`.

        extra: max_pixels (generation pixel budget, default 1024*1024), max_sequence_length (512).
        """
        unknown = set(extra) - {"max_pixels", "max_sequence_length"}
        if unknown:
            raise InputError(f"FLUX.2 editor: unknown option(s) {sorted(unknown)}")
        steps = int(steps or self.default_steps)
        guidance = float(self.default_guidance if guidance is None else guidance)
        if steps < 1:
            raise InputError(f"steps must be at least 1, got {steps}")
        check_size(output_size, self.min_side, self.max_aspect, what="output (current image)")
        gen_size = snap_size(output_size, self.multiple, self.min_side, extra.get("max_pixels") or 1024 * 1024)
        refs = prepare_references(images, gen_size, multiple=self.multiple, min_side=self.min_side,
                                  max_aspect=self.max_aspect)
        t0 = time.perf_counter()
        prompt_embeds, negative_embeds = self._encode(instruction, int(extra.get("max_sequence_length") or 512))
        # Stage 2: transformer + VAE (inside ComfyUI the text encoder may be evicted to make room).
        comfy.use_models([self.parts.get("transformer"), self.parts.get("vae")])
        with comfy.progress(steps, f"{self.name} edit") as bar:
            reporter = StepReporter(bar, self.name, steps)
            result = self.pipe(
                image=refs, prompt_embeds=prompt_embeds, negative_prompt_embeds=negative_embeds,
                height=gen_size[1], width=gen_size[0],
                num_inference_steps=steps, guidance_scale=guidance, generator=seeded_generator(seed),
                callback_on_step_end=reporter.diffusers_callback(),
            ).images[0]
        seconds = time.perf_counter() - t0
        self.last_run = run_record(
            editor=self.name, seed=int(seed), steps=steps, guidance=guidance,
            cfg=("none (distilled)" if self.is_distilled else "real CFG"),
            generation_size=list(gen_size), output_size=[int(output_size[0]), int(output_size[1])],
            reference_sizes=[list(r.size) for r in refs], seconds=seconds,
            seconds_per_step=(sum(reporter.step_seconds) / len(reporter.step_seconds)) if reporter.step_seconds else 0.0)
        return to_output_size(result, output_size)

    def _encode(self, instruction: str, max_sequence_length: int):
        """Stage 1: the text encoder alone turns the instruction (and, for real CFG, the empty
        negative) into prompt embeddings, so it never has to share the GPU with the transformer."""
        import torch
        te = self.parts.get("text_encoder")
        device = te.use() if te is not None else self.pipe._execution_device

        def encode(text: str):
            with torch.inference_mode():
                return self.pipe.encode_prompt(prompt=text, device=device, max_sequence_length=max_sequence_length,
                                               text_encoder_out_layers=self.text_encoder_out_layers)[0]

        prompt = encode(instruction or "")
        negative = None
        if not self.is_distilled:
            # The negative is always the empty prompt: encoded once per loaded text encoder.
            key = (id(self.pipe.text_encoder), max_sequence_length, str(device))
            negative = self._empty_negative.get(key)
            if negative is None:
                negative = self._empty_negative[key] = encode("")
        if te is not None:
            te.done()
        return prompt, negative


def _out_layers(n_layers: int) -> tuple[int, int, int]:
    """Which hidden states feed the prompt embedding: klein's (9, 18, 27) for its 36-layer Qwen3,
    and evenly spread layers for the small encoders of tests."""
    if n_layers >= 28:
        return (9, 18, 27)
    return (max(1, n_layers // 3), max(1, 2 * n_layers // 3), n_layers)


# --------------------------------------------------------------------------- loading

def load_flux2(source: str = DEFAULT_SOURCE, *, transformer_file: str = "", text_encoder_file: str = "",
               vae_file: str = "", dtype: str = "auto", offload: str = "auto",
               allow_download: bool | None = None, device=None) -> Flux2Editor:
    """Load (once per setting) a FLUX.2 [klein] editor.

    source: a diffusers folder name in models/diffusers, an absolute folder, a Hugging Face id,
    or "tiny" / "tiny:<seed>" (a tiny random-weight klein built in code, CPU; for checking an
    install: its images are noise).
    transformer_file / text_encoder_file / vae_file: ComfyUI single files (names in
    models/diffusion_models, models/text_encoders, models/vae, or absolute paths); each one given
    replaces that component of `source`, which then only needs its configs and tokenizer.
    """
    if offload not in OFFLOAD_MODES:
        raise InputError(f"offload must be one of {', '.join(OFFLOAD_MODES)}; got {offload!r}")
    seed = models.tiny_seed(source, "flux2")
    if seed is not None:
        return models.cached(("flux2", models.TINY, seed),
                             lambda: Flux2Editor(models.build_tiny("flux2", seed), name="flux2-klein-tiny",
                                                 source="tiny (random weights)"))
    device = _torch_device(device)
    torch_dtype = models.torch_dtype(dtype)
    files = {"transformer": transformer_file, "text_encoder": text_encoder_file, "vae": vae_file}
    files = {k: v for k, v in files.items() if v}
    resolved = {k: models.resolve_path(_FILE_KIND[k], v, HOW_TO_GET_FILES[k], want="file") for k, v in files.items()}
    need_weights = len(resolved) < 3
    folder = resolve_source(source, allow_download, configs_only=not need_weights)
    key = ("flux2", str(folder), tuple(sorted((k, _file_id(p)) for k, p in resolved.items())),
           str(torch_dtype), str(device), offload)
    return models.cached(key, lambda: _build_editor(source, folder, resolved, torch_dtype, device, offload))


_FILE_KIND = {"transformer": "diffusion_models", "text_encoder": "text_encoders", "vae": "vae"}


def _torch_device(device):
    import torch
    if device is None:
        return torch.device(comfy.torch_device())
    return torch.device(device)


def _file_id(path: Path) -> tuple:
    """A file's identity for the cache key: a replaced file (new size or time) loads anew."""
    st = Path(path).stat()
    return (str(path), st.st_size, st.st_mtime_ns)


def resolve_source(source: str, allow_download: bool | None, configs_only: bool) -> Path:
    """The local folder for `source`; when only configs are needed, a download fetches only those."""
    source = (source or "").strip()
    if not source:
        raise InputError("No FLUX.2 source given: choose a diffusers folder or a Hugging Face id.")
    how = HOW_TO_GET_CONFIGS if configs_only else HOW_TO_GET
    folder = Path(models.resolve_hf(source, "diffusers", allow_download, how,
                                    patterns=CONFIG_PATTERNS if configs_only else None))
    missing = [f for f in _CONFIG_FILES if not (folder / f).is_file()]
    if not (folder / "tokenizer").is_dir():
        missing.append("tokenizer/")
    if missing:
        raise MissingWeightsError(f"{', '.join(missing)} of the FLUX.2 pipeline {source}", [str(folder)], how)
    for f in _CONFIG_FILES:   # a truncated download fails here, naming the file, not deep in a library
        models.read_json_object(folder / f, "Download the configs again: " + how)
    return folder


def _build_editor(source: str, folder: Path, files: dict, torch_dtype, device, offload: str) -> Flux2Editor:
    from diffusers import FlowMatchEulerDiscreteScheduler, Flux2KleinPipeline
    from transformers import AutoTokenizer

    index = models.read_json_object(folder / "model_index.json", HOW_TO_GET_CONFIGS)
    loaders = {"transformer": (load_transformer_file, _load_transformer_folder),
               "text_encoder": (load_text_encoder_file, _load_text_encoder_folder),
               "vae": (load_vae_file, _load_vae_folder)}
    parts = {}
    for name, (from_file, from_folder) in loaders.items():
        parts[name] = from_file(files[name], folder, torch_dtype) if name in files else from_folder(folder, torch_dtype)
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder / "tokenizer"))
        scheduler = FlowMatchEulerDiscreteScheduler.from_pretrained(str(folder), subfolder="scheduler")
    except Exception as e:
        raise CorruptWeightsError(f"The tokenizer or scheduler files in {folder} could not be read "
                                  f"({type(e).__name__}: {e}). {HOW_TO_GET_CONFIGS}") from e
    pipe = Flux2KleinPipeline(scheduler=scheduler, vae=parts["vae"], text_encoder=parts["text_encoder"],
                              tokenizer=tokenizer, transformer=parts["transformer"],
                              is_distilled=bool(index.get("is_distilled", False)))
    parts, notes, offload = place_pipeline(
        pipe, {"text_encoder": pipe.text_encoder, "transformer": pipe.transformer, "vae": pipe.vae}, device, offload)
    variant = KLEIN_VARIANTS.get(source, {})
    if variant.get("licence"):
        notes.append(f"licence: {variant['licence']}")
    name = "flux2-klein" + (f" ({Path(source).name})" if source else "")
    return Flux2Editor(pipe, name=name, source=source, parts=parts, device=device, dtype=torch_dtype,
                       offload=offload, notes=notes)


# --------------------------------------------------------------------------- diffusers folders

def _weights_present(folder: Path) -> bool:
    return folder.is_dir() and any(p.suffix in (".safetensors", ".bin") or p.name.endswith(".index.json")
                                   for p in folder.iterdir())


def _from_folder(component: str, folder: Path, load):
    """Load one component of a diffusers folder; missing or unreadable weights raise our errors."""
    sub = folder / component
    if not _weights_present(sub):
        raise MissingWeightsError(f"{component} weights of the FLUX.2 pipeline", [str(sub)],
                                  HOW_TO_GET + " Or choose a single file for this component.")
    try:
        return load(sub)
    except Exception as e:
        raise CorruptWeightsError(
            f"The FLUX.2 {component} in {sub} could not be loaded ({type(e).__name__}: {e}). "
            f"The download may be incomplete or for another model; download it again.") from e


def _load_transformer_folder(folder: Path, dtype):
    from diffusers import Flux2Transformer2DModel
    return _from_folder("transformer", folder, lambda sub: Flux2Transformer2DModel.from_pretrained(
        str(sub), torch_dtype=dtype, local_files_only=True).eval())


def _load_text_encoder_folder(folder: Path, dtype):
    from transformers import Qwen3ForCausalLM
    return _from_folder("text_encoder", folder, lambda sub: Qwen3ForCausalLM.from_pretrained(
        str(sub), dtype=dtype, local_files_only=True).eval())


def _load_vae_folder(folder: Path, dtype):
    from diffusers import AutoencoderKLFlux2
    return _from_folder("vae", folder, lambda sub: AutoencoderKLFlux2.from_pretrained(
        str(sub), torch_dtype=dtype, local_files_only=True).eval())


# --------------------------------------------------------------------------- ComfyUI single files

_QUANT_SUFFIXES = ("scale_weight", "weight_scale", "input_scale", "scale_input", "comfy_quant")
_TRANSFORMER_PREFIXES = ("model.diffusion_model.", "diffusion_model.")
_VAE_PREFIXES = ("first_stage_model.", "vae.")


def _strip_prefix(sd: dict, prefixes) -> dict:
    for prefix in prefixes:
        if sd and all(k.startswith(prefix) for k in sd):
            return {k[len(prefix):]: v for k, v in sd.items()}
    return sd


def _read(path, component: str, dtype) -> dict:
    """The file's tensors, ComfyUI's fp8 layers dequantised to `dtype` (editors/fp8.py); an
    unreadable (e.g. truncated) file raises CorruptWeightsError naming the component."""
    sd, info = fp8.read_single_file(path, component, dtype)
    if info["layers"]:
        log.info("%s: %s, %d weights dequantised to %s", Path(path).name, info["quantisation"], info["layers"], dtype)
    return sd


def check_state_dict(component: str, path, expected: dict, got: dict) -> None:
    """CorruptWeightsError naming the component, the file and the missing / unexpected / misshapen keys."""
    missing = sorted(set(expected) - set(got))
    unexpected = sorted(set(got) - set(expected))
    misshapen = sorted(k for k in set(expected) & set(got) if tuple(expected[k].shape) != tuple(got[k].shape))
    if not (missing or unexpected or misshapen):
        return
    lines = [f"The {component} file {path} does not match the FLUX.2 [klein] {component} it should hold."]
    if missing:
        lines.append(f"Missing keys ({len(missing)} of {len(expected)}): {', '.join(missing[:8])}"
                     + (" ..." if len(missing) > 8 else ""))
    if unexpected:
        lines.append(f"Unexpected keys ({len(unexpected)}): {', '.join(unexpected[:8])}"
                     + (" ..." if len(unexpected) > 8 else ""))
        if any(k.endswith(_QUANT_SUFFIXES) for k in unexpected):
            lines.append("This looks like a quantised file in a layout the pack does not read; " + fp8.NATIVE_ROUTE)
    if misshapen:
        k = misshapen[0]
        lines.append(f"Shapes differ for {len(misshapen)} keys, e.g. {k}: file {tuple(got[k].shape)} vs "
                     f"expected {tuple(expected[k].shape)} (a 4B file with 9B configs, or the reverse?).")
    lines.append("Choose the file and source (configs) of the same klein variant, or download the file again.")
    raise CorruptWeightsError("\n".join(lines))


def load_transformer_file(path, config_folder: Path, dtype):
    """Transformer from a BFL/ComfyUI single file, through diffusers' from_single_file with the
    local config (so nothing is fetched from the hub)."""
    from accelerate import init_empty_weights
    from diffusers import Flux2Transformer2DModel
    from diffusers.loaders.single_file_utils import convert_flux2_transformer_checkpoint_to_diffusers

    sd = _strip_prefix(_read(path, "transformer", dtype), _TRANSFORMER_PREFIXES)
    if any(k.startswith(("double_blocks.", "single_blocks.")) for k in sd):
        try:
            sd = convert_flux2_transformer_checkpoint_to_diffusers(dict(sd))
        except Exception as e:
            raise CorruptWeightsError(f"The transformer file {path} has keys this loader cannot map to FLUX.2 "
                                      f"[klein] ({type(e).__name__}: {e}); is it a klein transformer?") from e
    config = Flux2Transformer2DModel.load_config(str(config_folder), subfolder="transformer")
    with init_empty_weights():
        expected = Flux2Transformer2DModel.from_config(config).state_dict()
    check_state_dict("transformer", path, expected, sd)
    try:
        model = Flux2Transformer2DModel.from_single_file(sd, config=str(config_folder), subfolder="transformer",
                                                         torch_dtype=dtype, local_files_only=True)
    except Exception as e:
        raise CorruptWeightsError(f"The transformer file {path} could not be loaded ({type(e).__name__}: {e}).") from e
    return model.eval()


def load_text_encoder_file(path, config_folder: Path, dtype):
    """Qwen3 text encoder from a single file with Hugging Face key names: built on the meta device
    from the source's config, then the file's tensors are assigned (no second copy in memory)."""
    from accelerate import init_empty_weights
    from transformers import Qwen3Config, Qwen3ForCausalLM

    sd = _read(path, "text_encoder", dtype)
    embed = next((k for k in sd if k.endswith("embed_tokens.weight")), None)
    if embed is not None and embed != "model.embed_tokens.weight":
        # normalise whatever sits in front of the HF names (a bare Qwen3Model, or a wrapper prefix)
        head = embed[: -len("embed_tokens.weight")]
        sd = {("model." + k[len(head):] if k.startswith(head) else k): v for k, v in sd.items()}
    config = Qwen3Config.from_pretrained(str(config_folder / "text_encoder"))
    with init_empty_weights(include_buffers=False):
        model = Qwen3ForCausalLM(config)
    expected = model.state_dict()
    if "lm_head.weight" in expected and "lm_head.weight" not in sd and "model.embed_tokens.weight" in sd:
        # klein reads hidden states only; the LM head is never used, so share the embedding
        sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
    check_state_dict("text_encoder", path, expected, sd)
    model.load_state_dict(sd, strict=True, assign=True)
    return _to_dtype(model, dtype).eval()


def _to_dtype(model, dtype):
    """Cast only when needed (diffusers warns about every .to(dtype) call)."""
    return model if all(p.dtype == dtype for p in model.parameters()) else model.to(dtype)


def load_vae_file(path, config_folder: Path, dtype):
    """FLUX.2 VAE from a single file with LDM key names (BFL's / ComfyUI's flux2-vae): diffusers'
    LDM-VAE conversion, plus the nested quant convs and the latent batch-norm statistics bn.*,
    which that conversion does not know."""
    import torch
    from accelerate import init_empty_weights
    from diffusers import AutoencoderKLFlux2
    from diffusers.loaders.single_file_utils import convert_ldm_vae_checkpoint

    sd = _strip_prefix(_read(path, "vae", dtype), _VAE_PREFIXES)
    config = AutoencoderKLFlux2.load_config(str(config_folder), subfolder="vae")
    if any(k.startswith("encoder.down.") for k in sd):
        # BFL's layout nests the quant convs (encoder.quant_conv / decoder.post_quant_conv)
        lift = {"encoder.quant_conv.": "quant_conv.", "decoder.post_quant_conv.": "post_quant_conv."}
        sd = {next((new + k[len(old):] for old, new in lift.items() if k.startswith(old)), k): v for k, v in sd.items()}
        bn = {k: v for k, v in sd.items() if k.startswith("bn.")}
        sd = {**convert_ldm_vae_checkpoint(dict(sd), dict(config)), **bn}
    with init_empty_weights(include_buffers=False):
        model = AutoencoderKLFlux2.from_config(config)
    expected = model.state_dict()
    if "bn.num_batches_tracked" in expected and "bn.num_batches_tracked" not in sd:
        sd["bn.num_batches_tracked"] = torch.tensor(0, dtype=torch.long)  # a counter, unused at inference
    check_state_dict("vae", path, expected, sd)
    model.load_state_dict(sd, strict=True, assign=True)
    return _to_dtype(model, dtype).eval()
