"""Real-size architectures of the models ReSpec runs, built with random weights straight on a device.

Used by bench_gpu.py (every stage) and bench_editor.py --gpu (klein). Nothing is downloaded or
read from disk: each model is constructed from the numbers below with its library's own random
initialisation, directly in device memory and in the requested dtype. Timings and memory are
those of the real weights (same shapes, same kernels); what the models output is noise.

Where the numbers come from (each architecture below names its source):
- FLUX.2 [klein] base 9B / 4B: black-forest-labs/FLUX.2-klein-base-9B and -4B, transformer/config.json
  (BFL's Klein9BParams / Klein4BParams); text encoders Qwen/Qwen3-8B and Qwen/Qwen3-4B config.json;
  the VAE is diffusers' AutoencoderKLFlux2 default config (its published one).
- Qwen3-VL-8B: Qwen/Qwen3-VL-8B-Instruct config.json and preprocessor_config.json.
- Qwen-Image-Edit-2511: Qwen/Qwen-Image-Edit-2511 transformer/config.json (the QwenImage MMDiT with
  zero_cond_t), text encoder Qwen/Qwen2.5-VL-7B-Instruct config.json, VAE = diffusers'
  AutoencoderKLQwenImage default config, scheduler_config.json of Qwen/Qwen-Image.
- SAM vit_h: segment-anything's own builder (sam_model_registry["vit_h"]).
PUBLISHED holds the parameter totals these must reproduce (tests/test_bench_gpu.py counts them).

Tokenizers are respec/tiny's byte-level Qwen tokenizer: its ids are valid ids of the real
151,936 / 152,064-token vocabularies, and the special tokens (image pads, vision start/end) get
the ids the configs here name, so every model runs its real code path. Text comes out as one
token per byte (about 4x the real BPE's count): bench_gpu.py reports the token counts it ran.
Each architecture also has a "toy" size that runs the same code on a CPU in seconds.
"""
from __future__ import annotations

import contextlib
from pathlib import Path

GIB = 2 ** 30

# --------------------------------------------------------------------------- FLUX.2 [klein]
# 9B: 9,078,581,248 transformer parameters, the published 9.08 B; 4B: 3,875,544,576.
KLEIN = {
    "9B": {"transformer": dict(num_layers=8, num_single_layers=24, attention_head_dim=128, num_attention_heads=32,
                               joint_attention_dim=12288, guidance_embeds=False),
           "text": dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
                        num_key_value_heads=8, head_dim=128, tie_word_embeddings=False, vocab_size=151936,
                        max_position_embeddings=40960)},
    "4B": {"transformer": dict(num_layers=5, num_single_layers=20, attention_head_dim=128, num_attention_heads=24,
                               joint_attention_dim=7680, guidance_embeds=False),
           "text": dict(hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
                        num_key_value_heads=8, head_dim=128, tie_word_embeddings=True, vocab_size=151936,
                        max_position_embeddings=40960)},
    # a few-MB model of the same code path, for any device; 3 text layers -> hidden states (1, 2, 3)
    "toy": {"transformer": dict(in_channels=16, num_layers=1, num_single_layers=1, attention_head_dim=16,
                                num_attention_heads=2, joint_attention_dim=96, axes_dims_rope=(4, 4, 4, 4),
                                guidance_embeds=False),
            "text": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=2,
                         num_key_value_heads=1, head_dim=16, tie_word_embeddings=False, vocab_size=1024,
                         max_position_embeddings=1024),
            "vae": dict(block_out_channels=(16, 16, 16, 16), layers_per_block=1, norm_num_groups=8, latent_channels=4)},
}
KLEIN_ROPE = {"rope_type": "default", "rope_theta": 1e6}   # Qwen3-8B / -4B

