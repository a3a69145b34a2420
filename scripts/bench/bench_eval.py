#!/usr/bin/env python
"""Benchmark of OCCUR scoring (not a test): seconds per stage to score one scenario, and the share
that is bare model forward passes.

    python scripts/bench/bench_eval.py                 # real architectures, random weights, 5 turns at 512x512
    python scripts/bench/bench_eval.py --tiny          # the tiny test models (checks the script in seconds)
    python scripts/bench/bench_eval.py --json out.json --device cuda

The real architectures are those the paper's evaluation uses - YOLO-World v2 L
(yolov8l-worldv2.yaml), SAM ViT-H, AlexNet-LPIPS, OpenAI CLIP ViT-B/32 (open_clip
ViT-B-32-quickgelu) - built with random weights, so no download is needed and the timings equal
those of the real weights (same shapes, same kernels). YOLO-World's class-head biases are zeroed
so every query yields an accepted box and reaches SAM (with real weights a label can take up to
three detector runs through the fallback chain, or stop before SAM when nothing is found).

The scenario: I_0 (scikit-image's astronaut) and five edited turns I_1..I_5 at the given size; the
occluder is masked on every turn, the new objects introduced so far on every turn (cumulative,
as the benchmark runner asks): 5 occluder masks + 5 new-object masks = 10 detections, 5 SAM
image encodings (each image once), 10 SAM box prompts. Then S_restore / S_preserve / S_TC of
I_5 against I_ref = I_0 (3 LPIPS passes, 6 CLIP crops) plus the whole-image metrics.

Stages (wall seconds, summed over calls):
  text_embed        CLIP text encoder for each distinct query (YOLO-World's class embedding)
  yolo_detect       one YOLO-World predict per query: predictor set-up (ultralytics copies and fuses
                    the network for every new class embedding) + preprocess + forward + NMS
  sam_encode        SAM image encoder per image (resize, normalise, ViT forward)
  sam_decode        SAM prompt encoder + mask decoder + upsampling per box
  score             masked PSNR, LPIPS (3 composites) and CLIP (crops) for both regions + whole image
Forward passes: YOLO's own 'inference' time, SAM encoder/prompt-encoder/decoder module forwards,
LPIPS and CLIP image forwards (timed around the module calls), the CLIP text encoder.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # a script, not part of the pack
os.environ.setdefault("RESPEC_PROGRESS", "0")

OCCLUDER = "bouquet of red flowers"
NEW_PER_TURN = [[], [], ["hat"], ["red scarf"], []]


def scenario(size: int) -> list[np.ndarray]:
    """I_0..I_5: a photo, an occluder added, a tint, a hat, a scarf, the occluder removed."""
    from PIL import Image, ImageDraw
    from skimage import data
    base = Image.fromarray(data.astronaut()).resize((size, size), Image.BICUBIC)
    s = size / 512.0

    def drawn(img, shapes):
        img = img.copy()
        d = ImageDraw.Draw(img)
        for box, colour in shapes:
            d.ellipse([int(v * s) for v in box], fill=colour)
        return img

    i1 = drawn(base, [((180, 300, 330, 470), (200, 30, 60))])                     # the flowers
    i2 = Image.fromarray(np.clip(np.asarray(i1) * np.array([1.0, 0.95, 1.1]), 0, 255).astype(np.uint8))
    i3 = drawn(i2, [((170, 20, 330, 110), (40, 40, 200))])                        # a hat
    i4 = drawn(i3, [((150, 250, 360, 300), (220, 20, 20))])                       # a scarf
    box = [int(v * s) for v in (180, 300, 330, 470)]
    i5 = np.array(i4)
    i5[box[1]:box[3], box[0]:box[2]] = np.asarray(i2)[box[1]:box[3], box[0]:box[2]]  # flowers removed
    return [np.asarray(im) for im in (base, i1, i2, i3, i4)] + [i5]


class ForwardClock:
    """Seconds inside given torch modules' forward calls (pre/post hooks; outermost call only)."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self._start: dict[str, float] = {}

    def watch(self, name: str, module) -> None:
        def pre(_m, _inp):
            self._start[name] = time.perf_counter()

        def post(_m, _inp, _out):
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - self._start.pop(name)
        module.register_forward_pre_hook(pre)
        module.register_forward_hook(post)


