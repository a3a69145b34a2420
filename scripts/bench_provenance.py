#!/usr/bin/env python
"""Benchmark of pixel provenance (not a test): time of one change mask (respec/provenance.py) on a
synthetic turn (a textured scene, a rectangle added, a global colour drift and pixel noise) at
several sizes, and how well it finds the rectangle.

    python scripts/bench_provenance.py [--sizes 256 512 1024] [--repeats 5]

Columns: size (square side, px), change mask (median ms over --repeats), IoU of the mask with the
true rectangle.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))            # a script, not part of the pack
sys.path.insert(0, str(ROOT / "tests"))  # the synthetic scenes the tests use

from bench_store import _median_ms  # noqa: E402  (same folder)
from respec.provenance import change_mask  # noqa: E402
from synthetic_scenes import background, draw_rect, drift, iou, rect_mask, u8  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    print("| size | change mask (ms) | IoU with the true change |")
    print("|---|---|---|")
    for s in args.sizes:
        box = (s // 4, s // 3, s // 2, (2 * s) // 3)
        scene = background(0, (s, s))
        prev, cur = u8(scene), u8(drift(draw_rect(scene, box, (0.9, 0.1, 0.1))))
        ms = _median_ms(lambda: change_mask(prev, cur), args.repeats)
        quality = iou(change_mask(prev, cur).mask, rect_mask((s, s), box))
        print(f"| {s}×{s} | {ms:.0f} | {quality:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