# --------------------------------------------------------------------------- Qwen3-VL (the controller)
QWEN3VL = {
    "8B": {"text": dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
                        num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=262144,
                        rms_norm_eps=1e-6, tie_word_embeddings=False),
           "rope": {"rope_type": "default", "rope_theta": 5e6, "mrope_section": [24, 20, 20], "mrope_interleaved": True},
           "vision": dict(depth=27, hidden_size=1152, intermediate_size=4304, num_heads=16, patch_size=16,
                          spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=4096,
                          num_position_embeddings=2304, deepstack_visual_indexes=[8, 16, 24],
                          hidden_act="gelu_pytorch_tanh"),
           # min / max pixels of the image processor; the pack downscales to 512x512 before it anyway
           "pixels": {"shortest_edge": 65536, "longest_edge": 16777216}, "mean_std": [0.5, 0.5, 0.5]},
    "toy": {"text": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                         num_key_value_heads=1, head_dim=16, vocab_size=1024, max_position_embeddings=4096,
                         tie_word_embeddings=False),
            "rope": {"rope_type": "default", "rope_theta": 5e6, "mrope_section": [4, 2, 2], "mrope_interleaved": True},
            "vision": dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=16,
                           spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=32,
                           num_position_embeddings=64, deepstack_visual_indexes=[0, 1]),
            "pixels": {"shortest_edge": 1024, "longest_edge": 4096}, "mean_std": [0.5, 0.5, 0.5]},
}

# --------------------------------------------------------------------------- Qwen-Image-Edit-2511
QWEN_IMAGE_EDIT = {
    "2511": {"transformer": dict(patch_size=2, in_channels=64, out_channels=16, num_layers=60, attention_head_dim=128,
                                 num_attention_heads=24, joint_attention_dim=3584, guidance_embeds=False,
                                 axes_dims_rope=(16, 56, 56), zero_cond_t=True),
             "text": dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                          num_key_value_heads=4, vocab_size=152064, max_position_embeddings=128000,
                          rms_norm_eps=1e-6, tie_word_embeddings=False),
             "rope": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24]},
             "vision": dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, in_chans=3,
                            out_hidden_size=3584, patch_size=14, spatial_merge_size=2, temporal_patch_size=2,
                            window_size=112, fullatt_block_indexes=[7, 15, 23, 31], hidden_act="silu"),
             "vae": {},
             "pixels": {"shortest_edge": 3136, "longest_edge": 12845056}},
    "toy": {"transformer": dict(patch_size=2, in_channels=16, out_channels=4, num_layers=1, attention_head_dim=16,
                                num_attention_heads=2, joint_attention_dim=32, guidance_embeds=False,
                                axes_dims_rope=(8, 4, 4), zero_cond_t=True),
            "text": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                         num_key_value_heads=1, vocab_size=1024, max_position_embeddings=4096,
                         tie_word_embeddings=False),
            "rope": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [2, 3, 3]},
            "vision": dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, in_chans=3, out_hidden_size=32,
                           patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=112,
                           fullatt_block_indexes=[0]),
            "vae": dict(base_dim=24, z_dim=4, dim_mult=[1, 2, 4], num_res_blocks=1, temperal_downsample=[False, True],
                        latents_mean=[0.0] * 4, latents_std=[1.0] * 4),
            "pixels": {"shortest_edge": 3136, "longest_edge": 12845056}},
}
# Qwen/Qwen-Image scheduler_config.json (noise levels only; the cost does not depend on them)
QWEN_IMAGE_SCHEDULER = dict(base_image_seq_len=256, max_image_seq_len=8192, base_shift=0.5, max_shift=0.9,
                            shift=1.0, shift_terminal=0.02, time_shift_type="exponential", use_dynamic_shifting=True)

