#!/usr/bin/env python
"""Benchmark of pixel provenance (not a test): the cost of one change mask (respec/pixels/change_mask.py)
and of one restoration turn (Reveal Composite with its alignment, C_t and paste, then the
append's change record) on a synthetic turn (a textured scene, a rectangle added, a global
colour drift and pixel noise; then the rectangle removed and re-invented as its surroundings'
mean colour), at several sizes, optionally with the editor zooming out on every call.

    python scripts/bench/bench_provenance.py [--sizes 256 512 1024] [--repeats 5]
    python scripts/bench/bench_provenance.py --turn [--sizes 1024 2048 8000] [--zoom 1.0]

Without --turn: size; change mask and reveal composite (median ms over --repeats); IoU of the
change mask / of the revealed region with the true rectangle.

With --turn each size runs in its own process (a clean peak memory): per stage the wall seconds
and the CPU seconds of this process (time.process_time; the machine may be shared, CPU time is
what the turn itself costs), the total against a 30 s edit, and the process's peak resident
memory (resource.getrusage: history building included) and the peak of what the turn itself
allocated (tracemalloc, numpy's arrays included). Stages: `alignment` (estimate_alignment, once per turn),
`reveal` (C_t once, the region, the checks, the paste), `append` (History Append's change record
of the output: reused from the reveal, not computed again). Sizes above 4 MP are analysed at the
working resolution (respec.pixels.work_images.WORK_PIXELS; the peak allocation comes from a second,
traced run of the same turn); the 8000² scene is built at 1000² and
upscaled (the cost does not depend on the content's detail).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))            # a script, not part of the pack
sys.path.insert(0, str(ROOT / "tests"))  # the synthetic scenes the tests use

from bench_store import _median_ms  # noqa: E402  (same folder)
from respec.history import CHANGE, History  # noqa: E402
from respec.pixels.alignment import Alignment, warp  # noqa: E402
from respec.pixels import alignment  # noqa: E402
from respec.pixels.analysis_cache import CACHE  # noqa: E402
from respec.pixels.masks import history_size  # noqa: E402
from respec.pixels.change_mask import change_for, change_mask  # noqa: E402
from respec.pixels.reveal import reveal_composite, reveal_for  # noqa: E402
from synthetic_scenes import background, draw_rect, drift, iou, rect_mask, u8  # noqa: E402

EDIT_SECONDS = 30.0


def masks_table(args) -> None:
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


def _scene(s: int) -> np.ndarray:
    """uint8 s×s scene (built at <= 1024 and upscaled above)."""
    base = min(s, 1024)
    img = u8(background(0, (base, base)))
    if base != s:
        img = np.asarray(Image.fromarray(img).resize((s, s), Image.BICUBIC))
    return img


def _call(img: np.ndarray, zoom: float, seed: int) -> np.ndarray:
    """One editor call's drift on a uint8 image: a per-channel gain (a LUT), ±2 noise, a zoom-out."""
    rng = np.random.default_rng(seed)
    lut = [np.clip(np.round(np.arange(256) * g + b), 0, 255).astype(np.uint8)
           for g, b in ((1.02, 2), (0.99, -1), (1.01, 1))]
    out = np.stack([lut[c][img[:, :, c]] for c in range(3)], axis=2)
    n = rng.integers(-2, 3, size=out.shape[:2], dtype=np.int16)
    out = np.clip(out.astype(np.int16) + n[..., None], 0, 255).astype(np.uint8)
    if zoom:
        out = warp(out, Alignment(0.0, 0.0, 1.0 - zoom / 100.0))
    return out


def _put(img, box, colour):
    out = img.copy()
    y0, x0, y1, x1 = box
    out[y0:y1, x0:x1] = colour
    return out


