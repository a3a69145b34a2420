"""In-context editor nodes (paper section 5.1): FLUX.2 [klein] and OmniGen2 loaders and edit nodes,
and the ComfyUI-native route (the Reference Selector's images as reference latents)."""
from __future__ import annotations

import json

from ..respec import comfy, models, paths
from ..respec.comfy import io, node_schema
from ..respec.editors import FLUX2_DEFAULT_SOURCE, KLEIN_VARIANTS, OFFLOAD_MODES, load_flux2, load_omnigen2
from ..respec.editors.image_slots import image_slots
from ..respec.editors.flux2 import resolve_source as flux2_source
from ..respec.editors.omnigen2 import DEFAULT_SOURCE as OMNIGEN2_DEFAULT_SOURCE
from ..respec.editors.omnigen2 import HOW_TO_GET as OMNIGEN2_HOW_TO_GET
from ..respec.errors import InputError
from .boundary import editor_images_in
from .common import Editor, image_from_comfy, images_from_comfy, images_to_comfy, validate_loader
from .conditioning import append_reference_latents

CATEGORY = "ReSpec/editors"
NONE = "(none)"
DTYPES = ["auto", "bf16", "fp16", "fp32"]
MAX_SEED = 0xFFFF_FFFF_FFFF_FFFF

_OFFLOAD_TIP = ("Where the weights live while editing. auto: inside ComfyUI its memory manager holds the parts "
                "and loads one stage at a time (text encoder, then transformer + VAE) when they do not fit together; "
                "outside ComfyUI, none when everything fits in free GPU memory, else model_cpu_offload, else "
                "group_offload. none: all parts on the GPU (klein 9B in bf16 needs ~33 GB). model_cpu_offload: one "
                "model at a time on the GPU. sequential_cpu_offload: layer by layer, smallest memory, slowest. "
                "group_offload: blocks streamed to the GPU, between the two.")


def _sources(known: list[str]) -> tuple[list[str], dict]:
    """A diffusers drop-down: what is installed first, then the known ids that are not; the options
    that say which are installed (models.installed_first)."""
    return models.installed_first("diffusers", known)


def _files(kind: str) -> list[str]:
    return [NONE] + comfy.list_models(kind)


def _file(choice: str) -> str | None:
    """A single-file drop-down's value: None for "(none)" (keep the source's component)."""
    return None if choice in ("", NONE) else choice


def _output_size(current_image, width: int, height: int) -> tuple[int, int]:
    current = image_from_comfy(current_image, "current_image")
    h, w = current.shape[:2]
    return (int(width) or w, int(height) or h)


def _edit(editor, family: str, editor_images, current_image, instruction, seed, steps, guidance, width, height,
          **extra):
    if getattr(editor, "family", None) != family:
        raise InputError(f"This node drives a {family} editor but got {editor!r}; connect the matching loader.")
    size = _output_size(current_image, width, height)
    image = editor.edit(images_from_comfy(editor_images_in(editor_images)), instruction, output_size=size, seed=seed, steps=steps,
                        guidance=guidance, **extra)
    return (images_to_comfy([image]), json.dumps({**editor.describe(), **editor.last_run}))


def _common_edit_inputs() -> list:
    """The inputs both edit nodes take first, after their editor."""
    return [
        io.Image.Input(id="editor_images", tooltip=(
            "The Reference Selector's editor_images, in its order (restoration turn: restoration source, then "
            "identity anchor; other turns: the current image).")),
        io.Image.Input(id="current_image", tooltip="The current image I_{t-1}: the result is returned at its size."),
        io.String.Input(id="instruction", multiline=True, default="", tooltip=(
            "The instruction sent to the editor (the Instruction Rewriter's output).")),
        io.Int.Input(id="seed", default=0, min=0, max=MAX_SEED, tooltip=(
            "Noise seed; the same seed and inputs give the same image.")),
    ]