# Published parameter totals (billions) and their sources; None where only a rounded name exists.
PUBLISHED = {
    "klein 9B transformer": (9.08, "STACK.md (diffusers Flux2Transformer2DModel, counted)"),
    "klein 4B transformer": (None, "model name '4B' only"),
    "Qwen3-8B text encoder": (8.19, "Qwen/Qwen3-8B model card: 8.2 B"),
    "Qwen3-4B text encoder": (4.02, "Qwen/Qwen3-4B model card: 4.0 B"),
    "FLUX.2 VAE": (0.084, "flux2-vae.safetensors, 168 MB bf16"),
    "Qwen3-VL-8B": (8.77, "STACK.md (Qwen3VLForConditionalGeneration, counted)"),
    "Qwen-Image-Edit-2511 transformer": (20.4, "Qwen-Image model card: 20 B MMDiT"),
    "Qwen2.5-VL-7B text encoder": (8.29, "Qwen/Qwen2.5-VL-7B-Instruct: 8.29 B"),
    "SAM vit_h image encoder": (0.636, "SAM paper: ViT-H image encoder, 636 M"),
}


# --------------------------------------------------------------------------- helpers

def count_params(module) -> int:
    """Parameters of a module (shared tensors once)."""
    return sum(p.numel() for p in module.parameters())


def weight_bytes(module) -> int:
    """Bytes of a module's parameters and buffers."""
    return sum(t.numel() * t.element_size() for t in list(module.parameters()) + list(module.buffers()))


@contextlib.contextmanager
def building_on(device, dtype, seed: int = 0):
    """New tensors are made on `device` in `dtype` (a random init straight into device memory)."""
    import torch
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            torch.manual_seed(seed)
            yield
    finally:
        torch.set_default_dtype(previous)


def _token_ids(tokenizer) -> dict:
    """The special-token ids the vision-language configs must name (those of the byte-level tokenizer)."""
    names = {"image_token_id": "<|image_pad|>", "video_token_id": "<|video_pad|>",
             "vision_start_token_id": "<|vision_start|>", "vision_end_token_id": "<|vision_end|>"}
    return {k: tokenizer.convert_tokens_to_ids(t) for k, t in names.items()}


# --------------------------------------------------------------------------- builders

def build_klein(variant: str, device, dtype):
    """FLUX.2 [klein] base `variant` ("9B", "4B", "toy") as a Flux2KleinPipeline with random weights on `device`."""
    from diffusers import AutoencoderKLFlux2, FlowMatchEulerDiscreteScheduler, Flux2KleinPipeline, Flux2Transformer2DModel
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from respec.tiny.tokenizer import build_tokenizer
    from respec.tiny.vlm import rope_settings

    arch = KLEIN[variant]
    tokenizer = build_tokenizer()
    with building_on(device, dtype):
        transformer = Flux2Transformer2DModel(**arch["transformer"]).eval()
        text_encoder = Qwen3ForCausalLM(Qwen3Config(**arch["text"], **rope_settings(KLEIN_ROPE),
                                                    pad_token_id=tokenizer.pad_token_id,
                                                    eos_token_id=tokenizer.eos_token_id)).eval()
        vae = AutoencoderKLFlux2(**arch.get("vae", {})).eval()
    scheduler = FlowMatchEulerDiscreteScheduler(shift=3.0, use_dynamic_shifting=True)
    return Flux2KleinPipeline(scheduler=scheduler, vae=vae, text_encoder=text_encoder, tokenizer=tokenizer,
                              transformer=transformer, is_distilled=False)


def qwen3vl_config(variant: str, tokenizer):
    """Qwen3VLConfig of `variant` ("8B", "toy"), its special tokens at the byte-level tokenizer's ids."""
    from transformers import Qwen3VLConfig

    from respec.tiny.vlm import rope_settings

    arch = QWEN3VL[variant]
    text = dict(arch["text"], eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                **rope_settings(arch["rope"]))
    return Qwen3VLConfig(text_config=text, vision_config=dict(arch["vision"]), tie_word_embeddings=False,
                         **_token_ids(tokenizer))