def one_turn(s: int, zoom: float, trace: bool = False) -> dict:
    """The restoration turn's stages at size s (this process)."""
    box = (s // 4, s // 3, s // 2, (2 * s) // 3)
    other = (int(s * 0.8), s // 10, int(s * 0.88), s // 5)
    scene = _scene(s)
    h = History.start(scene)
    cur = scene
    for t, (b, col, text) in enumerate(((box, (230, 25, 25), "add a red board"),
                                        (other, (25, 50, 200), "add a blue box")), 1):
        cur = _call(_put(cur, b, col), zoom, t)
        tm = change_for(h, cur)
        h = h.append(cur, text, meta={"alignment": tm.info["alignment"]}, masks={CHANGE: tm})
    nxt = _call(cur, zoom, 3)
    y0, x0, y1, x1 = box
    grown = nxt[max(0, y0 - 8):y1 + 8, max(0, x0 - 8):x1 + 8].reshape(-1, 3).astype(np.float64)
    inner = nxt[y0:y1, x0:x1].reshape(-1, 3).astype(np.float64)
    ring = (grown.sum(axis=0) - inner.sum(axis=0)) / (len(grown) - len(inner))   # the mean around the board
    edited = _put(nxt, box, np.round(ring).astype(np.uint8))
    from respec.history import StoredImage
    prev_img, ed_img = h.current.image, StoredImage(edited)
    CACHE.changes.clear(), CACHE.alignments.clear()
    out = {"size": s, "zoom": zoom}

    def stage(name, fn):
        w, c = time.perf_counter(), time.process_time()
        r = fn()
        out[name] = (time.perf_counter() - w, time.process_time() - c)
        return r
    if trace:
        tracemalloc.start()
    stage("alignment", lambda: alignment.alignment_for(prev_img, ed_img, history_size(h)))
    res = stage("reveal", lambda: reveal_for(h, ed_img, covering_turn=1))
    stage("append", lambda: change_for(h, res.image))
    if trace:
        out["turn_peak_mb"] = tracemalloc.get_traced_memory()[1] / 2 ** 20
        tracemalloc.stop()
    out["applied"] = bool(res.applied)
    out["reason"] = res.reason
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    return out


def turn_table(args) -> None:
    rows = []
    for s in args.sizes:
        cmd = [sys.executable, __file__, "--one", str(s), "--zoom", str(args.zoom)]
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
        if p.returncode != 0:
            print(f"size {s} failed:\n{p.stderr[-2000:]}")
            continue
        row = json.loads(p.stdout.strip().splitlines()[-1])
        # the turn's own peak allocation from a second, traced run (tracemalloc slows the timed one)
        p = subprocess.run(cmd + ["--trace"], capture_output=True, text=True, env=env, timeout=1800)
        row["turn_peak_mb"] = json.loads(p.stdout.strip().splitlines()[-1])["turn_peak_mb"] if p.returncode == 0 else float("nan")
        rows.append(row)
    print(f"load average before: {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} CPUs; zoom-out per call {args.zoom} %\n")
    print("| size | alignment wall / CPU s | reveal (C_t, checks, paste) wall / CPU s | append's change record wall / CPU s "
          "| turn total wall / CPU s | CPU share of a 30 s edit | turn's peak allocation (MB) | process peak RSS (MB) | reveal |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        tw = sum(r[k][0] for k in ("alignment", "reveal", "append"))
        tc = sum(r[k][1] for k in ("alignment", "reveal", "append"))
        cells = " | ".join(f"{r[k][0]:.2f} / {r[k][1]:.2f}" for k in ("alignment", "reveal", "append"))
        print(f"| {r['size']}² | {cells} | {tw:.2f} / {tc:.2f} | {100 * tc / EDIT_SECONDS:.1f} % | "
              f"{r['turn_peak_mb']:.0f} | {r['peak_rss_mb']:.0f} | {'applied' if r['applied'] else 'refused: ' + r['reason'][:60]} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=None)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--turn", action="store_true", help="time one restoration turn per size (own process each)")
    ap.add_argument("--zoom", type=float, default=0.0, help="with --turn: the editor zooms out this %% per call")
    ap.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--trace", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one is not None:
        print(json.dumps(one_turn(args.one, args.zoom, args.trace)))
        return 0
    if args.turn:
        args.sizes = args.sizes or [1024, 2048, 8000]
        turn_table(args)
    else:
        args.sizes = args.sizes or [256, 512, 1024]
        masks_table(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
