#!/usr/bin/env python
"""Benchmark of the local motion field (not a test): respec.pixels.flow.estimate_flow on a textured
synthetic image warped by a smooth random field (peak 1.5 px), whole images and a region's
neighbourhood, with the accuracy against the known field.

    python scripts/bench/bench_flow.py [--sizes 256 512 1024] [--repeat 3]

CPU = time.process_time of this process (run it with OMP_NUM_THREADS=1 for one core); the
neighbourhood is a 384² box (a revealed region of about 10 % of a 1024² image with its ring).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from scipy import ndimage

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from respec.pixels.flow import estimate_flow  # noqa: E402


def case(side: int, peak: float = 1.5):
    rng = np.random.default_rng(side)
    ref = ndimage.gaussian_filter(rng.random((side, side, 3)).astype(np.float32), (1.5, 1.5, 0))
    ref = (ref - ref.min()) / (ref.max() - ref.min())
    fields = []
    for _ in range(2):
        f = ndimage.gaussian_filter(rng.normal(0, 1, (side, side)), side / 4, mode="wrap")
        fields.append(f / np.abs(f).max() * peak)
    dx, dy = fields
    yy, xx = np.mgrid[0:side, 0:side].astype(np.float64)
    cur = np.stack([ndimage.map_coordinates(ref[..., c], [yy + dy, xx + dx], order=3, mode="nearest")
                    for c in range(3)], axis=2).astype(np.float32)
    return ref, cur, dx, dy


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    print("| image | box | CPU s (median) | wall s (median) | error median / p95 (px) | consistent share |")
    print("|---|---|---|---|---|---|")
    for side in args.sizes:
        ref, cur, dx, dy = case(side)
        boxes = [("whole", None)]
        if side >= 768:
            c = side // 2
            boxes.append(("384² neighbourhood", (c - 192, c + 192, c - 192, c + 192)))
        for name, box in boxes:
            cpu, wall = [], []
            for _ in range(args.repeat):
                t0, w0 = time.process_time(), time.perf_counter()
                flow = estimate_flow(ref, cur, box=box)
                cpu.append(time.process_time() - t0)
                wall.append(time.perf_counter() - w0)
            y0, y1, x0, x1 = flow.box
            err = np.hypot(flow.dx - dx[y0:y1, x0:x1], flow.dy - dy[y0:y1, x0:x1])[8:-8, 8:-8]
            print(f"| {side}² | {name} | {statistics.median(cpu):.3f} | {statistics.median(wall):.3f} | "
                  f"{np.median(err):.3f} / {np.percentile(err, 95):.3f} | {flow.stats['consistent_share']:.3f} |",
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
