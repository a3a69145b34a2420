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


def _random_entries(module, seed: int, fp8: bool = True, prefix: str = "") -> list[tuple[str, object, tuple, object]]:
    """(key, dtype, shape, make) for random tensors of `module`'s state dict (meta shapes), keys under
    `prefix`: linear weights in scaled fp8 with a weight_scale and a comfy_quant entry (bf16 N(0, 0.02)
    when not `fp8`), norm weights 1, biases 0, other tensors N(0, 0.02) in bf16. `make()` builds one
    tensor; called in order, the values depend only on `seed`."""
    import torch
    gen = torch.Generator().manual_seed(seed)
    linear = {name for name, m in module.named_modules() if isinstance(m, torch.nn.Linear)}
    quant = list(json.dumps({"format": "float8_e4m3fn"}).encode())
    out, scales = [], {}

    def fp8_weight(layer, shape):
        def make():
            w = torch.randn(shape, generator=gen, dtype=torch.float32).mul_(0.02)
            scales[layer] = w.abs().max() / torch.finfo(torch.float8_e4m3fn).max
            return w.div_(scales[layer]).to(torch.float8_e4m3fn)
        return make

    for key, t in module.state_dict().items():
        layer, _, leaf = key.rpartition(".")
        shape = tuple(t.shape)
        key, layer = prefix + key, prefix + layer
        if fp8 and leaf == "weight" and layer[len(prefix):] in linear:
            out.append((key, torch.float8_e4m3fn, shape, fp8_weight(layer, shape)))
            out.append((layer + ".weight_scale", torch.float32, (), lambda layer=layer: scales[layer].reshape(())))
            out.append((layer + ".comfy_quant", torch.uint8, (len(quant),),
                        lambda: torch.tensor(quant, dtype=torch.uint8)))
        elif leaf == "bias":
            out.append((key, torch.bfloat16, shape, lambda shape=shape: torch.zeros(shape, dtype=torch.bfloat16)))
        elif t.ndim == 1:
            out.append((key, torch.bfloat16, shape, lambda shape=shape: torch.ones(shape, dtype=torch.bfloat16)))
        else:
            out.append((key, torch.bfloat16, shape, lambda shape=shape: torch.randn(
                shape, generator=gen, dtype=torch.float32).mul_(0.02).to(torch.bfloat16)))
    return out


def _random_state(module, seed: int) -> dict:
    """`_random_entries` built into one state dict."""
    return {key: make() for key, _, _, make in _random_entries(module, seed)}


def _save(sd: dict, path: Path) -> dict:
    from safetensors.torch import save_file
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(sd, str(path))
    n = sum(v.numel() for k, v in sd.items() if not k.endswith(("weight_scale", "comfy_quant")))
    return {"file": str(path), "parameters": n, "bytes": path.stat().st_size}


_ST_DTYPES = {"float8_e4m3fn": "F8_E4M3", "bfloat16": "BF16", "float16": "F16", "float32": "F32", "uint8": "U8",
              "int64": "I64"}


def _stream_save(entries: list, path: Path) -> dict:
    """Write `_random_entries`-style (key, dtype, shape, make) to a safetensors file one tensor at a
    time (the header first, from the shapes), so a file of many GB needs the memory of its largest
    tensor only."""
    import struct
    import torch
    path.parent.mkdir(parents=True, exist_ok=True)
    header, offset = {}, 0
    for key, dtype, shape, _ in entries:
        size = torch.empty((), dtype=dtype).element_size() * int(torch.Size(shape).numel())
        header[key] = {"dtype": _ST_DTYPES[str(dtype).removeprefix("torch.")], "shape": list(shape),
                       "data_offsets": [offset, offset + size]}
        offset += size
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    n = 0
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head)
        for key, dtype, shape, make in entries:
            t = make().contiguous()
            if tuple(t.shape) != tuple(shape) or t.dtype != dtype:
                raise RuntimeError(f"{key}: made {t.dtype} {tuple(t.shape)}, declared {dtype} {shape}")
            f.write(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
            if not key.endswith(("weight_scale", "comfy_quant")):
                n += t.numel()
    return {"file": str(path), "parameters": n, "bytes": path.stat().st_size}


def comfyui_for_files(doc: str, argv=None) -> argparse.Namespace:
    """The options every make_*_file(s) script takes (--comfyui, --models), with that ComfyUI
    checkout importable and its options read as on a CPU (its modules give the files' shapes)."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--comfyui", required=True, help="ComfyUI source checkout (its modules give the shapes)")
    ap.add_argument("--models", required=True, help="the models folder to write into")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(Path(args.comfyui).resolve()))
    sys.argv = [sys.argv[0], "--cpu"]   # ComfyUI reads its options at import: no GPU here
    import comfy.options
    comfy.options.enable_args_parsing()
    return args


def main(argv=None) -> int:
    args = comfyui_for_files(__doc__, argv)
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
