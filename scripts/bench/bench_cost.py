#!/usr/bin/env python
"""The cost bar of issue 43 (a benchmark, not a test: the figures depend on the machine).

    OMP_NUM_THREADS=1 python scripts/bench/bench_cost.py --pairs ../shared/realdata/pairs \\
        --chains ../shared/realdata/chains [--repeats 3] [--profile 40]

Three figures, each per call, in CPU seconds (time.process_time: on a shared machine the wall
seconds read the other processes' load too; the wall seconds are given beside them) on one thread:

1. **The Drift Guard, cold**, at 1024²: every real pair of `pairs/index.json` (Step1X-Edit,
   OmniEraser) and `pairs/index_more.json` (Qwen-Image-Edit, FLUX.2 [klein], LongCat-Image-Edit),
   both pictures scaled to 1024×1024 (bilinear, as `bench_drift_guard.py cost` runs its 1024²
   edits), through `guard_images(previous, edited, request=...)` (the node's entry) with the
   analysis cache cleared before every call (AnalysisCache.clear()): the turn's alignment and
   change record are computed inside the call, as on a turn nobody measured before. The least
   disturbed of `--repeats` runs of each pair is taken; median / p90 / max over the pairs, with
   the stage breakdown (each stage's own seconds, summed over its calls within one guard call):

       alignment      alignment_for: the turn's alignment I_{t-1} -> I_t (estimate_alignment)
       change mask    change_mask: C_t given the alignment (colour fit, editor blur, residual, stability)
       inputs         drift_guard step 1 (read_inputs) and step 2 (read_scope: a new background's route)
       frame          step 3 (read_frame: the structure warp and local flow of a re-render)
       tiles          step 4's warp of the editor's image and the drift test near the change (warp_near)
       region         step 4's edit region K (change_kept, edit_region, pose)
       compose        step 5 (compose_edit: the seam)
       output record  the change record of the output (guarded_change) and Reveal's exact paste
       rest           the rest of the call (the images' digests, RGB copies, the request's words)

2. **The verification** (respec.pixels.verify.verify) on each guard result of 1, read as a
   Composite (kept: the guard's output; fallback: the editor's picture; old: I_{t-1}; written: 1 -
   the kept-edit weight): what it adds per call, whatever checks are registered today.

3. **An undo turn** in the pack: `run_turn` with TurnSwitches.history_first on a ConvergeBench
   chain (as scripts/bench/bench_undo_chains.py replays them), the seconds of each removal turn
   history answered (the editor not called), the cache warm as a conversation leaves it (run_turn's
   CPU seconds; run_chain's wall seconds beside them).

`--profile N` prints cProfile's N most expensive functions (own time) over one cold pass of 1.
Reads the folders it is given and copies nothing out of them; writes numbers only.
"""
from __future__ import annotations

import argparse
import contextlib
import cProfile
import importlib
import json
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
SIZE = 1024
# stage -> (module, function name looked up there at call time); each is timed where it is called
STAGES = {
    "alignment": [("respec.pixels.change_mask", "alignment_for")],
    "change mask": [("respec.pixels.change_mask", "change_mask")],
    "inputs": [("respec.pixels.guard.run", "read_inputs"), ("respec.pixels.guard.run", "read_scope")],
    "frame": [("respec.pixels.guard.run", "read_frame")],
    "tiles": [("respec.pixels.guard.run", "warp_near")],
    "region": [("respec.pixels.guard.run", "seed_of"), ("respec.pixels.guard.run", "change_kept"),
               ("respec.pixels.guard.run", "edit_region"), ("respec.pixels.guard.run", "pose")],
    "compose": [("respec.pixels.guard.run", "compose_edit")],
    "output record": [("respec.pixels.guard.pair", "guarded_change"), ("respec.pixels.guard.pair", "with_exact_paste")],
}


class StageClock:
    """Patches each stage's functions with a timer where they are called; seconds per stage."""

    def __init__(self):
        self.seconds: dict[str, float] = {k: 0.0 for k in STAGES}

    def _timed(self, stage: str, fn):
        def call(*a, **k):
            t0 = time.process_time()
            try:
                return fn(*a, **k)
            finally:
                self.seconds[stage] += time.process_time() - t0
        return call

    @contextlib.contextmanager
    def patched(self):
        saved = []
        for stage, targets in STAGES.items():
            for mod_name, fn_name in targets:
                mod = importlib.import_module(mod_name)
                fn = getattr(mod, fn_name)
                saved.append((mod, fn_name, fn))
                setattr(mod, fn_name, self._timed(stage, fn))
        try:
            yield self
        finally:
            for mod, fn_name, fn in reversed(saved):
                setattr(mod, fn_name, fn)

    def reset(self):
        self.seconds = {k: 0.0 for k in STAGES}


