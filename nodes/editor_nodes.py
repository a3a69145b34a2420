"""In-context editor nodes (paper section 5.1): FLUX.2 [klein] and OmniGen2 loaders and edit nodes,
and the ComfyUI-native route (the Reference Selector's images as reference latents)."""
from __future__ import annotations

import json

from ..respec import comfy, models, paths
from ..respec.editors import FLUX2_DEFAULT_SOURCE, KLEIN_VARIANTS, OFFLOAD_MODES, load_flux2, load_omnigen2
from ..respec.editors.image_slots import image_slots
from ..respec.editors.flux2 import resolve_source as flux2_source
from ..respec.editors.omnigen2 import DEFAULT_SOURCE as OMNIGEN2_DEFAULT_SOURCE
from ..respec.editors.omnigen2 import HOW_TO_GET as OMNIGEN2_HOW_TO_GET
from ..respec.errors import InputError
from .boundary import editor_images_in
from .common import EDITOR, image_from_comfy, images_from_comfy, images_to_comfy, validate_loader
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


_COMMON_EDIT_INPUTS = {
    "editor_images": ("IMAGE", {"tooltip": "The Reference Selector's editor_images, in its order (restoration "
                                "turn: restoration source, then identity anchor; other turns: the current image)."}),
    "current_image": ("IMAGE", {"tooltip": "The current image I_{t-1}: the result is returned at its size."}),
    "instruction": ("STRING", {"multiline": True, "default": "", "tooltip":
                    "The instruction sent to the editor (the Instruction Rewriter's output)."}),
    "seed": ("INT", {"default": 0, "min": 0, "max": MAX_SEED, "tooltip":
             "Noise seed; the same seed and inputs give the same image."}),
}
_SIZE_INPUTS = {
    "width": ("INT", {"default": 0, "min": 0, "max": 8192, "step": 8, "tooltip":
              "Output width; 0 = the current image's width."}),
    "height": ("INT", {"default": 0, "min": 0, "max": 8192, "step": 8, "tooltip":
               "Output height; 0 = the current image's height."}),
    "max_megapixels": ("FLOAT", {"default": 1.0, "min": 0.0625, "max": 16.0, "step": 0.0625, "tooltip":
                       "Generation budget: larger outputs are generated at this many megapixels (aspect kept) "
                       "and resized back to the output size."}),
}


