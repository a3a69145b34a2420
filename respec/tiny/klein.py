"""A tiny random FLUX.2 [klein] pipeline (real diffusers / transformers classes at toy sizes).

Uses:
- `build_tiny_klein_pipeline()`: an in-memory `Flux2KleinPipeline` (3-layer Qwen3 text encoder,
  byte-level tokenizer built in code, small VAE, 1+1-block transformer) for tests.
- `write_tiny_klein_single_files(models_dir)`: the same weights written the way ComfyUI users
  keep them (transformer in BFL names under `diffusion_models/`, Qwen3 text encoder with HF names
  under `text_encoders/`, VAE in LDM names under `vae/`) plus a weight-free diffusers folder with
  the configs and tokenizer under `diffusers/`, so the single-file loader can be tested offline.
- the smoke benchmark's editor: `load_flux2("tiny")` wraps `build_tiny_klein_pipeline()`.

Sizes follow STACK.md "Building tiny test models". Nothing here downloads anything.
"""
from __future__ import annotations

import json
from pathlib import Path

from .tokenizer import build_tokenizer

# The tiny Qwen3 has 3 layers; its hidden states 1, 2 and 3 are stacked into the prompt
# embedding (the real 36-layer encoder uses 9, 18, 27), so joint_attention_dim = 3 * 32.
TINY_TEXT_HIDDEN = 32
TINY_TEXT_LAYERS = 3
TINY_TEXT_ENCODER_OUT_LAYERS = (1, 2, 3)

TINY_TRANSFORMER_FILE = "tiny-klein-transformer.safetensors"
TINY_TEXT_ENCODER_FILE = "tiny-klein-qwen3.safetensors"
TINY_VAE_FILE = "tiny-klein-vae.safetensors"
TINY_CONFIG_FOLDER = "tiny-klein-config"
TINY_DIFFUSERS_FOLDER = "tiny-klein"


def build_tiny_klein_pipeline(seed: int = 0, is_distilled: bool = False):
    """A random-weight `Flux2KleinPipeline` small enough to edit 64x64 images on a CPU in seconds."""
    import torch
    from diffusers import (AutoencoderKLFlux2, FlowMatchEulerDiscreteScheduler, Flux2KleinPipeline,
                           Flux2Transformer2DModel)
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tokenizer = build_tokenizer()
    torch.manual_seed(seed)
    text_config = Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=TINY_TEXT_HIDDEN, intermediate_size=64,
        num_hidden_layers=TINY_TEXT_LAYERS, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
        max_position_embeddings=1024, tie_word_embeddings=False,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    text_encoder = Qwen3ForCausalLM(text_config).eval()
    vae = AutoencoderKLFlux2(block_out_channels=(16, 16, 16, 16), layers_per_block=1,
                             norm_num_groups=8, latent_channels=4).eval()
    transformer = Flux2Transformer2DModel(
        in_channels=16, num_layers=1, num_single_layers=1, attention_head_dim=16, num_attention_heads=2,
        joint_attention_dim=TINY_TEXT_HIDDEN * len(TINY_TEXT_ENCODER_OUT_LAYERS), axes_dims_rope=(4, 4, 4, 4),
        guidance_embeds=False).eval()
    # A freshly built VAE has running_var = 1 and mean = 0; give the latent normalisation real
    # values so that a loader which drops the bn.* keys produces a visibly different image.
    with torch.no_grad():
        vae.bn.running_mean.copy_(torch.randn_like(vae.bn.running_mean) * 0.1)
        vae.bn.running_var.copy_(torch.rand_like(vae.bn.running_var) + 0.5)
    scheduler = FlowMatchEulerDiscreteScheduler(shift=3.0, use_dynamic_shifting=True)
    return Flux2KleinPipeline(scheduler=scheduler, vae=vae, text_encoder=text_encoder, tokenizer=tokenizer,
                              transformer=transformer, is_distilled=is_distilled)


def save_tiny_klein_diffusers(path, pipe=None) -> Path:
    """Save a tiny pipeline as a complete diffusers folder (weights included)."""
    pipe = pipe or build_tiny_klein_pipeline()
    path = Path(path)
    pipe.save_pretrained(str(path))
    return path


# --------------------------------------------------------------------------- single-file layout

