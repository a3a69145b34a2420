#!/usr/bin/env python
"""Benchmark of the pack on very large and very skewed pictures (not a test; issue 34).

    python scripts/bench/bench_big_inputs.py                 # every case below
    python scripts/bench/bench_big_inputs.py guard [--size 8000]
    python scripts/bench/bench_big_inputs.py gallery

guard: the Drift Guard on a size×size turn (a textured scene built at 1000² and upscaled; the edit
adds a red rectangle of an eighth of the picture's side, with a small global colour drift and ±1
pixel noise), once through the node (ComfyUI IMAGE tensors in and out: conversion, guard, outputs)
and once through the core on uint8 arrays (respec.pixels.guard.guard_images). Pictures above
GUARD_WORK_PIXELS (4 MP) are guarded at the working resolution and composed at full size.

gallery: History to Images on a history whose turns have extreme aspect ratios (4000×10 then
10×400, 4000×2 then 2×4000), with each fit (the batch takes the first turn's size).

The guard's outcome says whether it applied, at what working size, the share of the added
square it kept (weight >= 0.5), the mean difference there between its output and the editor's
pixels (the membrane seam's colour correction near the edge), and whether the output away from
the square (a quarter of its side around it) is I_(t-1)'s exactly.

Each case runs in its own process. Per case: wall seconds, CPU seconds of that process
(time.process_time; the machine may be shared), and memory: the process's resident memory
before the call (the inputs built) and its peak during the call, inputs included (VmHWM, reset
before the call through /proc/self/clear_refs; Linux only).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))            # a script, not part of the pack
sys.path.insert(0, str(ROOT / "tests"))  # the synthetic scenes and the pack loader the tests use


def _status_mb(key: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def _measure(call) -> dict:
    """Run call() once: wall and CPU seconds, RSS before and the peak RSS during it (MB)."""
    before = _status_mb("VmRSS")
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")     # reset the peak resident size (VmHWM) to the current one
    except OSError:
        pass
    t0, c0 = time.perf_counter(), time.process_time()
    out = call()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "rss_before_mb": round(before),
            "peak_rss_mb": round(_status_mb("VmHWM")), "result": out}


def _turn(size: int) -> tuple[np.ndarray, np.ndarray]:
    """I_(t-1) and the editor's I_t (uint8 size×size×3), built without a full-size float copy."""
    from PIL import Image
    from synthetic_scenes import background, u8
    base = min(size, 1000)
    prev = u8(background(0, (base, base)))
    if base != size:
        prev = np.asarray(Image.fromarray(prev).resize((size, size), Image.BICUBIC))
    side = size // 8
    y0, x0 = size // 3, size // 2
    cur = prev.copy()
    cur[y0:y0 + side, x0:x0 + side] = (230, 25, 25)
    for c, (gain, bias) in enumerate(((1.02, 2), (0.99, 0), (1.01, 1))):    # the editor's colour drift
        lut = np.clip(np.round(np.arange(256) * gain + bias), 0, 255).astype(np.uint8)
        cur[:, :, c] = lut[cur[:, :, c]]
    rng = np.random.default_rng(1)
    for r in range(0, size, 512):                                             # ±1 pixel noise, in strips
        strip = cur[r:r + 512].astype(np.int16) + rng.integers(-1, 2, cur[r:r + 512].shape, dtype=np.int16)
        cur[r:r + 512] = np.clip(strip, 0, 255)
    return prev, cur