def write_controller_folder(folder, variant: str) -> Path:
    """A weight-free Qwen3-VL model folder (config, processor, chat template) for the pack's
    transformers backend; load it inside `random_weights_from_config`."""
    from transformers import Qwen2VLImageProcessor, Qwen3VLProcessor, Qwen3VLVideoProcessor

    from respec.tiny.tokenizer import build_tokenizer

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    arch = QWEN3VL[variant]
    tokenizer = build_tokenizer()
    qwen3vl_config(variant, tokenizer).save_pretrained(folder)
    common = dict(patch_size=16, merge_size=2, temporal_patch_size=2, size=dict(arch["pixels"]),
                  image_mean=arch["mean_std"], image_std=arch["mean_std"])
    Qwen3VLProcessor(image_processor=Qwen2VLImageProcessor(**common), tokenizer=tokenizer,
                     video_processor=Qwen3VLVideoProcessor(**common),
                     chat_template=tokenizer.chat_template).save_pretrained(folder)
    return folder


@contextlib.contextmanager
def random_weights_from_config(device, dtype):
    """Inside the block, `AutoModelForImageTextToText.from_pretrained(folder, ...)` builds the folder's
    config with random weights on `device` instead of reading weight files (the folder has none);
    everything around it (the processor, the chat template check, generate) is the caller's own path."""
    from unittest import mock

    from transformers import AutoConfig, AutoModelForImageTextToText, AutoTokenizer

    def from_config(folder, *, attn_implementation="sdpa", **_ignored):
        config = AutoConfig.from_pretrained(folder, local_files_only=True)
        with building_on(device, dtype):
            model = AutoModelForImageTextToText.from_config(config, dtype=dtype,
                                                            attn_implementation=attn_implementation)
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        model.generation_config.eos_token_id = tokenizer.eos_token_id
        model.generation_config.pad_token_id = tokenizer.pad_token_id
        return model

    with mock.patch.object(AutoModelForImageTextToText, "from_pretrained", from_config):
        yield


def build_qwen_image_edit(variant: str, device, dtype):
    """Qwen-Image-Edit `variant` ("2511", "toy") as diffusers' QwenImageEditPlusPipeline, random weights on `device`."""
    from diffusers import (AutoencoderKLQwenImage, FlowMatchEulerDiscreteScheduler, QwenImageEditPlusPipeline,
                           QwenImageTransformer2DModel)
    from transformers import (Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration, Qwen2VLImageProcessor,
                              Qwen2VLProcessor, Qwen2VLVideoProcessor)

    from respec.tiny.tokenizer import build_tokenizer
    from respec.tiny.vlm import rope_settings

    arch = QWEN_IMAGE_EDIT[variant]
    tokenizer = build_tokenizer()
    config = Qwen2_5_VLConfig(
        text_config=dict(arch["text"], eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                         bos_token_id=tokenizer.pad_token_id, **rope_settings(arch["rope"])),
        vision_config=dict(arch["vision"]), tie_word_embeddings=False, **_token_ids(tokenizer))
    with building_on(device, dtype):
        text_encoder = Qwen2_5_VLForConditionalGeneration(config).eval()
        transformer = QwenImageTransformer2DModel(**arch["transformer"]).eval()
        vae = AutoencoderKLQwenImage(**arch["vae"]).eval()
    common = dict(patch_size=14, merge_size=2, temporal_patch_size=2, size=dict(arch["pixels"]))
    processor = Qwen2VLProcessor(image_processor=Qwen2VLImageProcessor(**common), tokenizer=tokenizer,
                                 video_processor=Qwen2VLVideoProcessor(**common), chat_template=tokenizer.chat_template)
    return QwenImageEditPlusPipeline(scheduler=FlowMatchEulerDiscreteScheduler(**QWEN_IMAGE_SCHEDULER), vae=vae,
                                     text_encoder=text_encoder, tokenizer=tokenizer, processor=processor,
                                     transformer=transformer)


def build_sam(variant: str, device):
    """SAM `variant` ("vit_h" through segment-anything's builder, via the pack's; "toy": respec/tiny's
    one-block SAM) with random fp32 weights on `device`."""
    import torch
    with building_on(device, torch.float32):
        if variant == "toy":
            from respec.tiny.eval_models import build_tiny_sam
            sam = build_tiny_sam()
        else:
            from respec.eval.masks import build_sam as pack_build_sam
            sam = pack_build_sam(variant, device=device)
    return sam.to(device)