def _size_inputs() -> list:
    """The edit nodes' optional output size and generation budget."""
    return [
        io.Int.Input(id="width", optional=True, default=0, min=0, max=8192, step=8, tooltip=(
            "Output width; 0 = the current image's width.")),
        io.Int.Input(id="height", optional=True, default=0, min=0, max=8192, step=8, tooltip=(
            "Output height; 0 = the current image's height.")),
        io.Float.Input(id="max_megapixels", optional=True, default=1.0, min=0.0625, max=16.0, step=0.0625, tooltip=(
            "Generation budget: larger outputs are generated at this many megapixels (aspect kept) and resized "
            "back to the output size.")),
    ]


def _source_input(known: list[str], default: str, tooltip: str):
    """A loader's 'model' drop-down (_sources): its tooltip ends with what is installed here, and the
    options that say which entries are installed go with it (extra_dict)."""
    listed, installed = _sources(known)
    return io.Combo.Input(id="model", options=listed, default=default, tooltip=tooltip + installed["tooltip"],
                          extra_dict={k: v for k, v in installed.items() if k != "tooltip"})


def _loader_inputs(allow_download_tip: str) -> list:
    """The loaders' dtype, offload and allow_download widgets."""
    return [
        io.Combo.Input(id="dtype", options=DTYPES, default="auto", tooltip=(
            "Weight precision. auto: bf16 on CUDA, fp32 on CPU.")),
        io.Combo.Input(id="offload", options=list(OFFLOAD_MODES), default="auto", tooltip=_OFFLOAD_TIP),
        io.Boolean.Input(id="allow_download", default=False, tooltip=allow_download_tip),
    ]


def _edit_outputs(info_tip: str) -> list:
    return [io.Image.Output(id="image", tooltip="The edited image I_t at the current image's size."),
            io.String.Output(id="edit_info", tooltip=info_tip)]


class ReSpecFlux2Loader(io.ComfyNode):
    """Load FLUX.2 [klein] once (diffusers folder / HF id, or ComfyUI single files)."""

    @classmethod
    def define_schema(cls):
        return node_schema(
            node_id="ReSpecFlux2Loader", display_name="Flux.2 [klein] Loader (ReSpec)", category=CATEGORY,
            description=("Loads FLUX.2 [klein] for in-context editing (paper: klein base 9B). Either a whole diffusers "
                         "pipeline (a folder in models/diffusers or a Hugging Face id), or ComfyUI single files for "
                         "any of transformer / text encoder / VAE, with the configs and tokenizer taken from "
                         "'model'. Weights are loaded once and reused until a setting changes. Licences: klein 9B "
                         "(base and distilled) is FLUX Non-Commercial; klein 4B is Apache-2.0."),
            inputs=[
                _source_input(list(KLEIN_VARIANTS), FLUX2_DEFAULT_SOURCE, (
                    "Diffusers pipeline: a Hugging Face id or a folder in models/diffusers. klein-base-* are the "
                    "undistilled models the paper used (real CFG, ~30 steps); klein-9B/4B are step-distilled (4 "
                    "steps, guidance ignored). 9B: FLUX Non-Commercial License; 4B: Apache-2.0. With single files "
                    "below, only this model's configs and tokenizer are read. ")),
                io.Combo.Input(id="transformer_file", options=_files("diffusion_models"), default=NONE, tooltip=(
                    "Optional ComfyUI single file from models/diffusion_models (e.g. "
                    "flux-2-klein-base-9b.safetensors) replacing the pipeline's transformer.")),
                io.Combo.Input(id="text_encoder_file", options=_files("text_encoders"), default=NONE, tooltip=(
                    "Optional Qwen3 text encoder file from models/text_encoders (Qwen3-8B for 9B, Qwen3-4B for "
                    "4B; bf16/fp16 or ComfyUI's fp8 files).")),
                io.Combo.Input(id="vae_file", options=_files("vae"), default=NONE, tooltip=(
                    "Optional FLUX.2 VAE file from models/vae (e.g. flux2-vae.safetensors).")),
                *_loader_inputs("Download from Hugging Face when the model is not local (only configs and "
                                "tokenizer when all three single files are chosen)."),
                io.String.Input(id="custom_model", optional=True, default="", multiline=None, tooltip=(
                    "Overrides 'model': a Hugging Face id (owner/name) or a pipeline folder inside "
                    "models/diffusers; paths outside the diffusers model folders are refused.")),
            ],
            outputs=[Editor.Output(id="editor", tooltip=(
                "The loaded FLUX.2 [klein] editor, for 'Flux.2 In-Context Edit'."))])

    @classmethod
    def validate_inputs(cls, model=None, transformer_file=None, text_encoder_file=None, vae_file=None,
                        allow_download=None, custom_model=""):
        """A pipeline not on this machine, with downloads off, fails the prompt before anything loads."""
        files = {"transformer_file": transformer_file, "text_encoder_file": text_encoder_file, "vae_file": vae_file}

        def check():
            source = (paths.model_source(custom_model, "diffusers", "the Flux.2 loader's custom_model")
                      if (custom_model or "").strip() else model)
            if source is not None and allow_download is False and models.tiny_seed(source) is None:
                configs_only = all(_file(v or NONE) is not None for v in files.values())
                flux2_source(source, False, configs_only=configs_only)
        return validate_loader({"model": models.listed("diffusers", list(KLEIN_VARIANTS)),
                                "transformer_file": _files("diffusion_models"),
                                "text_encoder_file": _files("text_encoders"), "vae_file": _files("vae")},
                               {"model": model, **files}, check)

    @classmethod
    def execute(cls, model, transformer_file, text_encoder_file, vae_file, dtype, offload, allow_download,
                custom_model=""):
        source = (paths.model_source(custom_model, "diffusers", "the Flux.2 loader's custom_model")
                  if (custom_model or "").strip() else model)
        editor = load_flux2(source, transformer_file=_file(transformer_file),
                            text_encoder_file=_file(text_encoder_file), vae_file=_file(vae_file), dtype=dtype,
                            offload=offload, allow_download=allow_download)
        return io.NodeOutput(editor)