class ReSpecFlux2Loader:
    """Load FLUX.2 [klein] once (diffusers folder / HF id, or ComfyUI single files)."""

    CATEGORY = CATEGORY
    FUNCTION = "load"
    RETURN_TYPES = (EDITOR,)
    RETURN_NAMES = ("editor",)
    OUTPUT_TOOLTIPS = ("The loaded FLUX.2 [klein] editor, for 'Flux.2 In-Context Edit'.",)
    DESCRIPTION = ("Loads FLUX.2 [klein] for in-context editing (paper: klein base 9B). Either a whole diffusers "
                   "pipeline (a folder in models/diffusers or a Hugging Face id), or ComfyUI single files for any "
                   "of transformer / text encoder / VAE, with the configs and tokenizer taken from 'model'. "
                   "Weights are loaded once and reused until a setting changes. Licences: klein 9B (base and "
                   "distilled) is FLUX Non-Commercial; klein 4B is Apache-2.0.")

    @classmethod
    def INPUT_TYPES(cls):
        listed, installed = _sources(list(KLEIN_VARIANTS))
        return {
            "required": {
                "model": (listed, {**installed, "default": FLUX2_DEFAULT_SOURCE, "tooltip":
                          "Diffusers pipeline: a Hugging Face id or a folder in models/diffusers. klein-base-* "
                          "are the undistilled models the paper used (real CFG, ~30 steps); klein-9B/4B are "
                          "step-distilled (4 steps, guidance ignored). 9B: FLUX Non-Commercial License; 4B: "
                          "Apache-2.0. With single files below, only this model's configs and tokenizer are "
                          "read. " + installed["tooltip"]}),
                "transformer_file": (_files("diffusion_models"), {"default": NONE, "tooltip":
                                     "Optional ComfyUI single file from models/diffusion_models (e.g. "
                                     "flux-2-klein-base-9b.safetensors) replacing the pipeline's transformer."}),
                "text_encoder_file": (_files("text_encoders"), {"default": NONE, "tooltip":
                                      "Optional Qwen3 text encoder file from models/text_encoders (Qwen3-8B for "
                                      "9B, Qwen3-4B for 4B; bf16/fp16 or ComfyUI's fp8 files)."}),
                "vae_file": (_files("vae"), {"default": NONE, "tooltip":
                             "Optional FLUX.2 VAE file from models/vae (e.g. flux2-vae.safetensors)."}),
                "dtype": (DTYPES, {"default": "auto", "tooltip":
                          "Weight precision. auto: bf16 on CUDA, fp32 on CPU."}),
                "offload": (list(OFFLOAD_MODES), {"default": "auto", "tooltip": _OFFLOAD_TIP}),
                "allow_download": ("BOOLEAN", {"default": False, "tooltip":
                                   "Download from Hugging Face when the model is not local (only configs and "
                                   "tokenizer when all three single files are chosen)."}),
            },
            "optional": {
                "custom_model": ("STRING", {"default": "", "tooltip":
                                 "Overrides 'model': a Hugging Face id (owner/name) or a pipeline folder inside "
                                 "models/diffusers; paths outside the diffusers model folders are refused."}),
            },
        }

    @classmethod
    def VALIDATE_INPUTS(cls, model=None, transformer_file=None, text_encoder_file=None, vae_file=None,
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

    def load(self, model, transformer_file, text_encoder_file, vae_file, dtype, offload, allow_download,
             custom_model=""):
        source = (paths.model_source(custom_model, "diffusers", "the Flux.2 loader's custom_model")
                  if (custom_model or "").strip() else model)
        editor = load_flux2(source, transformer_file=_file(transformer_file),
                            text_encoder_file=_file(text_encoder_file), vae_file=_file(vae_file), dtype=dtype,
                            offload=offload, allow_download=allow_download)
        return (editor,)


class ReSpecFlux2Edit:
    """One FLUX.2 [klein] edit with the current image and historical references."""

    CATEGORY = CATEGORY
    SEARCH_ALIASES = ["flux", "klein", "edit", "restore", "reveal"]
    FUNCTION = "edit"
    RETURN_TYPES = ("IMAGE", "STRING")
    RETURN_NAMES = ("image", "edit_info")
    OUTPUT_TOOLTIPS = ("The edited image I_t at the current image's size.",
                       "JSON: editor, seed, steps, guidance, generation size, seconds (for the history's metadata).")
    DESCRIPTION = ("Edits with FLUX.2 [klein]: every image in editor_images is a reference, in order; the output "
                   "has the current image's size. Paper defaults: 30 steps, guidance 4.0 (klein base). "
                   "Progress per step; Cancel stops between steps.")

    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {
                "editor": (EDITOR, {"tooltip": "From 'Flux.2 [klein] Loader (ReSpec)'."}),
                **_COMMON_EDIT_INPUTS,
                "steps": ("INT", {"default": 30, "min": 1, "max": 200, "tooltip":
                          "Denoising steps (paper: 30 for klein base; use 4 for the distilled klein)."}),
                "guidance": ("FLOAT", {"default": 4.0, "min": 0.0, "max": 20.0, "step": 0.1, "tooltip":
                             "Classifier-free guidance (paper: 4.0). Ignored by the distilled klein."}),
            },
            "optional": dict(_SIZE_INPUTS),
        }

    def edit(self, editor, editor_images, current_image, instruction, seed, steps, guidance, width=0, height=0,
             max_megapixels=1.0):
        return _edit(editor, "flux2", editor_images, current_image, instruction, seed, steps, guidance, width,
                     height, max_pixels=int(max_megapixels * 1024 * 1024))