def load_pairs(pairs: Path) -> list[dict]:
    """Every real pair (id, previous, edited, request), both scaled to SIZE²."""
    out = []
    idx = json.loads((pairs / "index.json").read_text())
    for it in idx["items"]:
        if "input" in it and "output" in it:
            out.append({"id": it["id"], "a": pairs / it["input"]["path"], "b": pairs / it["output"]["path"],
                        "request": it.get("instruction", "")})
    more = json.loads((pairs / "index_more.json").read_text())
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from drift_guard_editors import request_of      # the requests the editors bench reads
    for st in more["pairs"]:
        out.append({"id": st["id"], "a": pairs / st["folder"] / st["files"][0],
                    "b": pairs / st["folder"] / st["files"][1], "request": request_of(st)})
    for p in out:
        p["a"], p["b"] = (np.asarray(Image.open(f).convert("RGB").resize((SIZE, SIZE), Image.BILINEAR))
                          for f in (p["a"], p["b"]))
    return out


def guard_cold(p: dict, clock: StageClock) -> tuple[float, dict, object]:
    """One cold guard call: seconds, the stage seconds, the result."""
    from respec.pixels.analysis_cache import CACHE
    from respec.post_edit.guard_step import guard_images
    CACHE.clear()
    clock.reset()
    c0, t0 = time.process_time(), time.perf_counter()
    res = guard_images(p["a"], p["b"], request=p["request"])
    return time.process_time() - c0, time.perf_counter() - t0, dict(clock.seconds), res


def composite_of(p: dict, res) -> object:
    """The guard's result as the verification reads it (module docstring, 2)."""
    from respec.pixels.verify.values import Composite
    kept = np.ascontiguousarray(np.asarray(res.image)[..., :3])
    fallback = p["b"] if kept.shape == p["b"].shape else np.asarray(Image.fromarray(p["b"]).resize(
        (kept.shape[1], kept.shape[0]), Image.BILINEAR))
    old = p["a"] if kept.shape == p["a"].shape else np.asarray(Image.fromarray(p["a"]).resize(
        (kept.shape[1], kept.shape[0]), Image.BILINEAR))
    written = (1.0 - np.asarray(res.weight, np.float32)).clip(0.0, 1.0)
    return Composite("guard", kept, fallback, old, written)


def run_guard(pairs: list[dict], repeats: int) -> list[dict]:
    """Measure 1 and 2 on every pair."""
    from respec.pixels.verify.run import verify
    clock = StageClock()
    rows = []
    with clock.patched():
        for p in pairs:
            best = None
            for _ in range(repeats):
                secs, wall, stages, res = guard_cold(p, clock)
                if best is None or secs < best[0]:
                    best = (secs, wall, stages, res)
            secs, wall, stages, res = best
            c = composite_of(p, res)
            t0 = time.process_time()
            verdict = verify(c)
            v_secs = time.process_time() - t0
            stages["rest"] = max(0.0, secs - sum(stages.values()))
            rows.append({"id": p["id"], "seconds": secs, "wall": wall, "stages": stages, "applied": bool(res.applied),
                         "verify_s": v_secs, "verify_passed": bool(verdict.passed),
                         "edit_fraction": res.record.get("edit_fraction"), "why": res.record.get("why", "")})
            print(f"# {p['id']}: {secs:.3f} s ({'applied' if res.applied else 'aside'}); verify {v_secs * 1e3:.1f} ms",
                  file=sys.stderr, flush=True)
    return rows


