"""Write random-weight OmniGen2 files in the layout ComfyUI's own loaders read (a check instrument).

    <ComfyUI python> scripts/comfyui/make_omnigen2_files.py --comfyui /path/to/ComfyUI --models <base>/models

ComfyUI 0.8 builds OmniGen2 with fixed sizes (its model detection hard-codes the transformer's
config, its text encoder is a fixed Qwen2.5-VL-3B language model, its VAE the FLUX.1 one), so
small files are not accepted: these files have the real sizes (transformer 4 B parameters, text
encoder 3 B, VAE 84 M) with random values. To fit a 24 GB machine, every linear layer's weight is
stored in ComfyUI's fp8 "mixed precision" layout (float8_e4m3fn + `weight_scale` + `comfy_quant`,
what its *_fp8mixed files hold); the rest is bf16. The tensor names and shapes are read from
ComfyUI's own modules built on the meta device, so the files match what its loaders expect.
Writes diffusion_models/omnigen2_fp16.safetensors, text_encoders/qwen_2.5_vl_fp16.safetensors and
vae/ae.safetensors (the names the native workflows select) and prints their sizes as JSON.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def _random_state(module, seed: int) -> dict:
    """Random tensors for `module`'s state dict (meta shapes): linear weights in scaled fp8 with a
    comfy_quant entry, norm weights 1, biases 0, other tensors N(0, 0.02) in bf16."""
    import torch
    gen = torch.Generator().manual_seed(seed)
    linear = {name for name, m in module.named_modules() if isinstance(m, torch.nn.Linear)}
    quant = torch.tensor(list(json.dumps({"format": "float8_e4m3fn"}).encode()), dtype=torch.uint8)
    out = {}
    for key, t in module.state_dict().items():
        layer, _, leaf = key.rpartition(".")
        if leaf == "weight" and layer in linear:
            w = torch.randn(tuple(t.shape), generator=gen, dtype=torch.float32).mul_(0.02)
            scale = w.abs().max() / torch.finfo(torch.float8_e4m3fn).max
            out[key] = w.div_(scale).to(torch.float8_e4m3fn)
            out[layer + ".weight_scale"] = scale.reshape(())
            out[layer + ".comfy_quant"] = quant.clone()
        elif leaf == "bias":
            out[key] = torch.zeros(tuple(t.shape), dtype=torch.bfloat16)
        elif t.ndim == 1:
            out[key] = torch.ones(tuple(t.shape), dtype=torch.bfloat16)
        else:
            out[key] = torch.randn(tuple(t.shape), generator=gen, dtype=torch.float32).mul_(0.02).to(torch.bfloat16)
    return out


def _save(sd: dict, path: Path) -> dict:
    from safetensors.torch import save_file
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(sd, str(path))
    n = sum(v.numel() for k, v in sd.items() if not k.endswith(("weight_scale", "comfy_quant")))
    return {"file": str(path), "parameters": n, "bytes": path.stat().st_size}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--comfyui", required=True, help="ComfyUI source checkout (its modules give the shapes)")
    ap.add_argument("--models", required=True, help="the models folder to write into")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(Path(args.comfyui).resolve()))
    sys.argv = [sys.argv[0], "--cpu"]   # ComfyUI reads its options at import: no GPU here
    import comfy.options
    comfy.options.enable_args_parsing()
    import torch
    import comfy.ldm.omnigen.omnigen2 as omnigen2
    import comfy.model_detection
    import comfy.ops
    import comfy.text_encoders.llama as llama
    from comfy.ldm.models.autoencoder import AutoencodingEngine

    models = Path(args.models)
    report, t0 = {}, time.monotonic()
    # The detection function returns the config it would build for a file with this key.
    config = comfy.model_detection.detect_unet_config(
        {"time_caption_embed.timestep_embedder.linear_1.bias": torch.empty(0)}, "")
    config = {k: v for k, v in config.items() if k != "image_model"}
    ops = comfy.ops.disable_weight_init
    with torch.device("meta"):
        transformer = omnigen2.OmniGen2Transformer2DModel(**config, dtype=torch.bfloat16, device="meta", operations=ops)
    report["transformer"] = _save(_random_state(transformer, 1), models / "diffusion_models" / "omnigen2_fp16.safetensors")
    del transformer
    with torch.device("meta"):
        te = llama.Qwen25_3B({}, dtype=torch.bfloat16, device="meta", operations=ops)
    report["text_encoder"] = _save(_random_state(te, 2), models / "text_encoders" / "qwen_2.5_vl_fp16.safetensors")
    del te
    dd = {"double_z": True, "z_channels": 16, "resolution": 256, "in_channels": 3, "out_ch": 3, "ch": 128,
          "ch_mult": [1, 2, 4, 4], "num_res_blocks": 2, "attn_resolutions": [], "dropout": 0.0}
    with torch.device("meta"):
        vae = AutoencodingEngine(regularizer_config={"target": "comfy.ldm.models.autoencoder.DiagonalGaussianRegularizer"},
                                 encoder_config={"target": "comfy.ldm.modules.diffusionmodules.model.Encoder", "params": dd},
                                 decoder_config={"target": "comfy.ldm.modules.diffusionmodules.model.Decoder", "params": dd})
    report["vae"] = _save(_random_state(vae, 3), models / "vae" / "ae.safetensors")
    report["seconds"] = round(time.monotonic() - t0, 1)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
