"""The benchmark's cost model: edits and VLM calls per scenario per config, with and without
shared prefixes, and estimated GPU-hours for the full OCCUR-Bench (docs/scale.md quotes it).

    python scripts/bench/cost_model.py                      # the full benchmark (4,400 scenarios, 2-5 turns)
    python scripts/bench/cost_model.py --dataset occur_sample   # the counts of a scenario file, exactly

Counts follow from the configs' rules (respec/bench/runner.py CONFIGS), per scenario of N turns
whose revelation turn is r:
  edits without sharing: 4N (every config edits every turn)
  distinct edits: turn 1 is the same in all four configs; turns 2..r-1 differ only between the
    user-instruction family (baseline = +HRS there) and the rewritten family (+PTI = ReSpec there);
    turn r and later differ in all four: 1 + 2(r-2) + 4(N-r+1)
  VLM calls without sharing: +HRS 1 (turn r only), +PTI N-1, ReSpec N-1
  distinct VLM calls: +PTI and ReSpec ask the same questions up to and including turn r (same
    history, same prompt), so N-1, + 1 for +HRS's turn-r question, which sees another history
    unless r = 2 (then only turn 1, the same in all configs, came before)
GPU time is ESTIMATED from parameter counts and step counts (linear-layer FLOPs 2 x params x
tokens per pass, x 1.25 for attention at these sequence lengths, at an assumed 40 % of the
card's dense bf16 peak); it is not measured. Say so wherever these numbers are quoted.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

# Card peaks (dense bf16, TFLOP/s) and the utilisation assumed for a DiT at ~10k tokens.
CARDS = {"H100 SXM": 989.0, "H200": 989.0}
MFU = 0.40
ATTENTION_FACTOR = 1.25
TOKENS_PER_IMAGE = (1024 // 16) ** 2       # 1024 px, VAE /8 and 2x2 patches: 4,096 tokens
TEXT_TOKENS = 512
EDITORS = {
    # params of the denoiser, steps, transformer passes per step (CFG)
    "FLUX.2 klein base 9B": (9.08e9, 30, 2),
    "OmniGen2": (4.0e9, 50, 3),
}
VLM_PARAMS = 8.77e9          # Qwen3-VL-8B
VLM_DECODE_TOKENS = 300      # a typical restoration JSON answer
VLM_IMAGE_TOKENS = 512 * 512 // (32 * 32)   # images downscaled to 512x512, 32 px per token


def counts(n: int, r: int) -> dict:
    """Edits and VLM calls of one scenario (N turns, revelation at turn r) over the 4 configs."""
    # r >= 2 always: a scenario occludes before it reveals.
    return {"edits": 4 * n, "edits_distinct": 1 + 2 * (r - 2) + 4 * (n - r + 1),
            "vlm": 1 + 2 * (n - 1), "vlm_distinct": (n - 1) + (1 if r > 2 else 0)}


def edit_seconds(params: float, steps: int, passes: int, refs: int, tflops: float) -> float:
    tokens = TOKENS_PER_IMAGE * (1 + refs) + TEXT_TOKENS
    flops = 2 * params * tokens * steps * passes * ATTENTION_FACTOR
    return flops / (tflops * 1e12 * MFU)


def vlm_seconds(images: int, tflops: float, bandwidth_tb_s: float = 4.8) -> float:
    prefill = 2 * VLM_PARAMS * (images * VLM_IMAGE_TOKENS + 400) / (tflops * 1e12 * MFU)
    decode = VLM_DECODE_TOKENS * (VLM_PARAMS * 2) / (bandwidth_tb_s * 1e12)   # weights read once a token
    return prefill + decode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default=None, help="count a scenario file exactly (default: the full benchmark)")
    ap.add_argument("--scenarios", type=int, default=4400)
    a = ap.parse_args()
    if a.dataset:
        from respec.occur.scenario import load_dataset
        ds = load_dataset(a.dataset)
        shapes = [(s.num_turns, s.restoration_turn) for s in ds]
        label = f"{ds.name} ({len(ds)} scenarios, exact)"
    else:
        # OCCUR-Bench: 2- to 5-turn scenarios; revelation on the last turn; equal shares assumed.
        per = a.scenarios // 4
        shapes = [(n, n) for n in (2, 3, 4, 5) for _ in range(per)]
        label = f"full OCCUR-Bench ({len(shapes)} scenarios; 2-5 turns in equal shares ASSUMED, revelation last)"
    tot = {"edits": 0, "edits_distinct": 0, "vlm": 0, "vlm_distinct": 0}
    for n, r in shapes:
        for k, v in counts(n, r).items():
            tot[k] += v
    s = len(shapes)
    print(f"# {label}, 4 configs, one editor")
    print("| | without sharing | with shared prefixes | ratio |")
    print("|---|---|---|---|")
    print(f"| edits | {tot['edits']:,} ({tot['edits'] / s:.2f}/scenario) | {tot['edits_distinct']:,} "
          f"({tot['edits_distinct'] / s:.2f}/scenario) | {tot['edits_distinct'] / tot['edits']:.3f} |")
    print(f"| VLM calls | {tot['vlm']:,} ({tot['vlm'] / s:.2f}/scenario) | {tot['vlm_distinct']:,} "
          f"({tot['vlm_distinct'] / s:.2f}/scenario) | {tot['vlm_distinct'] / tot['vlm']:.3f} |")
    print()
    print("# ESTIMATED GPU-hours for these edits and calls (not measured; see the script's docstring)")
    print("| editor | card | s per edit (1 ref) | editor GPU-h without / with sharing | VLM GPU-h without / with |")
    print("|---|---|---|---|---|")
    for name, (params, steps, passes) in EDITORS.items():
        for card, tflops in CARDS.items():
            sec = edit_seconds(params, steps, passes, 1, tflops)
            bw = 4.8 if card == "H200" else 3.35
            vs = vlm_seconds(4, tflops, bw)
            print(f"| {name} | {card} | {sec:.1f} | {tot['edits'] * sec / 3600:,.0f} / "
                  f"{tot['edits_distinct'] * sec / 3600:,.0f} | {tot['vlm'] * vs / 3600:,.0f} / "
                  f"{tot['vlm_distinct'] * vs / 3600:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
