#!/usr/bin/env python
"""Benchmark of the benchmark pipeline's own overheads (not a test): one run prints

  1. YOLO-World detection time per query, first query vs later ones, against the pure network
     forward (the fused model the predictor runs, on the same letterboxed input);
  2. results-file append time at 10 / 1,000 / 10,000 rows already in the file;
  3. latest-turn cold load of a stored session (rows + the latest image) at 10 / 1,000 turns;
  4. a smoke benchmark (tiny random-weight models): editor calls and VLM calls per scenario
     per config, and the share of the run spent inside model forwards.

    python scripts/bench/bench_pipeline.py [--threads 1] [--limit N] [--skip-smoke] [--yolo YAML@SIZE ...]

Ratios are what to compare across machines; the absolute times depend on the CPU and on what
else runs. Everything is built in code and written to a temporary folder (deleted at the end).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # a script, not part of the pack

QUERIES = ["bouquet", "red umbrella", "coffee cup", "straw hat"]


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def _median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


# ----------------------------------------------------------------------------- 1. YOLO-World

def bench_yolo(yaml: str, imgsz: int, rounds: int) -> dict:
    """Per-query detection time through Masker.detect vs the pure forward of the predictor's model.

    The queries are run round-robin `rounds` times (each call swaps the class embedding, as B.1's
    one-query-at-a-time detection does); right after each call the predictor's network runs once
    more on the same input, so both see the same machine load. Minimums estimate the cost itself
    on a busy machine; the median of the per-call ratios is printed too."""
    import torch
    from skimage import data
    from PIL import Image
    from respec.tiny.eval_models import build_tiny_clip, build_tiny_sam, build_tiny_yolo_world
    from respec.eval.masks import Masker

    image = np.asarray(Image.fromarray(data.astronaut()).resize((imgsz, imgsz)))
    masker = Masker(build_tiny_yolo_world(yaml=yaml), build_tiny_sam(), build_tiny_clip(), device="cpu",
                    imgsz=imgsz, name="bench")
    for q in QUERIES:            # text features are cached per query: keep them out of the timing
        masker.text_features(q)
    detects, forwards, inside = [], [], []
    x = None
    for r in range(rounds):
        for q in QUERIES:
            before = masker.timer.seconds["yolo_inference"]
            t = time.perf_counter()
            masker.detect(image, q, digest=f"bench-{r}-{q}")   # a new digest: never a cached detection
            detects.append(time.perf_counter() - t)
            inside.append(masker.timer.seconds["yolo_inference"] - before)   # ultralytics' own forward timing
            predictor = masker.yolo.predictor
            if x is None:
                x = predictor.preprocess([image[:, :, ::-1].copy()])   # ultralytics feeds BGR arrays
            with torch.inference_mode():
                t = time.perf_counter()
                predictor.model(x)
                forwards.append(time.perf_counter() - t)
    later, later_fwd, later_in = detects[1:], forwards[1:], inside[1:]
    return {"model": yaml, "imgsz": imgsz, "input": list(x.shape), "calls": len(detects), "first": detects[0],
            "later_min": min(later), "later_median": statistics.median(later), "forward_min": min(later_fwd),
            "forward_median": statistics.median(later_fwd),
            "ratio_min": min(later) / min(later_fwd),
            "ratio_median": statistics.median(d / f for d, f in zip(later, later_fwd)),
            "ratio_first": detects[0] / forwards[0],
            "inside_median": statistics.median(later_in),
            "ratio_inside": statistics.median(d / f for d, f in zip(later, later_in))}


# ----------------------------------------------------------------------------- 2. results file

def _fake_row(i: int) -> dict:
    turns = [{"t": t, "stage": "M", "is_restoration": False, "instruction": f"edit {t} of scenario {i}",
              "sent_instruction": f"edit {t} of scenario {i}, keep everything else", "editor_image_ids": [t - 1],
              "vlm_calls": 1, "fallbacks": [], "seed": 1000 + t, "plan": {"is_restoration": False,
              "preservation_target": "the background and the person", "image_ids": [t - 1]},
              "seconds": {"controller": 0.5, "editor": 3.0}} for t in range(1, 6)]
    return {"dataset": "bench", "scenario_id": f"s{i:06d}", "config": "respec", "editor": "flux2",
            "status": "ok", "S_restore": 0.5, "S_preserve": 0.6, "S_TC": 0.55, "turns": turns,
            "seconds": {"controller": 2.5, "editor": 15.0, "masks": 1.0, "score": 0.3}}


def bench_results(sizes: list[int], appends: int) -> list[dict]:
    """Median time of one append to a results file that already holds n rows (read once at open)."""
    from respec.bench.results import ResultsFile, row_key
    from respec.records import json_safe
    out = []
    with tempfile.TemporaryDirectory(prefix="respec-bench-results-") as tmp:
        for n in sizes:
            path = Path(tmp) / f"results-{n}.jsonl"
            with open(path, "w", encoding="utf-8") as f:
                for i in range(n):
                    row = json_safe(_fake_row(i))
                    row["key"] = row_key(row)
                    f.write(json.dumps(row) + "\n")
            t = time.perf_counter()
            results = ResultsFile(path)
            done = results.done_keys()          # what a run does once, at its start
            open_s = time.perf_counter() - t
            assert len(done) == n
            times = []
            for j in range(appends):
                row = _fake_row(n + j)
                t = time.perf_counter()
                assert results.append(row)
                times.append(time.perf_counter() - t)
            out.append({"rows": n, "open": open_s, "append": statistics.median(times)})
    return out


# ----------------------------------------------------------------------------- 3. session store

def bench_store(sizes: list[int], side: int, repeats: int) -> list[dict]:
    """Cold load (a new SessionStore, as a fresh ComfyUI process) of a session's latest turn and its image."""
    from respec.store import SessionStore
    rng = np.random.default_rng(0)
    pool = [rng.integers(0, 256, (side, side, 3), dtype=np.uint8) for _ in range(4)]
    out = []
    with tempfile.TemporaryDirectory(prefix="respec-bench-store-") as tmp:
        for n in sizes:
            store = SessionStore(tmp)
            sid = f"s{n}"
            store.create(sid, pool[0])
            for t in range(1, n - 1):   # images repeat (content-addressed: written once); rows do not
                store.append(sid, pool[t % len(pool)], f"edit {t}", f"edit {t}, keep the rest",
                             meta={"seed": t, "note": "x" * 200})
            store.append(sid, rng.integers(0, 256, (side, side, 3), dtype=np.uint8), "last", "last")

            def cold_latest():
                h = SessionStore(tmp).load(sid)
                return h.current.image.array

            def cold_rows():
                return len(SessionStore(tmp).load(sid))

            cold_latest()
            out.append({"turns": n, "cold_latest_image": _median_time(cold_latest, repeats),
                        "cold_load": _median_time(cold_rows, repeats)})
    return out


