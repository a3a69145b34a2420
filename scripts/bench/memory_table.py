"""Print docs/memory.md's tables: peak GPU memory per stage at 1024 px, COMPUTED from parameter counts.

    python scripts/bench/memory_table.py

No GPU was used: weights = parameters x bytes per parameter (bf16 2, fp8 1 plus the layers ComfyUI
keeps in bf16); activations are a stated allowance per stage, not a measurement. Replace the
numbers here with measured ones when a GPU run exists (torch.cuda.max_memory_allocated per stage).
"""
from __future__ import annotations

GIB = 2 ** 30

# Parameters (billions) and where the count comes from.
PARAMS = {
    "klein transformer (9B base)": (9.08, "diffusers Flux2Transformer2DModel, counted (docs STACK)"),
    "Qwen3-8B text encoder": (8.19, "15.3 GiB bf16 file / 2 bytes"),
    "klein transformer (4B base)": (3.74, "flux-2-klein-base-4b-fp8.safetensors, 3.81 GB fp8 file / ~1.02 bytes"),
    "Qwen3-4B text encoder": (3.75, "qwen_3_4b.safetensors, 7.49 GB bf16 file / 2 bytes"),
    "FLUX.2 VAE": (0.084, "AutoencoderKLFlux2 (ComfyUI's flux2-vae.safetensors, 168 MB bf16)"),
    "OmniGen2 transformer": (3.97, "ComfyUI 0.8's OmniGen2 module, counted on the meta device"),
    "Qwen2.5-VL-3B (language part)": (3.09, "ComfyUI 0.8's Qwen25_3B text encoder, counted"),
    "Qwen2.5-VL-3B (with vision tower)": (3.75, "the diffusers route's mllm: + 0.67 B vision tower"),
    "FLUX.1 VAE": (0.084, "ae.safetensors"),
    "Qwen3-VL-8B controller": (8.77, "Qwen3VLForConditionalGeneration, counted (docs STACK)"),
    "Qwen3.5-4B controller": (4.34, "qwen3.5_4b_bf16.safetensors (TextGenerate), 8.68 GB bf16 file / 2 bytes"),
    "Qwen-Image-Edit 2511 transformer": (19.03, "qwen_image_edit_2511_bf16.safetensors, 38.05 GB bf16 file / 2 bytes "
                                                  "(ComfyUI's Qwen-Image-Edit 2511 template)"),
    "Qwen2.5-VL-7B text encoder": (7.75, "qwen_2.5_vl_7b_fp8_scaled.safetensors, 8.74 GB fp8 file; 7.75 B parameters "
                                         "(ComfyUI 0.24's Qwen25_7BVLI with its vision tower, as "
                                         "scripts/comfyui/make_qwen_image_files.py writes it)"),
    "Qwen-Image VAE": (0.121, "qwen_image_vae.safetensors, 242 MB bf16 file / 2 bytes"),
    "SAM vit_h": (0.636, "segment-anything, fp32"),
    "SAM3.1": (0.815, "sam3.1_multiplex_fp16.safetensors (ComfyUI's SAM3 template), 1.63 GB fp16 file / 2 bytes"),
    "YOLO-World v2-L + CLIP B/32 + LPIPS": (0.048 + 0.151 + 0.061, "fp32"),
}
# Share of a text encoder ComfyUI's fp8 "mixed" files keep in bf16 (embeddings, norms).
FP8_KEPT_BF16 = {"Qwen3-8B text encoder": 0.08, "Qwen3-4B text encoder": 0.10, "Qwen2.5-VL-3B (language part)": 0.10,
                 # 8.74 GB file / 7.75 B parameters = 1.128 bytes a parameter
                 "Qwen2.5-VL-7B text encoder": 0.128}
# Working memory allowance per stage at 1024 px (assumed, not measured): the transformer with
# 2 references (3 x 4096 image tokens + 512 text tokens), the VAE decode at 1024 px, the VLM
# prefill over 5 history images at its 512x512 budget, SAM's image encoder at 1024 px.
ACT = {"text": 0.5, "transformer": 2.5, "vae": 3.0, "vlm": 1.5, "sam": 3.0, "small": 0.5,
       # Qwen-Image's (Wan 2.1) VAE decode at 1024 px: ComfyUI 0.24's own estimate for it,
       # 2200 x (1024/8)^2 x 64 x 2 bytes (comfy/sd.py memory_used_decode, bf16)
       "qwen vae": 2200 * 128 * 128 * 64 * 2 / GIB,
       # SAM3 at its 1008 px input (ComfyUI resizes every image to it): as SAM's
       "sam3": 3.0}