def undo_turns(chains: Path, only: str) -> list[dict]:
    """Measure 3: the removal turns history answered, with their seconds (bench_undo_chains.run_chain;
    its turns run in chat_replay.replay, whose run_turn is timed here)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bench_undo_chains
    import chat_replay
    index = json.loads((chains / "index.json").read_text())
    rows = []
    plain = chat_replay.run_turn
    cpu: dict[int, float] = {}

    def timed(history, request, *a, **k):       # each turn's CPU seconds, by its index
        c0 = time.process_time()
        try:
            return plain(history, request, *a, **k)
        finally:
            cpu[len(history.turns)] = time.process_time() - c0
    chat_replay.run_turn = timed
    try:
        for c in index["chains"]:
            if c["chain_id"].startswith("convergebench_") and only in c["chain_id"]:
                cpu.clear()
                rows += [{**r, "cpu_s": cpu[r["turn"]]} for r in bench_undo_chains.run_chain(chains, c, True)
                         if r["answered"] and not r["editor_called"]]
    finally:
        chat_replay.run_turn = plain
    return rows


def spread(xs: list[float]) -> str:
    """median / p90 / max, in seconds."""
    if not xs:
        return "n/a"
    return f"{statistics.median(xs):.3f} / {float(np.percentile(xs, 90)):.3f} / {max(xs):.3f}"


def report(rows: list[dict], undo: list[dict] | None) -> None:
    print(f"## The Drift Guard, cold, {SIZE}², one thread: {len(rows)} real pairs "
          f"(OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, load {os.getloadavg()[0]:.2f})\n")
    print("| what | median / p90 / max (s per call) | what the number is |")
    print("|---|---|---|")
    print(f"| guard, cold, total | {spread([r['seconds'] for r in rows])} | guard_images with the analysis cache "
          f"cleared, least disturbed of the repeats; wall {spread([r['wall'] for r in rows])} |")
    for stage in list(STAGES) + ["rest"]:
        print(f"| · {stage} | {spread([r['stages'][stage] for r in rows])} | that stage's own seconds in the call |")
    applied = [r["seconds"] for r in rows if r["applied"]]
    print(f"| guard, cold, applied calls only ({len(applied)}) | {spread(applied)} | the calls that kept I_(t-1) |")
    print(f"| verification | {spread([r['verify_s'] for r in rows])} | verify() on the guard's result as a "
          f"Composite ({sum(r['verify_passed'] for r in rows)} of {len(rows)} passed) |")
    if undo is not None:
        print(f"| undo turn ({len(undo)} turns) | {spread([r['cpu_s'] for r in undo])} | run_turn, history_first, "
              f"a removal answered from history (editor not called); wall {spread([r['seconds'] for r in undo])} |")
    print("\n| pair | s | alignment | change mask | inputs | frame | tiles | region | compose | output record | rest "
          "| applied | verify ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        s = r["stages"]
        print(f"| {r['id']} | {r['seconds']:.3f} | " + " | ".join(f"{s[k]:.3f}" for k in list(STAGES) + ["rest"])
              + f" | {'yes' if r['applied'] else 'aside: ' + r['why']} | {r['verify_s'] * 1e3:.1f} |")


def profile(pairs: list[dict], n: int) -> None:
    """cProfile over one cold pass, the n most expensive functions by own time."""
    from respec.pixels.analysis_cache import CACHE
    from respec.post_edit.guard_step import guard_images
    prof = cProfile.Profile()
    for p in pairs:
        CACHE.clear()
        prof.enable()
        guard_images(p["a"], p["b"], request=p["request"])
        prof.disable()
    st = pstats.Stats(prof, stream=sys.stdout)
    st.sort_stats("tottime").print_stats(n)
    st.sort_stats("cumulative").print_stats(n)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=Path, required=True, help="the realdata/pairs folder (read only)")
    ap.add_argument("--chains", type=Path, default=None, help="the realdata/chains folder (read only): the undo turns")
    ap.add_argument("--only", default="", help="undo: chain ids containing this text only")
    ap.add_argument("--repeats", type=int, default=3, help="cold runs per pair (the least disturbed is taken)")
    ap.add_argument("--profile", type=int, default=0, help="print cProfile's N most expensive functions instead")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows here")
    a = ap.parse_args(argv)
    pairs = load_pairs(a.pairs)
    if a.profile:
        profile(pairs, a.profile)
        return 0
    rows = run_guard(pairs, max(1, a.repeats))
    undo = undo_turns(a.chains, a.only) if a.chains is not None else None
    report(rows, undo)
    if a.json:
        a.json.write_text(json.dumps({"guard": rows, "undo": undo}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
