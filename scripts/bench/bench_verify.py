#!/usr/bin/env python
"""A composite that proves itself (issue 43), on the real chains (not a test): every chain in
../shared/realdata/chains replayed through the conversational turn, and per turn which step changed
the editor's picture (the undo from history, Reveal Composite, the Drift Guard) and what the
verification said (respec/pixels/verify: passed, mended, or the check that made a step step aside).

    python scripts/bench/bench_verify.py --chains ../shared/realdata/chains [--out DIR] [--only TEXT]
    python scripts/bench/bench_verify.py --cost          # the verification's cost at 1024² (synthetic)

Each turn the editor's recorded output, scaled to I_{t-1}'s size, is returned by a replay editor (as
scripts/bench/bench_undo_chains.py does), with the provenance planner and selector, Reveal Composite
and the Drift Guard; history first off and on. It reads the folder it is given and never copies from
it; --out writes each turn's kept picture and the editor's (PNG) there, for looking at them (keep that
folder out of git). RESPEC_ROOT=/path/to/checkout runs another checkout's pack (main, for the count
before the verification). The issue's bar: on the ConvergeBench chains the pack still changes the
editor's picture on at least 90 % of the turns where it does so without the verification.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, os.environ.get("RESPEC_ROOT") or str(Path(__file__).resolve().parents[2]))
from respec.controller.provenance_selector import selector_parts  # noqa: E402
from respec.history import History  # noqa: E402
from respec.post_edit.guard_step import GuardStep  # noqa: E402
from respec.post_edit.reveal_step import RevealStep  # noqa: E402
from respec.post_edit.undo_step import UndoStep  # noqa: E402
from respec.turn import TurnParts, TurnSwitches, run_turn  # noqa: E402

STEPS = {"history_undo": "undo", "reveal_composite": "reveal", "drift_guard": "guard"}


class ReplayEditor:
    """Returns turn t's recorded output, scaled to the current image's size."""

    name = "replay"

    def __init__(self, outputs: list[Image.Image]):
        self.outputs, self.t = outputs, 0

    def edit(self, images, instruction, *, output_size, seed, steps=None, guidance=None):
        out = self.outputs[self.t - 1]
        return out if out.size == tuple(output_size) else out.resize(tuple(output_size), Image.BICUBIC)


def step_rows(record) -> list[dict]:
    """What each post-edit step did: its short name, applied, the verification's word, the reason."""
    rows = []
    for e in record.post_edit:
        name = STEPS.get(e.get("step"))
        if name is None:
            continue
        v = e.get("verify") or {}
        word = ("skipped" if v.get("skipped") else "mended" if v.get("mended") else
                "passed" if v.get("passed") else "failed" if v.get("failed") else "")
        if "failed its verification" in str(e.get("reason", "")):
            word = "failed"
        rows.append({"step": name, "applied": bool(e.get("applied")), "verify": word,
                     "reason": str(e.get("reason", ""))[:220], "seconds": v.get("seconds")})
    return rows


def run_chain(folder: Path, chain: dict, history_first: bool, out: Path | None) -> list[dict]:
    """Replay one chain; a row per turn."""
    turns = chain["turns"]
    i0 = Image.open(folder / turns[0]["file"]).convert("RGB")
    outputs = [Image.open(folder / t["file"]).convert("RGB") for t in turns[1:]]
    editor = ReplayEditor(outputs)
    planner, selector = selector_parts("provenance")
    parts = TurnParts(editor=editor, planner=planner, selector=selector, post_edit=[RevealStep(), GuardStep()],
                      undo=UndoStep())
    h = History.start(np.asarray(i0))
    rows = []
    for t, turn in enumerate(turns[1:], start=1):
        editor.t = t
        start = time.perf_counter()
        record, h = run_turn(h, turn["instruction"], parts,
                             TurnSwitches(restoration_mode="auto", history_first=history_first), seed=t)
        steps = step_rows(record)
        kept = h.current.image.array[..., :3]
        own = np.asarray(editor.edit(None, "", output_size=(kept.shape[1], kept.shape[0]), seed=0))
        if out is not None:
            tag = f"{chain['chain_id']}_t{t}_{'hf' if history_first else 'off'}"
            Image.fromarray(np.ascontiguousarray(kept)).save(out / f"{tag}_kept.png")
            Image.fromarray(own).save(out / f"{tag}_editor.png")
        rows.append({"chain": chain["chain_id"], "turn": t, "history_first": history_first,
                     "changed": any(s["applied"] for s in steps), "steps": steps,
                     "differs_px": int(np.any(kept != own, axis=-1).sum()), "seconds": time.perf_counter() - start})
    return rows