class ReSpecFlux2Edit(io.ComfyNode):
    """One FLUX.2 [klein] edit with the current image and historical references."""

    @classmethod
    def define_schema(cls):
        return node_schema(
            node_id="ReSpecFlux2Edit", display_name="Flux.2 In-Context Edit (ReSpec)", category=CATEGORY,
            description=("Edits with FLUX.2 [klein]: every image in editor_images is a reference, in order; the "
                         "output has the current image's size. Paper defaults: 30 steps, guidance 4.0 (klein "
                         "base). Progress per step; Cancel stops between steps."),
            search_aliases=["flux", "klein", "edit", "restore", "reveal"],
            inputs=[
                Editor.Input(id="editor", tooltip="From 'Flux.2 [klein] Loader (ReSpec)'."),
                *_common_edit_inputs(),
                io.Int.Input(id="steps", default=30, min=1, max=200, tooltip=(
                    "Denoising steps (paper: 30 for klein base; use 4 for the distilled klein).")),
                io.Float.Input(id="guidance", default=4.0, min=0.0, max=20.0, step=0.1, tooltip=(
                    "Classifier-free guidance (paper: 4.0). Ignored by the distilled klein.")),
                *_size_inputs(),
            ],
            outputs=_edit_outputs(
                "JSON: editor, seed, steps, guidance, generation size, seconds (for the history's metadata)."))

    @classmethod
    def execute(cls, editor, editor_images, current_image, instruction, seed, steps, guidance, width=0, height=0,
                max_megapixels=1.0):
        return io.NodeOutput(*_edit(editor, "flux2", editor_images, current_image, instruction, seed, steps,
                                    guidance, width, height, max_pixels=int(max_megapixels * 1024 * 1024)))


