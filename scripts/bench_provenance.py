#!/usr/bin/env python
"""Benchmark of pixel provenance (not a test): time of one change mask (respec/provenance.py) and
of one Reveal Composite (respec/reveal.py) on a synthetic turn (a textured scene, a rectangle
added, a global colour drift and pixel noise; then the rectangle removed and re-invented as its
surroundings' mean colour) at several sizes, and how well each finds the true region.

    python scripts/bench_provenance.py [--sizes 256 512 1024] [--repeats 5]

Columns: size (square side, px); change mask and reveal composite (median ms over --repeats);
IoU of the change mask / of the revealed region with the true rectangle.
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
from respec.reveal import reveal_composite  # noqa: E402
from synthetic_scenes import background, draw_rect, drift, iou, rect_mask, u8  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    print("| size | change mask (ms) | reveal composite (ms) | change IoU | revealed region IoU |")
    print("|---|---|---|---|---|")
    for s in args.sizes:
        box = (s // 4, s // 3, s // 2, (2 * s) // 3)
        scene = background(0, (s, s))
        prev, cur = u8(scene), u8(drift(draw_rect(scene, box, (0.9, 0.1, 0.1))))
        fill = scene.mean(axis=(0, 1))          # an editor with no evidence: a flat plausible colour
        edited = u8(drift(draw_rect(cur / 255.0, box, fill), seed=2))
        truth = rect_mask((s, s), box)
        covered = change_mask(prev, cur).mask
        ms = _median_ms(lambda: change_mask(prev, cur), args.repeats)
        ms_rev = _median_ms(lambda: reveal_composite(prev, cur, edited, covered, source_id=0), args.repeats)
        res = reveal_composite(prev, cur, edited, covered, source_id=0)
        print(f"| {s}×{s} | {ms:.0f} | {ms_rev:.0f} | {iou(covered, truth):.3f} | "
              f"{iou(res.region, truth):.3f}{'' if res.applied else ' (refused: ' + res.reason + ')'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