def write_tiny_klein_single_files(models_dir, pipe=None, prefix: str = "model.diffusion_model.") -> dict:
    """Write `pipe`'s weights in ComfyUI's single-file layout under `models_dir`.

    Returns {"transformer", "text_encoder", "vae": file names; "config": the weight-free diffusers
    folder name; "pipe": the pipeline the files came from}.
    """
    from safetensors.torch import save_file

    pipe = pipe or build_tiny_klein_pipeline()
    models_dir = Path(models_dir)
    for sub in ("diffusion_models", "text_encoders", "vae", "diffusers"):
        (models_dir / sub).mkdir(parents=True, exist_ok=True)

    transformer_sd = flux2_transformer_to_bfl(pipe.transformer.state_dict())
    save_file({prefix + k: v.contiguous() for k, v in transformer_sd.items()},
              str(models_dir / "diffusion_models" / TINY_TRANSFORMER_FILE))
    text_sd = {k: v.contiguous() for k, v in pipe.text_encoder.state_dict().items()}
    save_file(text_sd, str(models_dir / "text_encoders" / TINY_TEXT_ENCODER_FILE))
    save_file({k: v.contiguous() for k, v in flux2_vae_to_ldm(pipe.vae.state_dict()).items()},
              str(models_dir / "vae" / TINY_VAE_FILE))

    write_config_folder(pipe, models_dir / "diffusers" / TINY_CONFIG_FOLDER)
    return {"transformer": TINY_TRANSFORMER_FILE, "text_encoder": TINY_TEXT_ENCODER_FILE,
            "vae": TINY_VAE_FILE, "config": TINY_CONFIG_FOLDER, "pipe": pipe}


def write_config_folder(pipe, folder) -> Path:
    """A diffusers folder with every config and the tokenizer but no weights (what the
    single-file loader reads beside the three weight files)."""
    folder = Path(folder)
    pipe.save_config(str(folder))  # model_index.json (holds is_distilled)
    pipe.transformer.save_config(str(folder / "transformer"))
    pipe.vae.save_config(str(folder / "vae"))
    pipe.scheduler.save_pretrained(str(folder / "scheduler"))
    pipe.tokenizer.save_pretrained(str(folder / "tokenizer"))
    (folder / "text_encoder").mkdir(parents=True, exist_ok=True)
    pipe.text_encoder.config.to_json_file(str(folder / "text_encoder" / "config.json"))
    return folder


# --------------------------------------------------------------------------- inverse key maps
# The loader converts BFL -> diffusers (transformer) and LDM -> diffusers (VAE) with diffusers'
# own converters; these inverses exist only to write test fixtures in the files' native layout.

_T_RENAMES = [  # diffusers prefix -> BFL prefix (top-level modules)
    ("x_embedder.", "img_in."),
    ("context_embedder.", "txt_in."),
    ("time_guidance_embed.timestep_embedder.linear_1.", "time_in.in_layer."),
    ("time_guidance_embed.timestep_embedder.linear_2.", "time_in.out_layer."),
    ("time_guidance_embed.guidance_embedder.linear_1.", "guidance_in.in_layer."),
    ("time_guidance_embed.guidance_embedder.linear_2.", "guidance_in.out_layer."),
    ("double_stream_modulation_img.linear.", "double_stream_modulation_img.lin."),
    ("double_stream_modulation_txt.linear.", "double_stream_modulation_txt.lin."),
    ("single_stream_modulation.linear.", "single_stream_modulation.lin."),
    ("proj_out.", "final_layer.linear."),
]
_T_DOUBLE = {  # inside transformer_blocks.N (diffusers) -> inside double_blocks.N (BFL)
    "attn.norm_q.weight": "img_attn.norm.query_norm.scale",
    "attn.norm_k.weight": "img_attn.norm.key_norm.scale",
    "attn.to_out.0.weight": "img_attn.proj.weight",
    "ff.linear_in.weight": "img_mlp.0.weight",
    "ff.linear_out.weight": "img_mlp.2.weight",
    "attn.norm_added_q.weight": "txt_attn.norm.query_norm.scale",
    "attn.norm_added_k.weight": "txt_attn.norm.key_norm.scale",
    "attn.to_add_out.weight": "txt_attn.proj.weight",
    "ff_context.linear_in.weight": "txt_mlp.0.weight",
    "ff_context.linear_out.weight": "txt_mlp.2.weight",
}
_T_SINGLE = {
    "attn.to_qkv_mlp_proj.weight": "linear1.weight",
    "attn.to_out.weight": "linear2.weight",
    "attn.norm_q.weight": "norm.query_norm.scale",
    "attn.norm_k.weight": "norm.key_norm.scale",
}


def flux2_transformer_to_bfl(sd: dict) -> dict:
    """Diffusers Flux2Transformer2DModel keys -> the original BFL checkpoint keys."""
    import torch
    sd = dict(sd)
    out: dict = {}
    # fused qkv projections
    blocks = sorted({k.split(".")[1] for k in sd if k.startswith("transformer_blocks.")}, key=int)
    for n in blocks:
        for side, names in (("img", ("to_q", "to_k", "to_v")), ("txt", ("add_q_proj", "add_k_proj", "add_v_proj"))):
            for param in ("weight", "bias"):
                keys = [f"transformer_blocks.{n}.attn.{m}.{param}" for m in names]
                if all(k in sd for k in keys):
                    out[f"double_blocks.{n}.{side}_attn.qkv.{param}"] = torch.cat([sd.pop(k) for k in keys], 0)
    for k in list(sd):
        v = sd.pop(k)
        if k.startswith("transformer_blocks."):
            _, n, rest = k.split(".", 2)
            out[f"double_blocks.{n}.{_T_DOUBLE[rest]}"] = v
        elif k.startswith("single_transformer_blocks."):
            _, n, rest = k.split(".", 2)
            out[f"single_blocks.{n}.{_T_SINGLE[rest]}"] = v
        elif k.startswith("norm_out.linear."):
            # BFL stores (shift, scale); diffusers (scale, shift)
            scale, shift = v.chunk(2, dim=0)
            out["final_layer.adaLN_modulation.1." + k.rsplit(".", 1)[1]] = torch.cat([shift, scale], 0)
        else:
            for new, old in _T_RENAMES:
                if k.startswith(new):
                    k = old + k[len(new):]
                    break
            out[k] = v
    return out