class ReSpecOmniGen2Loader(io.ComfyNode):
    """Load OmniGen2's official pipeline once (needs the user-installed OmniGen2 code)."""

    @classmethod
    def define_schema(cls):
        return node_schema(
            node_id="ReSpecOmniGen2Loader", display_name="OmniGen2 Loader (ReSpec)", category=CATEGORY,
            description=("Loads OmniGen2 through its official pipeline. Its code is not on PyPI and not bundled: the "
                         "server's owner installs it into ComfyUI's Python (or sets RESPEC_OMNIGEN2_PATH to a "
                         "clone) before starting ComfyUI; see docs/editors.md. Users of ComfyUI's native OmniGen2 "
                         "models need the 'Reference Latents (ReSpec)' node instead."),
            inputs=[
                _source_input([OMNIGEN2_DEFAULT_SOURCE], OMNIGEN2_DEFAULT_SOURCE, (
                    "OmniGen2 weights in diffusers layout: a Hugging Face id or a folder in models/diffusers. ")),
                *_loader_inputs("Download the weights from Hugging Face when they are not local."),
            ],
            outputs=[Editor.Output(id="editor", tooltip="The loaded OmniGen2 editor, for 'OmniGen2 In-Context Edit'.")])

    @classmethod
    def validate_inputs(cls, model=None, allow_download=None):
        """Weights not on this machine, with downloads off, fail the prompt before anything loads."""
        def check():
            if model is not None and allow_download is False and models.tiny_seed(model) is None:
                models.resolve_hf(model, "diffusers", False, OMNIGEN2_HOW_TO_GET)
        return validate_loader({"model": models.listed("diffusers", [OMNIGEN2_DEFAULT_SOURCE])}, {"model": model}, check)

    @classmethod
    def execute(cls, model, dtype, offload, allow_download):
        return io.NodeOutput(load_omnigen2(model, dtype=dtype, offload=offload, allow_download=allow_download))


class ReSpecOmniGen2Edit(io.ComfyNode):
    """One OmniGen2 edit with the current image and historical references."""

    @classmethod
    def define_schema(cls):
        return node_schema(
            node_id="ReSpecOmniGen2Edit", display_name="OmniGen2 In-Context Edit (ReSpec)", category=CATEGORY,
            description=("Edits with OmniGen2's official pipeline: editor_images are its input images, in order. "
                         "Paper defaults: 50 steps, text guidance 5.0, image guidance 2.0."),
            search_aliases=["omnigen", "edit", "restore", "reveal"],
            inputs=[
                Editor.Input(id="editor", tooltip="From 'OmniGen2 Loader (ReSpec)'."),
                *_common_edit_inputs(),
                io.Int.Input(id="steps", default=50, min=1, max=200, tooltip="Denoising steps (paper: 50)."),
                io.Float.Input(id="text_guidance", default=5.0, min=0.0, max=20.0, step=0.1, tooltip=(
                    "Text guidance scale (paper: 5.0).")),
                io.Float.Input(id="image_guidance", default=2.0, min=0.0, max=20.0, step=0.1, tooltip=(
                    "Image guidance scale: faithfulness to the input images (paper: 2.0).")),
                io.String.Input(id="negative_prompt", optional=True, multiline=True, default="", tooltip=(
                    "What the result should not show (e.g. 'blurry, deformed').")),
                *_size_inputs(),
            ],
            outputs=_edit_outputs("JSON: editor, seed, steps, guidances, generation size, seconds."))

    @classmethod
    def execute(cls, editor, editor_images, current_image, instruction, seed, steps, text_guidance, image_guidance,
                negative_prompt="", width=0, height=0, max_megapixels=1.0):
        return io.NodeOutput(*_edit(editor, "omnigen2", editor_images, current_image, instruction, seed, steps,
                                    text_guidance, width, height, image_guidance=image_guidance,
                                    negative_prompt=negative_prompt, max_pixels=int(max_megapixels * 1024 * 1024)))


