#!/usr/bin/env python
"""The cost of the verification's seam and colour checks (issue 43: the whole verification at most
0.1 s per call at 1024²), not a test.

    python scripts/bench/bench_verify_cost.py [--size 1024] [--repeats 20]

A synthetic composite per size: a textured scene, the editor's drifted copy as the fallback, a disk
of `old` written into it (hard-edged, and feathered), and a large one that reaches the frame. Reports
the median CPU seconds (time.process_time: the machine is shared, wall time is not this code's) of
each check and of verify() with both, per composite.
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
from respec.pixels.verify import Composite, verify  # noqa: E402
from respec.pixels.verify.colour import check_colour  # noqa: E402
from respec.pixels.verify.seams import check_seams  # noqa: E402


def composites(size: int) -> dict[str, Composite]:
    """Three composites at size² (disk, feathered disk, large disk)."""
    rng = np.random.default_rng(0)
    scene = ndimage.gaussian_filter(rng.random((size, size, 3)), (2, 2, 0))
    scene = (scene - scene.min()) / (scene.max() - scene.min())
    old = np.clip(np.round(scene * 255), 0, 255).astype(np.uint8)
    fallback = np.clip(np.round((scene * 1.03 + 0.01 + rng.normal(0, 0.004, scene.shape)) * 255), 0, 255).astype(np.uint8)
    yy, xx = np.mgrid[:size, :size]
    out = {}
    for name, r, soft in (("disk", size // 5, 0), ("feathered", size // 5, size / 100), ("large", size // 2, 0)):
        w = ((yy - size // 2) ** 2 + (xx - size // 2) ** 2 < r * r).astype(np.float32)
        if soft:
            w = ndimage.gaussian_filter(w, soft)
        kept = np.clip(np.round(w[..., None] * old + (1 - w[..., None]) * fallback), 0, 255).astype(np.uint8)
        out[name] = Composite("reveal", kept, fallback, old, w)
    return out


def cpu_seconds(fn, c: Composite, repeats: int) -> float:
    """Median CPU seconds of fn(c) over `repeats` calls (after one warm-up)."""
    fn(c)
    times = []
    for _ in range(repeats):
        t0 = time.process_time()
        fn(c)
        times.append(time.process_time() - t0)
    return statistics.median(times)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args(argv)
    checks = (("seam", check_seams), ("colour", check_colour))
    print(f"| composite ({args.size}²) | seam s | colour s | verify() with both s |")
    print("|---|---|---|---|")
    for name, c in composites(args.size).items():
        s = cpu_seconds(check_seams, c, args.repeats)
        k = cpu_seconds(check_colour, c, args.repeats)
        v = cpu_seconds(lambda x: verify(x, checks), c, args.repeats)
        print(f"| {name} | {s:.4f} | {k:.4f} | {v:.4f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