def one_guard(size: int, path: str) -> dict:
    prev, cur = _turn(size)
    if path == "core":
        from respec.post_edit.guard_step import guard_images
        m = _measure(lambda: guard_images(prev, cur))
        res = m.pop("result")
    else:
        import torch
        from conftest import load_pack
        node = load_pack().NODE_CLASS_MAPPINGS["ReSpecDriftGuard"]
        previous = torch.from_numpy(prev[None]).to(torch.float32).div_(255.0)
        edited = torch.from_numpy(cur[None]).to(torch.float32).div_(255.0)
        del prev, cur
        m = _measure(lambda: node.execute(previous, edited, True).result)
        image, mask, _report, value = m.pop("result")
        res = value["result"]
        m["outputs"] = [list(image.shape), list(mask.shape)]
    out = res.image if path == "core" else np.round(image[0].numpy() * 255).astype(np.uint8)
    weight = res.weight if path == "core" else mask[0].numpy()
    prev, cur = _turn(size)
    side, y0, x0 = size // 8, size // 3, size // 2
    edit = (slice(y0, y0 + side), slice(x0, x0 + side))
    kept = weight[edit] >= 0.5
    diff = float(np.abs(out[edit].astype(np.int16) - cur[edit]).mean())
    outside = np.ones(prev.shape[:2], bool)
    outside[y0 - side // 4: y0 + side + side // 4, x0 - side // 4: x0 + side + side // 4] = False
    m.update({"case": f"guard {path}", "size": size, "applied": bool(res.applied),
              "edit_fraction": res.record.get("edit_fraction"), "working_size": res.record.get("working_size"),
              "edit_kept": round(float(kept.mean()), 6), "edit_mean_diff": round(diff, 2),
              "previous_kept_outside": bool(np.array_equal(out[outside], prev[outside]))})
    return m


GALLERY = {"wide-then-tall": [(4000, 10), (10, 400)], "row-then-column": [(4000, 2), (2, 4000)]}


def one_gallery(name: str, fit: str) -> dict:
    from respec.gallery import history_images
    from respec.history import History
    sizes = GALLERY[name]
    rng = np.random.default_rng(0)
    hist = History.start(rng.integers(0, 256, (sizes[0][1], sizes[0][0], 3), dtype=np.uint8))
    for w, h in sizes[1:]:
        hist = hist.append(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), "resize")
    m = _measure(lambda: history_images(hist, 0, -1, fit))
    frames, _log, _idx = m.pop("result")
    m.update({"case": f"History to Images {fit}", "turns": " then ".join(f"{w}×{h}" for w, h in sizes),
              "frames": [list(f.shape) for f in frames]})
    return m


def _run_one(args: list[str]) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"), RESPEC_PROGRESS="0")
    out = subprocess.run([sys.executable, __file__, "--one", *args], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        return {"case": " ".join(args), "error": (out.stderr or out.stdout).strip().splitlines()[-1:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", nargs="?", choices=["guard", "gallery", "all"], default="all")
    ap.add_argument("--size", type=int, default=8000)
    ap.add_argument("--one", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        kind, *rest = args.one
        row = one_guard(int(rest[0]), rest[1]) if kind == "guard" else one_gallery(rest[0], rest[1])
        print(json.dumps(row))
        return 0
    load = os.getloadavg()[0]
    print(f"load average (1 min) {load:.2f}, {os.cpu_count()} CPUs")
    print("| case | input | wall s | CPU s | RSS before MB | peak RSS during MB | outcome |")
    print("|---|---|---|---|---|---|---|")
    cases = []
    if args.what in ("guard", "all"):
        cases += [["guard", str(args.size), "node"], ["guard", str(args.size), "core"]]
    if args.what in ("gallery", "all"):
        cases += [["gallery", name, fit] for name in GALLERY for fit in ("crop", "pad", "stretch")]
    for c in cases:
        r = _run_one(c)
        if "error" in r:
            print(f"| {r['case']} | | | | | | error: {r['error']} |")
            continue
        what = r.get("turns") or f"{r['size']}²"
        outcome = (f"frames {r['frames']}" if "frames" in r else
                   f"applied={r['applied']}, working size {r['working_size']}, edit region {r['edit_fraction']}; "
                   f"added square kept (weight \u2265 0.5) {r['edit_kept']:.2%}, its mean difference to the editor's "
                   f"pixels {r['edit_mean_diff']}/255 (the seam's colour correction); I_(t-1) exact away from it: "
                   f"{r['previous_kept_outside']}")
        print(f"| {r['case']} | {what} | {r['wall_s']} | {r['cpu_s']} | {r['rss_before_mb']} | "
              f"{r['peak_rss_mb']} | {outcome} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
