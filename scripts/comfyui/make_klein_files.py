"""Write the smallest random-weight FLUX.2 [klein] files ComfyUI 0.24's own loaders accept (a check instrument).

    <ComfyUI python> scripts/comfyui/make_klein_files.py --comfyui /path/to/ComfyUI-0.24 --models <cache>/models

What ComfyUI 0.24 derives from a klein file and what it fixes (docs STACK "Checked 2026-12-01"):
- the diffusion model's size comes from tensor shapes (flux2 when `double_stream_modulation_img.lin.weight`
  exists; head dim 128, 128 latent channels, `txt_in` width = 3 x the text encoder's hidden size, block
  counts from the keys): so a 1 + 1 block, 2-head (hidden 256) transformer is accepted (~40 M parameters);
- the text encoder is recognised by width only at Qwen3-4B (2560) or Qwen3-8B (4096), with the fixed
  36-layer config: so it is a real-size Qwen3-4B (random; linear weights in ComfyUI's fp8 "mixed" layout,
  ~4.4 GB);
- the VAE encoder has fixed widths (ch 128, mult 1,2,4,4, 32 latent channels, batch-norm latent): the real
  config (84 M parameters, bf16).
Writes diffusion_models/klein-check.safetensors, text_encoders/qwen_3_4b-check.safetensors and
vae/flux2-vae-check.safetensors under --models (existing files are kept: written once, reused) and prints
their sizes as JSON. The checker links them under the names the workflows select.
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

from make_omnigen2_files import _random_state, _save, comfyui_for_files  # noqa: E402

FILES = {"diffusion_models": "klein-check.safetensors", "text_encoders": "qwen_3_4b-check.safetensors",
         "vae": "flux2-vae-check.safetensors"}
HIDDEN, TEXT_WIDTH = 256, 2560   # 2 heads x 128; Qwen3-4B


def main(argv=None) -> int:
    args = comfyui_for_files(__doc__, argv)
    import torch
    import comfy.ldm.flux.model as flux
    import comfy.model_detection
    import comfy.ops
    import comfy.text_encoders.llama as llama
    from comfy.ldm.models.autoencoder import AutoencoderKL

    models = Path(args.models)
    report, t0 = {}, time.monotonic()
    ops = comfy.ops.disable_weight_init
    path = models / "diffusion_models" / FILES["diffusion_models"]
    if not path.is_file():
        # The config ComfyUI's detection builds for a file with these keys and shapes.
        meta = lambda *shape: torch.empty(shape, device="meta")   # noqa: E731
        keys = {"double_blocks.0.img_attn.norm.key_norm.scale": meta(128), "img_in.weight": meta(HIDDEN, 128),
                "txt_in.weight": meta(HIDDEN, 3 * TEXT_WIDTH), "double_stream_modulation_img.lin.weight": meta(1),
                "single_blocks.0.linear1.weight": meta(1)}
        config = comfy.model_detection.detect_unet_config(keys, "")
        with torch.device("meta"):
            dit = flux.Flux(**config, dtype=torch.bfloat16, device="meta", operations=ops)
        report["transformer"] = {**_save(_random_state(dit, 1), path), "config": {
            k: config[k] for k in ("hidden_size", "num_heads", "depth", "depth_single_blocks", "context_in_dim")}}
        del dit
    path = models / "text_encoders" / FILES["text_encoders"]
    if not path.is_file():
        with torch.device("meta"):
            te = llama.Qwen3_4B({}, dtype=torch.bfloat16, device="meta", operations=ops)
        report["text_encoder"] = _save(_random_state(te, 2), path)
        del te
    path = models / "vae" / FILES["vae"]
    if not path.is_file():
        dd = {"double_z": True, "z_channels": 32, "resolution": 256, "in_channels": 3, "out_ch": 3, "ch": 128,
              "ch_mult": [1, 2, 4, 4], "num_res_blocks": 2, "attn_resolutions": [], "dropout": 0.0,
              "batch_norm_latent": True}
        with torch.device("meta"):
            vae = AutoencoderKL(ddconfig=dd, embed_dim=32)
        sd = {k: v for k, v in _random_state(vae, 3).items() if not k.startswith("bn.")}
        n = vae.bn.num_features
        sd.update({"bn.running_mean": torch.zeros(n), "bn.running_var": torch.ones(n),
                   "bn.num_batches_tracked": torch.tensor(0, dtype=torch.long)})
        # The VAE's convolutions stay bf16 (only linear layers are stored in fp8); no weight_scale keys.
        sd = {k: v for k, v in sd.items() if not k.endswith(("weight_scale", "comfy_quant"))}
        for k, v in sd.items():
            if v.dtype == torch.float8_e4m3fn:
                sd[k] = v.to(torch.bfloat16) * 0.02 / 448
        report["vae"] = _save(sd, path)
    report["seconds"] = round(time.monotonic() - t0, 1)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