class ReSpecOmniGen2Loader:
    """Load OmniGen2's official pipeline once (needs the user-installed OmniGen2 code)."""

    CATEGORY = CATEGORY
    FUNCTION = "load"
    RETURN_TYPES = (EDITOR,)
    RETURN_NAMES = ("editor",)
    OUTPUT_TOOLTIPS = ("The loaded OmniGen2 editor, for 'OmniGen2 In-Context Edit'.",)
    DESCRIPTION = ("Loads OmniGen2 through its official pipeline. Its code is not on PyPI and not bundled: the "
                   "server's owner installs it into ComfyUI's Python (or sets RESPEC_OMNIGEN2_PATH to a clone) "
                   "before starting ComfyUI; see docs/editors.md. Users of ComfyUI's native OmniGen2 models need "
                   "the 'Reference Latents (ReSpec)' node instead.")

    @classmethod
    def INPUT_TYPES(cls):
        listed, installed = _sources([OMNIGEN2_DEFAULT_SOURCE])
        return {
            "required": {
                "model": (listed, {**installed, "default": OMNIGEN2_DEFAULT_SOURCE, "tooltip":
                          "OmniGen2 weights in diffusers layout: a Hugging Face id or a folder in models/diffusers. "
                          + installed["tooltip"]}),
                "dtype": (DTYPES, {"default": "auto", "tooltip": "Weight precision. auto: bf16 on CUDA, fp32 on CPU."}),
                "offload": (list(OFFLOAD_MODES), {"default": "auto", "tooltip": _OFFLOAD_TIP}),
                "allow_download": ("BOOLEAN", {"default": False, "tooltip":
                                   "Download the weights from Hugging Face when they are not local."}),
            },
        }

    @classmethod
    def VALIDATE_INPUTS(cls, model=None, allow_download=None):
        """Weights not on this machine, with downloads off, fail the prompt before anything loads."""
        def check():
            if model is not None and allow_download is False and models.tiny_seed(model) is None:
                models.resolve_hf(model, "diffusers", False, OMNIGEN2_HOW_TO_GET)
        return validate_loader({"model": models.listed("diffusers", [OMNIGEN2_DEFAULT_SOURCE])}, {"model": model}, check)

    def load(self, model, dtype, offload, allow_download):
        return (load_omnigen2(model, dtype=dtype, offload=offload, allow_download=allow_download),)


class ReSpecOmniGen2Edit:
    """One OmniGen2 edit with the current image and historical references."""

    CATEGORY = CATEGORY
    SEARCH_ALIASES = ["omnigen", "edit", "restore", "reveal"]
    FUNCTION = "edit"
    RETURN_TYPES = ("IMAGE", "STRING")
    RETURN_NAMES = ("image", "edit_info")
    OUTPUT_TOOLTIPS = ("The edited image I_t at the current image's size.",
                       "JSON: editor, seed, steps, guidances, generation size, seconds.")
    DESCRIPTION = ("Edits with OmniGen2's official pipeline: editor_images are its input images, in order. Paper "
                   "defaults: 50 steps, text guidance 5.0, image guidance 2.0.")

    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {
                "editor": (EDITOR, {"tooltip": "From 'OmniGen2 Loader (ReSpec)'."}),
                **_COMMON_EDIT_INPUTS,
                "steps": ("INT", {"default": 50, "min": 1, "max": 200, "tooltip": "Denoising steps (paper: 50)."}),
                "text_guidance": ("FLOAT", {"default": 5.0, "min": 0.0, "max": 20.0, "step": 0.1, "tooltip":
                                  "Text guidance scale (paper: 5.0)."}),
                "image_guidance": ("FLOAT", {"default": 2.0, "min": 0.0, "max": 20.0, "step": 0.1, "tooltip":
                                   "Image guidance scale: faithfulness to the input images (paper: 2.0)."}),
            },
            "optional": {
                "negative_prompt": ("STRING", {"multiline": True, "default": "", "tooltip":
                                    "What the result should not show (e.g. 'blurry, deformed')."}),
                **_SIZE_INPUTS,
            },
        }

    def edit(self, editor, editor_images, current_image, instruction, seed, steps, text_guidance, image_guidance,
             negative_prompt="", width=0, height=0, max_megapixels=1.0):
        return _edit(editor, "omnigen2", editor_images, current_image, instruction, seed, steps, text_guidance,
                     width, height, image_guidance=image_guidance, negative_prompt=negative_prompt,
                     max_pixels=int(max_megapixels * 1024 * 1024))


