#!/usr/bin/env python
"""Benchmark of the session store (not a test): append and load times for sessions of
10, 100 and 1,000 turns of 512x512 random RGB images.

    python scripts/bench/bench_store.py [--turns 10 100 1000] [--size 512] [--dir DIR] [--repeats 7]

Columns (milliseconds; loads are medians over --repeats):
  append mean / last10  mean time of one append over the whole session / over its last 10 turns
                        (PNG encode + fsync'd write + one transaction)
  cold load             a new SessionStore (new process state) reading the session: rows only,
                        no image decoded
  cold load+image       the same plus decoding the latest image: what the History Store node
                        does in a fresh ComfyUI process
  warm load             the same store again while the session is unchanged (cached)
  grown load            the same store after another process appended one turn: reads only
                        the new row (the steady state of a long-running ComfyUI server)
  latest image          decoding the latest turn's PNG alone
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # a script, not part of the pack

from respec.store import SessionStore  # noqa: E402


def _median_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def bench(root: Path, turns: int, size: int, repeats: int, rng: np.random.Generator) -> dict:
    store = SessionStore(root)
    sid = f"bench-{turns}"
    store.create(sid, rng.integers(0, 256, (size, size, 3), dtype=np.uint8))
    append_ms = []
    for t in range(1, turns + 1):
        img = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
        start = time.perf_counter()
        store.append(sid, img, f"edit {t}", f"edit {t}, keep everything else", meta={"seed": t})
        append_ms.append((time.perf_counter() - start) * 1000)

    def cold():
        return SessionStore(root).load(sid)

    def cold_with_image():
        return SessionStore(root).load(sid).current.image.array

    def latest_image():
        h = SessionStore(root).load(sid)
        t = time.perf_counter()
        h.current.image.array
        return (time.perf_counter() - t) * 1000

    def grown():
        SessionStore(root).append(sid, rng.integers(0, 256, (size, size, 3), dtype=np.uint8), "elsewhere")
        t = time.perf_counter()
        store.load(sid)
        return (time.perf_counter() - t) * 1000

    store.load(sid)
    assert len(cold()) == turns + 1
    row = {
        "turns": turns,
        "append_mean": statistics.fmean(append_ms),
        "append_last10": statistics.fmean(append_ms[-10:]),
        "cold_load": _median_ms(cold, repeats),
        "cold_load_image": _median_ms(cold_with_image, repeats),
        "warm_load": _median_ms(lambda: store.load(sid), repeats),
        "latest_image": statistics.median(latest_image() for _ in range(repeats)),
    }
    row["grown_load"] = statistics.median(grown() for _ in range(repeats))
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, nargs="+", default=[10, 100, 1000])
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--dir", type=Path, default=None, help="store directory (default: a temporary one, deleted)")
    args = ap.parse_args(argv)
    tmp = None
    root = args.dir
    if root is None:
        tmp = tempfile.mkdtemp(prefix="respec-bench-store-")
        root = Path(tmp)
    rng = np.random.default_rng(0)
    rows = []
    try:
        for n in args.turns:
            rows.append(bench(root, n, args.size, args.repeats, rng))
            print(f"  {n} turns done", file=sys.stderr)
        disk = sum(p.stat().st_size for p in Path(root).rglob("*") if p.is_file()) / 2**20
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    head = ("turns", "append mean", "append last10", "cold load", "cold load+image", "warm load",
            "grown load", "latest image")
    keys = ("append_mean", "append_last10", "cold_load", "cold_load_image", "warm_load", "grown_load",
            "latest_image")
    print(f"\nSession store, {args.size}x{args.size} random RGB, times in ms\n")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        print(f"| {r['turns']} | " + " | ".join(f"{r[k]:.2f}" for k in keys) + " |")
    print(f"\nstore size on disk: {disk:.0f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
