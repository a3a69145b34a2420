"""Write the smallest random-weight Qwen-Image-Edit 2511 files ComfyUI 0.24's own loaders accept (a check instrument).

    <ComfyUI python> scripts/comfyui/make_qwen_image_files.py --comfyui /path/to/ComfyUI-0.24 --models <cache>/models

What ComfyUI 0.24 derives from a Qwen-Image file and what it fixes (comfy/model_detection.py,
comfy/sd.py, comfy/text_encoders/llama.py):
- the diffusion model is Qwen-Image when `txt_norm.weight` exists; only the input channels
  (`img_in`), the number of blocks and the 2511 reference method (a `__index_timestep_zero__` key)
  come from the file, the widths are fixed (24 heads x 128, text width 3584): so a 1-block model
  (~0.5 B parameters, linear weights in ComfyUI's fp8 "mixed" layout) is accepted;
- the text encoder is Qwen2.5-VL 7B when layer 0's `k_proj.bias` is 512 wide, built with the fixed
  28-layer 3584-wide config and its vision tower: so it is real-size (random; linear weights in fp8
  mixed, ~8.3 GB, written one tensor at a time);
- the VAE is the Wan 2.1 one, its width read from `decoder.head.0.gamma`: a 16-wide one is accepted
  (the real one is 96 wide).
Writes diffusion_models/qwen-image-edit-check.safetensors, text_encoders/qwen_2.5_vl_7b-check.safetensors
and vae/qwen-image-vae-check.safetensors under --models (existing files are kept: written once, reused)
and prints their sizes as JSON. The checker links them under the names the workflows select.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.dont_write_bytecode = True
HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from make_omnigen2_files import _random_entries, _stream_save, comfyui_for_files  # noqa: E402

FILES = {"diffusion_models": "qwen-image-edit-check.safetensors",
         "text_encoders": "qwen_2.5_vl_7b-check.safetensors",
         "vae": "qwen-image-vae-check.safetensors"}
VAE_WIDTH = 16


def main(argv=None) -> int:
    args = comfyui_for_files(__doc__, argv)
    import torch
    import comfy.ldm.qwen_image.model as qwen
    import comfy.ldm.wan.vae as wan
    import comfy.model_detection
    import comfy.ops
    import comfy.text_encoders.llama as llama

    models = Path(args.models)
    report, t0 = {}, time.monotonic()
    ops = comfy.ops.disable_weight_init
    path = models / "diffusion_models" / FILES["diffusion_models"]
    if not path.is_file():
        meta = lambda *shape: torch.empty(shape, device="meta")   # noqa: E731
        keys = {"txt_norm.weight": meta(3584), "img_in.weight": meta(3072, 64),
                "transformer_blocks.0.img_mod.1.weight": meta(1), "__index_timestep_zero__": meta(0)}
        config = comfy.model_detection.detect_unet_config(keys, "")
        with torch.device("meta"):
            dit = qwen.QwenImageTransformer2DModel(**{k: v for k, v in config.items() if k != "image_model"},
                                                   dtype=torch.bfloat16, device="meta", operations=ops)
        report["transformer"] = {**_stream_save(_random_entries(dit, 1), path), "config": config}
        del dit
    path = models / "text_encoders" / FILES["text_encoders"]
    if not path.is_file():
        with torch.device("meta"):
            te = llama.Qwen25_7BVLI({}, dtype=torch.bfloat16, device="meta", operations=ops)
        report["text_encoder"] = _stream_save(_random_entries(te, 2), path)
        del te
    path = models / "vae" / FILES["vae"]
    if not path.is_file():
        with torch.device("meta"):
            vae = wan.WanVAE(dim=VAE_WIDTH, z_dim=16, dim_mult=[1, 2, 4, 4], num_res_blocks=2, attn_scales=[],
                             temperal_downsample=[False, True, True], dropout=0.0)
        report["vae"] = _stream_save(_random_entries(vae, 3), path)
    report["seconds"] = round(time.monotonic() - t0, 1)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