def flux2_vae_to_ldm(sd: dict) -> dict:
    """Diffusers AutoencoderKLFlux2 keys -> the original (LDM-style, BFL) VAE keys of ComfyUI's VAE files."""
    sd = dict(sd)
    num_up = 1 + max(int(k.split(".")[2]) for k in sd if k.startswith("decoder.up_blocks."))
    out: dict = {}
    # BFL's FLUX.2 VAE (and ComfyUI's flux2-vae.safetensors) nest the quant convs in encoder / decoder
    simple = {"encoder.conv_norm_out.": "encoder.norm_out.", "decoder.conv_norm_out.": "decoder.norm_out.",
              "quant_conv.": "encoder.quant_conv.", "post_quant_conv.": "decoder.post_quant_conv."}
    for k, v in sd.items():
        new = k
        for a, b in simple.items():
            if new.startswith(a):
                new = b + new[len(a):]
        parts = new.split(".")
        if len(parts) < 3:
            pass
        elif parts[1] == "down_blocks":
            i = parts[2]
            if parts[3] == "resnets":
                new = f"{parts[0]}.down.{i}.block.{parts[4]}." + ".".join(parts[5:])
            else:  # downsamplers.0.conv
                new = f"{parts[0]}.down.{i}.downsample." + ".".join(parts[5:])
        elif parts[1] == "up_blocks":
            i = num_up - 1 - int(parts[2])
            if parts[3] == "resnets":
                new = f"{parts[0]}.up.{i}.block.{parts[4]}." + ".".join(parts[5:])
            else:
                new = f"{parts[0]}.up.{i}.upsample." + ".".join(parts[5:])
        elif parts[1] == "mid_block":
            if parts[2] == "resnets":
                new = f"{parts[0]}.mid.block_{int(parts[3]) + 1}." + ".".join(parts[4:])
            else:  # attentions.0.<name>
                name = ".".join(parts[4:])
                name = (name.replace("group_norm.", "norm.").replace("to_q.", "q.").replace("to_k.", "k.")
                        .replace("to_v.", "v.").replace("to_out.0.", "proj_out."))
                new = f"{parts[0]}.mid.attn_1.{name}"
                if v.ndim == 2:  # LDM attention projections are 1x1 convolutions
                    v = v[:, :, None, None]
        new = new.replace("conv_shortcut", "nin_shortcut")
        out[new] = v
    return out


def write_fp8_file(src, dst, layout: str = "mixed", fmt: str = "float8_e4m3fn", skip=("embed_tokens",)) -> Path:
    """Re-save a single file in one of ComfyUI's fp8 layouts (what its *_fp8_scaled / *_fp8mixed files
    hold): every 2-D `.weight` (except keys containing a `skip` part) in float8 with a per-tensor scale
    amax / fp8-max. layout "mixed": `weight_scale` + a `comfy_quant` JSON per layer; "scaled":
    `scale_weight` per layer + a `scaled_fp8` marker. A test instrument for the fp8 loader."""
    import torch
    from safetensors.torch import load_file, save_file

    dtype = getattr(torch, fmt)
    fp8_max = torch.finfo(dtype).max
    out = {}
    for k, v in load_file(str(src)).items():
        if k.endswith(".weight") and v.ndim == 2 and not any(s in k for s in skip):
            layer = k[: -len(".weight")]
            scale = (v.abs().max().float() / fp8_max).clamp(min=1e-12)
            out[k] = (v.float() / scale).to(dtype)
            if layout == "mixed":
                out[layer + ".weight_scale"] = scale.reshape(())
                out[layer + ".comfy_quant"] = torch.tensor(list(json.dumps({"format": fmt}).encode()), dtype=torch.uint8)
            else:
                out[layer + ".scale_weight"] = scale.reshape(())
        else:
            out[k] = v.contiguous()
    if layout != "mixed":   # the marker sits beside the model's keys, under their common prefix
        prefix = "model.diffusion_model." if all(k.startswith("model.diffusion_model.") for k in out) else ""
        out[prefix + "scaled_fp8"] = torch.zeros(0, dtype=dtype)
    save_file(out, str(dst))
    return Path(dst)