def editor_of(chain_id: str) -> str:
    """The editor a chain's id names."""
    for key, name in (("kontext", "Kontext"), ("gemini", "Gemini"), ("mtc_", "MTC"), ("nano", "Nano Banana")):
        if key in chain_id:
            return name
    return "other"


def report(rows: list[dict]) -> None:
    """The per-turn table of the turns a step changed or a verification spoke on, and the totals."""
    print("| chain | turn | history first | steps (applied / aside; verification) |")
    print("|---|---|---|---|")
    for r in rows:
        said = [s for s in r["steps"] if s["verify"] or s["applied"]]
        if not said:
            continue
        words = "; ".join(f"{s['step']}:{'applied' if s['applied'] else 'aside'}"
                          f"{' (' + s['verify'] + ')' if s['verify'] else ''}"
                          f"{' ' + s['reason'][:150] if s['verify'] in ('failed', 'mended') else ''}" for s in said)
        print(f"| {r['chain'].replace('convergebench_', '')} | {r['turn']} | {'on' if r['history_first'] else 'off'} | {words} |")
    print("\n| editor | history first | turns | changed by a step | verification failed (stepped aside) | mended | "
          "median verify s |")
    print("|---|---|---|---|---|---|---|")
    for hf in (False, True):
        for ed in ("Kontext", "Gemini", "MTC", "Nano Banana"):
            sub = [r for r in rows if r["history_first"] == hf and editor_of(r["chain"]) == ed]
            if not sub:
                continue
            steps = [s for r in sub for s in r["steps"]]
            secs = [s["seconds"] for s in steps if s["seconds"] is not None]
            print(f"| {ed} | {'on' if hf else 'off'} | {len(sub)} | {sum(r['changed'] for r in sub)} | "
                  f"{sum(s['verify'] == 'failed' for s in steps)} | {sum(s['verify'] == 'mended' for s in steps)} | "
                  f"{statistics.median(secs) if secs else float('nan'):.3f} |")


def cost(size: int = 1024, repeats: int = 7) -> None:
    """The verification's cost per call at size² on a synthetic guard result (a disc edited, its rim
    left: the mend runs, so the checks run twice) and on a clean one. Wall and CPU seconds (the CPU
    time is what a shared machine's load does not inflate)."""
    from respec.pixels.verify import Composite, verify
    rng = np.random.default_rng(0)
    old = (rng.random((size, size, 3)) * 40 + 100).astype(np.uint8)
    yy, xx = np.mgrid[:size, :size]
    disc = (yy - size // 2) ** 2 + (xx - size // 2) ** 2 < (size // 5) ** 2
    rim = (yy - size // 2) ** 2 + (xx - size // 2) ** 2 < (size // 5 + 6) ** 2
    fb = old.copy()
    fb[disc] = (200, 30, 30)
    w = np.where(disc, 0.0, 1.0).astype(np.float32)
    with_rim = old.copy()
    with_rim[rim & ~disc] = (20, 200, 20)
    for name, o in (("clean", old), ("a rim left (mended)", with_rim)):
        kept = np.where(w[..., None] > 0.5, o, fb).astype(np.uint8)
        secs, cpu = [], []
        for _ in range(repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            v = verify(Composite("guard", kept, fb, o, w))
            secs.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        print(f"{size}², {name}: passed {v.passed}, mended {v.mended}; wall median {statistics.median(secs):.3f} s "
              f"(min {min(secs):.3f}), CPU median {statistics.median(cpu):.3f} s (min {min(cpu):.3f}) over {repeats}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chains", type=Path, default=None, help="the realdata/chains folder (read only)")
    ap.add_argument("--only", default="", help="chain ids containing this text only")
    ap.add_argument("--out", type=Path, default=None, help="write the kept and editor's pictures here (outside git)")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows here")
    ap.add_argument("--history-first", choices=("off", "on", "both"), default="both")
    ap.add_argument("--cost", action="store_true", help="measure the verification's cost at 1024² and stop")
    args = ap.parse_args(argv)
    if args.cost:
        cost()
        return 0
    if args.chains is None:
        ap.error("--chains is required (or --cost)")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
    index = json.loads((args.chains / "index.json").read_text())
    chains = [c for c in index["chains"] if args.only in c["chain_id"]]
    modes = {"off": (False,), "on": (True,), "both": (False, True)}[args.history_first]
    rows = []
    for c in chains:
        for hf in modes:
            rows += run_chain(args.chains, c, hf, args.out)
        print(f"# {c['chain_id']}: done", file=sys.stderr, flush=True)
    report(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