# ----------------------------------------------------------------------------- 4. smoke run

class ForwardClock:
    """Wall time spent inside outermost torch.nn.Module calls (any model's forward), per thread."""

    def __init__(self):
        self.seconds = 0.0
        self.calls = 0
        self._depth = threading.local()
        self._original = None

    def __enter__(self):
        import torch
        self._original = original = torch.nn.Module.__call__
        clock = self

        def timed_call(module, *args, **kwargs):
            depth = getattr(clock._depth, "n", 0)
            if depth:
                return original(module, *args, **kwargs)
            clock._depth.n = 1
            t = time.perf_counter()
            try:
                return original(module, *args, **kwargs)
            finally:
                clock.seconds += time.perf_counter() - t
                clock.calls += 1
                clock._depth.n = 0

        torch.nn.Module.__call__ = timed_call
        return self

    def __exit__(self, *exc):
        import torch
        torch.nn.Module.__call__ = self._original


def _count_calls(obj, method: str, counter: dict, name: str) -> None:
    inner = getattr(obj, method)

    def counted(*a, **kw):
        counter[name] += 1
        return inner(*a, **kw)

    setattr(obj, method, counted)


def bench_smoke(limit: int | None, out_dir: Path) -> dict:
    """The smoke benchmark (all four configs) with call counters and the forward clock."""
    from respec.bench.runner import load_models, run_benchmark
    from respec.bench.settings import BenchSettings

    settings = BenchSettings(smoke=True, out=str(out_dir), configs=["baseline", "hrs", "pti", "respec"],
                             size=96, steps=2, limit=limit, save_images=True)
    t = time.perf_counter()
    models = load_models(settings)
    load_s = time.perf_counter() - t
    counts = {"editor": 0, "vlm": 0}
    _count_calls(models.editor, "edit", counts, "editor")
    _count_calls(models.backend, "chat", counts, "vlm")
    per_row: dict[tuple[str, str], tuple[int, int]] = {}
    seen = {"editor": 0, "vlm": 0}

    def on_row(row):
        per_row[(row["scenario_id"], row["config"])] = (counts["editor"] - seen["editor"], counts["vlm"] - seen["vlm"])
        seen.update(counts)

    with ForwardClock() as clock:
        t = time.perf_counter()
        summary = run_benchmark(settings, models=models, on_row=on_row)
        run_s = time.perf_counter() - t
    return {"load": load_s, "run": run_s, "forward": clock.seconds, "forward_calls": clock.calls,
            "rows": len(summary.done), "failed": dict(summary.failed), "per_row": per_row,
            "editor_calls": counts["editor"], "vlm_calls": counts["vlm"],
            "yolo_stats": getattr(models.masker, "stats", {})}