class ReSpecReferenceConditioning:
    """Append the Reference Selector's images to a CONDITIONING as reference latents (ComfyUI-native route)."""

    CATEGORY = CATEGORY
    SEARCH_ALIASES = ["reference latent", "restore", "reveal"]
    FUNCTION = "append"
    RETURN_TYPES = ("CONDITIONING",)
    RETURN_NAMES = ("conditioning",)
    OUTPUT_TOOLTIPS = ("The conditioning with one reference latent per image appended, in order.",)
    DESCRIPTION = ("For ComfyUI's own FLUX.2 and OmniGen2 models: VAE-encodes each image of editor_images and "
                   "appends it to the conditioning's reference latents, in the selector's order (what chaining "
                   "one 'ReferenceLatent' node per image does). Use it on the positive and on the negative "
                   "conditioning; for OmniGen2's text + image guidance feed both to 'DualCFGGuider' "
                   "(see docs/editors.md).")

    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {
                "conditioning": ("CONDITIONING", {"tooltip": "Text conditioning (e.g. from 'CLIP Text Encode')."}),
                "vae": ("VAE", {"tooltip": "The model's VAE (FLUX.2 VAE for klein, the FLUX.1 'ae' for OmniGen2)."}),
                "editor_images": ("IMAGE", {"tooltip": "The Reference Selector's editor_images, in its order."}),
                "megapixels": ("FLOAT", {"default": 1.0, "min": 0.0, "max": 16.0, "step": 0.05, "tooltip":
                               "Scale each reference to about this many megapixels before encoding (0 = keep size)."}),
            },
        }

    def append(self, conditioning, vae, editor_images, megapixels):
        return (append_reference_latents(conditioning, vae, editor_images, megapixels),)


class ReSpecEditorImageSlots:
    """The selector's images as image1..image3, for Qwen-Image-Edit's TextEncodeQwenImageEditPlus."""

    CATEGORY = CATEGORY
    SEARCH_ALIASES = ["qwen", "qwen image edit", "image1", "slots", "references"]
    FUNCTION = "slots"
    RETURN_TYPES = ("IMAGE", "IMAGE", "IMAGE")
    RETURN_NAMES = ("image1", "image2", "image3")
    OUTPUT_TOOLTIPS = ("The first editor image (the restoration source on a restoration turn, else the current "
                       "image).", "The second (the identity anchor on a restoration turn), or nothing.",
                       "The third, or nothing.")
    DESCRIPTION = ("Splits the Reference Selector's editor_images into image1, image2, image3 in the plan's order "
                   "(restoration source, identity anchor), for 'TextEncodeQwenImageEditPlus'. A slot with no "
                   "image gives nothing (the encoder skips it). More than three images are refused.")

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {
            "editor_images": ("IMAGE", {"tooltip": "The Reference Selector's editor_images, in its order."}),
        }}

    def slots(self, editor_images):
        editor_images = editor_images_in(editor_images)
        return tuple(image_slots([editor_images[i:i + 1] for i in range(editor_images.shape[0])]))


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