class ReSpecReferenceConditioning(io.ComfyNode):
    """Append the Reference Selector's images to a CONDITIONING as reference latents (ComfyUI-native route)."""

    @classmethod
    def define_schema(cls):
        return node_schema(
            node_id="ReSpecReferenceConditioning", display_name="Reference Latents (ReSpec)", category=CATEGORY,
            description=("For ComfyUI's own FLUX.2 and OmniGen2 models: VAE-encodes each image of editor_images and "
                         "appends it to the conditioning's reference latents, in the selector's order (what "
                         "chaining one 'ReferenceLatent' node per image does). Use it on the positive and on the "
                         "negative conditioning; for OmniGen2's text + image guidance feed both to 'DualCFGGuider' "
                         "(see docs/editors.md)."),
            search_aliases=["reference latent", "restore", "reveal"],
            inputs=[
                io.Conditioning.Input(id="conditioning", tooltip="Text conditioning (e.g. from 'CLIP Text Encode')."),
                io.Vae.Input(id="vae", tooltip="The model's VAE (FLUX.2 VAE for klein, the FLUX.1 'ae' for OmniGen2)."),
                io.Image.Input(id="editor_images", tooltip="The Reference Selector's editor_images, in its order."),
                io.Float.Input(id="megapixels", default=1.0, min=0.0, max=16.0, step=0.05, tooltip=(
                    "Scale each reference to about this many megapixels before encoding (0 = keep size).")),
            ],
            outputs=[io.Conditioning.Output(id="conditioning", tooltip=(
                "The conditioning with one reference latent per image appended, in order."))])

    @classmethod
    def execute(cls, conditioning, vae, editor_images, megapixels):
        return io.NodeOutput(append_reference_latents(conditioning, vae, editor_images, megapixels))


class ReSpecEditorImageSlots(io.ComfyNode):
    """The selector's images as image1..image3, for Qwen-Image-Edit's TextEncodeQwenImageEditPlus."""

    @classmethod
    def define_schema(cls):
        return node_schema(
            node_id="ReSpecEditorImageSlots", display_name="Editor Images as image1..3 (ReSpec)", category=CATEGORY,
            description=("Splits the Reference Selector's editor_images into image1, image2, image3 in the plan's "
                         "order (restoration source, identity anchor), for 'TextEncodeQwenImageEditPlus'. A slot "
                         "with no image gives nothing (the encoder skips it). More than three images are refused."),
            search_aliases=["qwen", "qwen image edit", "image1", "slots", "references"],
            inputs=[io.Image.Input(id="editor_images", tooltip="The Reference Selector's editor_images, in its order.")],
            outputs=[
                io.Image.Output(id="image1", tooltip=("The first editor image (the restoration source on a "
                                                      "restoration turn, else the current image).")),
                io.Image.Output(id="image2", tooltip="The second (the identity anchor on a restoration turn), or nothing."),
                io.Image.Output(id="image3", tooltip="The third, or nothing."),
            ])

    @classmethod
    def execute(cls, editor_images):
        editor_images = editor_images_in(editor_images)
        return io.NodeOutput(*image_slots([editor_images[i:i + 1] for i in range(editor_images.shape[0])]))


NODE_CLASS_MAPPINGS = {
    "ReSpecFlux2Loader": ReSpecFlux2Loader,
    "ReSpecFlux2Edit": ReSpecFlux2Edit,
    "ReSpecOmniGen2Loader": ReSpecOmniGen2Loader,
    "ReSpecOmniGen2Edit": ReSpecOmniGen2Edit,
    "ReSpecReferenceConditioning": ReSpecReferenceConditioning,
    "ReSpecEditorImageSlots": ReSpecEditorImageSlots,
}
NODE_DISPLAY_NAME_MAPPINGS = {
    "ReSpecFlux2Loader": "Flux.2 [klein] Loader (ReSpec)",
    "ReSpecFlux2Edit": "Flux.2 In-Context Edit (ReSpec)",
    "ReSpecOmniGen2Loader": "OmniGen2 Loader (ReSpec)",
    "ReSpecOmniGen2Edit": "OmniGen2 In-Context Edit (ReSpec)",
    "ReSpecReferenceConditioning": "Reference Latents (ReSpec)",
    "ReSpecEditorImageSlots": "Editor Images as image1..3 (ReSpec)",
}