# ----------------------------------------------------------------------------- report

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1: stable on a shared machine)")
    ap.add_argument("--yolo", nargs="+", default=["yolov8l-worldv2.yaml@640", "yolov8n-worldv2.yaml@96"],
                    metavar="YAML@SIZE", help="YOLO-World architectures (random weights) and detection sizes; "
                    "default the paper's L model at ultralytics' 640 px and the smoke run's n model at 96 px")
    ap.add_argument("--repeats", type=int, default=5, help="repeats of each store load")
    ap.add_argument("--rounds", type=int, default=2, help="rounds over the detection queries")
    ap.add_argument("--results-rows", type=int, nargs="+", default=[10, 1000, 10000])
    ap.add_argument("--store-turns", type=int, nargs="+", default=[10, 1000])
    ap.add_argument("--store-side", type=int, default=512)
    ap.add_argument("--limit", type=int, default=None, help="smoke run: only the first N scenarios")
    ap.add_argument("--skip-smoke", action="store_true")
    ap.add_argument("--skip-yolo", action="store_true")
    ap.add_argument("--skip-store", action="store_true")
    ap.add_argument("--skip-results", action="store_true")
    args = ap.parse_args(argv)

    import torch
    torch.set_num_threads(args.threads)
    os.environ.setdefault("RESPEC_HOME", tempfile.mkdtemp(prefix="respec-bench-home-"))
    print(f"torch threads: {torch.get_num_threads()}")

    for spec in ([] if args.skip_yolo else args.yolo):
        yaml, _, size = spec.partition("@")
        y = bench_yolo(yaml, int(size or 640), args.rounds)
        print(f"\n1. YOLO-World detection per query ({y['model']}, random weights, input {y['input']}, "
              f"{y['calls']} queries round-robin)")
        print(f"   first query                      {_ms(y['first'])}   ({y['ratio_first']:.2f}x its forward)")
        print(f"   later queries  min / median      {_ms(y['later_min'])} / {_ms(y['later_median'])}")
        print(f"   pure forward   min / median      {_ms(y['forward_min'])} / {_ms(y['forward_median'])}")
        print(f"   forward inside the call (median) {_ms(y['inside_median'])}   (ultralytics' inference timing)")
        print(f"   later query / forward            {y['ratio_inside']:.2f}x (each call against its own forward, "
              f"median)   {y['ratio_median']:.2f}x (against the next pure forward, median)   "
              f"{y['ratio_min']:.2f}x (minimums)")

    res = [] if args.skip_results else bench_results(args.results_rows, appends=20)
    if res:
        print("\n2. Results file (median of 20 appends; 'open' reads the file once, as a run does at its start)")
    for r in res:
        print(f"   {r['rows']:>6} rows: append {_ms(r['append'])}   open {_ms(r['open'])}")
    if len(res) > 1:
        print(f"   append at {res[-1]['rows']} / at {res[0]['rows']} rows: {res[-1]['append'] / res[0]['append']:.2f}x")

    st = [] if args.skip_store else bench_store(args.store_turns, args.store_side, args.repeats)
    if st:
        print(f"\n3. Session store, cold load of the latest turn ({args.store_side} px images, median of {args.repeats})")
    for r in st:
        print(f"   {r['turns']:>5} turns: latest turn + image {_ms(r['cold_latest_image'])}   "
              f"load alone {_ms(r['cold_load'])}")
    if len(st) > 1:
        print(f"   at {st[-1]['turns']} / at {st[0]['turns']} turns: latest+image "
              f"{st[-1]['cold_latest_image'] / st[0]['cold_latest_image']:.2f}x, load alone "
              f"{st[-1]['cold_load'] / st[0]['cold_load']:.2f}x")

    if not args.skip_smoke:
        out = Path(tempfile.mkdtemp(prefix="respec-bench-smoke-"))
        try:
            sm = bench_smoke(args.limit, out)
        finally:
            shutil.rmtree(out, ignore_errors=True)
        print(f"\n4. Smoke benchmark: {sm['rows']} rows in {sm['run']:.1f} s (models built in {sm['load']:.1f} s)")
        configs = ["baseline", "hrs", "pti", "respec"]
        print("   editor calls / VLM calls per scenario and config:")
        print("   " + f"{'scenario':<34}" + "".join(f"{c:>10}" for c in configs))
        by_scenario = defaultdict(dict)
        for (sid, c), v in sm["per_row"].items():
            by_scenario[sid][c] = v
        for sid, cs in by_scenario.items():
            print("   " + f"{sid:<34}" + "".join(f"{'%d/%d' % cs[c] if c in cs else '-':>10}" for c in configs))
        tot = {c: [sum(v[c][i] for v in by_scenario.values() if c in v) for i in (0, 1)] for c in configs}
        print("   " + f"{'total':<34}" + "".join(f"{'%d/%d' % tuple(tot[c]):>10}" for c in configs))
        print(f"   editor calls {sm['editor_calls']}, VLM calls {sm['vlm_calls']}; masker {sm['yolo_stats']}")
        print(f"   time in model forwards: {sm['forward']:.1f} s of {sm['run']:.1f} s = "
              f"{100 * sm['forward'] / sm['run']:.1f} % ({sm['forward_calls']} outermost module calls)")
        if sm["failed"]:
            print(f"   FAILED: {sm['failed']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