def build_real(device: str):
    import torch
    from segment_anything import sam_model_registry
    from respec.eval.masks import Masker
    from respec.eval.metric_models import build_clip, build_lpips
    from respec.eval.metrics import Scorer
    from respec.ultralytics_scope import ultralytics_scope
    torch.manual_seed(0)
    t = {}
    t0 = time.perf_counter()
    clip = build_clip("ViT-B-32-quickgelu", None, device)
    t["CLIP ViT-B/32"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    with ultralytics_scope():
        from ultralytics import YOLOWorld
        yolo = YOLOWorld("yolov8l-worldv2.yaml")
    yolo.model.eval()
    for head in yolo.model.model[-1].cv4:
        head.bias.data.zero_()
    yolo.model.to(device)
    t["YOLO-World v2 L"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    sam = sam_model_registry["vit_h"](checkpoint=None).eval().requires_grad_(False).to(device)
    t["SAM ViT-H"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    lp = build_lpips(None, device)
    t["AlexNet-LPIPS"] = time.perf_counter() - t0
    masker = Masker(yolo, sam, clip, device=device, name="bench")
    scorer = Scorer(lp, clip, device=device, name="bench")
    return masker, scorer, t


def build_tiny():
    from respec.eval.masks import build_tiny_masker
    from respec.eval.metric_models import build_tiny_scorer
    from respec.tiny.eval_models import build_tiny_clip
    t0 = time.perf_counter()
    clip = build_tiny_clip(0)
    masker, scorer = build_tiny_masker(0, clip), build_tiny_scorer(0, clip)
    return masker, scorer, {"tiny models": time.perf_counter() - t0}


def params(module) -> int:
    return sum(p.numel() for p in module.parameters())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=512, help="image side in pixels (default 512)")
    ap.add_argument("--tiny", action="store_true", help="tiny test models instead of the real architectures")
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    ap.add_argument("--json", type=Path, default=None, help="also write the numbers to this JSON file")
    args = ap.parse_args(argv)

    import torch
    torch.set_grad_enabled(False)
    masker, scorer, build_s = build_tiny() if args.tiny else build_real(args.device)
    fwd = ForwardClock()
    fwd.watch("sam_image_encoder", masker.sam.image_encoder)
    fwd.watch("sam_prompt_encoder", masker.sam.prompt_encoder)
    fwd.watch("sam_mask_decoder", masker.sam.mask_decoder)
    fwd.watch("lpips", scorer.lpips_model)

    images = scenario(args.size)
    turns = images[1:]
    sync = (lambda: torch.cuda.synchronize()) if args.device.startswith("cuda") else (lambda: None)

    t0 = time.perf_counter()
    tm = masker.trajectory_masks(turns, OCCLUDER, NEW_PER_TURN)
    sync()
    masks_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    score = scorer.occur_score(turns[-1], images[0], tm)
    sync()
    score_s = time.perf_counter() - t0
    total = masks_s + score_s

    mt = {k: v["seconds"] for k, v in masker.timer.as_dict().items()}
    st = {k: v["seconds"] for k, v in scorer.timer.as_dict().items()}
    calls = {k: v["calls"] for k, v in masker.timer.as_dict().items()}
    forward = {
        "YOLO-World forward": mt.get("yolo_inference", 0.0),
        "SAM image encoder": fwd.seconds.get("sam_image_encoder", 0.0),
        "SAM prompt enc. + mask decoder": fwd.seconds.get("sam_prompt_encoder", 0.0) + fwd.seconds.get("sam_mask_decoder", 0.0),
        "CLIP text encoder": mt.get("text_embed", 0.0),
        "LPIPS": fwd.seconds.get("lpips", 0.0),
        "CLIP image encoder": st.get("clip_forward", 0.0),
    }
    yolo_overhead = mt.get("yolo_detect", 0.0) - sum(mt.get(f"yolo_{p}", 0.0) for p in ("preprocess", "inference", "postprocess"))
    stages = [
        ("text_embed", mt.get("text_embed", 0.0), calls.get("text_embed", 0)),
        ("yolo_detect", mt.get("yolo_detect", 0.0), calls.get("yolo_detect", 0)),
        ("  predictor set-up (copy + fuse)", yolo_overhead, calls.get("yolo_detect", 0)),
        ("  preprocess", mt.get("yolo_preprocess", 0.0), calls.get("yolo_detect", 0)),
        ("  forward", mt.get("yolo_inference", 0.0), calls.get("yolo_detect", 0)),
        ("  NMS / postprocess", mt.get("yolo_postprocess", 0.0), calls.get("yolo_detect", 0)),
        ("sam_encode", mt.get("sam_encode", 0.0), calls.get("sam_encode", 0)),
        ("sam_decode", mt.get("sam_decode", 0.0), calls.get("sam_decode", 0)),
        ("masks total", masks_s, 1),
        ("score: PSNR", st.get("psnr", 0.0), 3),
        ("score: LPIPS", st.get("lpips", 0.0), 3),
        ("score: CLIP", st.get("clip", 0.0), 3),
        ("score total", score_s, 1),
        ("TOTAL", total, 1),
    ]
    fwd_total = sum(forward.values())
    print(f"\nOCCUR scoring of one {len(turns)}-turn scenario at {args.size}x{args.size} on {args.device} "
          f"({'tiny models' if args.tiny else 'real architectures, random weights'}; torch threads "
          f"{torch.get_num_threads()})")
    print("\nmodel build (s): " + ", ".join(f"{k} {v:.1f}" for k, v in build_s.items()))
    if not args.tiny:
        print("parameters: " + ", ".join(f"{n} {params(m) / 1e6:.1f} M" for n, m in
              (("YOLO-World", masker.yolo.model), ("SAM", masker.sam), ("LPIPS", scorer.lpips_model),
               ("CLIP", scorer.clip_model))))
    print(f"\n{'stage':36s} {'seconds':>9s} {'calls':>6s} {'share':>7s}")
    for name, sec, n in stages:
        print(f"{name:36s} {sec:9.2f} {n:6d} {100 * sec / total:6.1f}%")
    print(f"\n{'bare forward passes':36s} {'seconds':>9s} {'':>6s} {'share':>7s}")
    for name, sec in forward.items():
        print(f"{name:36s} {sec:9.2f} {'':6s} {100 * sec / total:6.1f}%")
    print(f"{'all forward passes':36s} {fwd_total:9.2f} {'':6s} {100 * fwd_total / total:6.1f}%")
    print(f"\ncounts: {masker.stats}; peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    print(f"scores (random weights, meaningless): S_restore {score['S_restore']:.3f}, "
          f"S_preserve {score['S_preserve']:.3f}, S_TC {score['S_TC']:.3f}")
    if args.json:
        args.json.write_text(json.dumps({
            "size": args.size, "turns": len(turns), "device": args.device, "tiny": args.tiny,
            "threads": torch.get_num_threads(), "build_seconds": build_s,
            "stages": {n.strip(): {"seconds": s, "calls": c} for n, s, c in stages},
            "forward_seconds": forward, "forward_share": fwd_total / total, "counts": masker.stats,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        }, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