def gib(name: str, dtype: str) -> float:
    p = PARAMS[name][0] * 1e9
    if dtype == "bf16":
        return p * 2 / GIB
    if dtype == "fp32":
        return p * 4 / GIB
    keep = FP8_KEPT_BF16.get(name, 0.02)
    return p * ((1 - keep) * 1 + keep * 2) / GIB


def editor_rows():
    """(route, editor, dtype, stage -> GiB, all-at-once GiB)."""
    rows = []
    for editor, te, tr, vae, te_diffusers in (
            ("FLUX.2 klein base 9B", "Qwen3-8B text encoder", "klein transformer (9B base)", "FLUX.2 VAE",
             "Qwen3-8B text encoder"),
            ("FLUX.2 klein base 4B", "Qwen3-4B text encoder", "klein transformer (4B base)", "FLUX.2 VAE",
             "Qwen3-4B text encoder"),
            ("OmniGen2", "Qwen2.5-VL-3B (language part)", "OmniGen2 transformer", "FLUX.1 VAE",
             "Qwen2.5-VL-3B (with vision tower)")):
        for route in ("diffusers (pack)", "native (ComfyUI)"):
            for dtype in ("bf16", "fp8"):
                # The pack's loader dequantises fp8 files on load: on the GPU they are bf16.
                held = "bf16" if route.startswith("diffusers") else dtype
                te_name = te_diffusers if route.startswith("diffusers") else te
                w = {"te": gib(te_name, held), "tr": gib(tr, held), "vae": gib(vae, "bf16")}
                stages = {"text encode": w["te"] + ACT["text"],
                          "denoise": w["tr"] + w["vae"] + ACT["transformer"],
                          "VAE decode": w["tr"] + w["vae"] + ACT["vae"]}
                together = w["te"] + w["tr"] + w["vae"] + ACT["vae"]
                rows.append((route, editor, dtype + (" file, bf16 on GPU" if held != dtype else ""),
                             stages, together))
    # Qwen-Image-Edit 2511 runs on ComfyUI's own loaders only (no diffusers route in the pack).
    te, tr, vae = "Qwen2.5-VL-7B text encoder", "Qwen-Image-Edit 2511 transformer", "Qwen-Image VAE"
    for dtype in ("bf16", "fp8"):
        w = {"te": gib(te, dtype), "tr": gib(tr, dtype), "vae": gib(vae, "bf16")}
        stages = {"text encode": w["te"] + ACT["text"], "denoise": w["tr"] + w["vae"] + ACT["transformer"],
                  "VAE decode": w["tr"] + w["vae"] + ACT["qwen vae"]}
        rows.append(("native (ComfyUI)", "Qwen-Image-Edit 2511", dtype, stages,
                     w["te"] + w["tr"] + w["vae"] + ACT["qwen vae"]))
    return rows


def main() -> int:
    print("| route | editor | weights | text encode | denoise | VAE decode | all parts resident |")
    print("|---|---|---|---|---|---|---|")
    for route, editor, dtype, st, together in editor_rows():
        print(f"| {route} | {editor} | {dtype} | {st['text encode']:.1f} | {st['denoise']:.1f} | "
              f"{st['VAE decode']:.1f} | {together:.1f} |")
    print()
    print("| model | weights | peak with its working memory |")
    print("|---|---|---|")
    vlm = "Qwen3-VL-8B controller"
    for label, w in ((f"{vlm} bf16", gib(vlm, "bf16")), (f"{vlm} 8-bit (bitsandbytes)", gib(vlm, "fp8") + 0.4),
                     (f"{vlm} 4-bit (bitsandbytes NF4)", gib(vlm, "bf16") / 4 + 0.9)):
        print(f"| {label} | {w:.1f} | {w + ACT['vlm']:.1f} |")
    tg = "Qwen3.5-4B controller"
    w = gib(tg, "bf16")
    print(f"| {tg} (TextGenerate, bf16) | {w:.1f} | {w + ACT['vlm']:.1f} |")
    sam = gib("SAM vit_h", "fp32")
    small = gib("YOLO-World v2-L + CLIP B/32 + LPIPS", "fp32")
    print(f"| SAM vit_h (fp32) | {sam:.1f} | {sam + ACT['sam']:.1f} |")
    sam3 = gib("SAM3.1", "bf16")
    print(f"| SAM3.1 (ComfyUI's SAM3_Detect, fp16) | {sam3:.1f} | {sam3 + ACT['sam3']:.1f} |")
    print(f"| YOLO-World v2-L + CLIP B/32 + LPIPS (fp32) | {small:.1f} | {small + ACT['small']:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
