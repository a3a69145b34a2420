#!/usr/bin/env python
"""Conversations that repeat themselves, in the simulated world (not a test): every remove turn of
the `occur_conversation` scenarios (an object added, removed, added again over the occludee and
removed; two objects of one kind, one removed), run as an artist's session runs them: the
restoration flag decided from the request's words (`auto`, so the first removal of a re-added
object is a restoration turn too), the provenance planner and selector, Reveal Composite and the
Drift Guard (the `conversational_provenance_flux2` graph), the sim editor with `--sim-defects`.

    python scripts/bench/bench_conversations.py [--sim-defects default subject-warp] [--size 256]
        [--no-guard] [--limit N]

Per remove turn: the covering turn the plan chose and the true one (the turn that added the
object the request removes, from the scenario's actions), the source I_{k-1}, Reveal applied or
refused (why), and the gain in the revealed region: PSNR of the turn's output against the truth
minus that of the editor's own output, on the pixels the sim says this turn uncovered (eroded
2 px); the truth is the kept history's image just before the object came (the pack's own
I_{k-1}, which is what an exact removal returns). A SIMULATION: it measures the pipeline, not an
editor.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from respec.bench.configs import turn_seed  # noqa: E402
from respec.bench.runner import tell_editor_the_derived_image, tell_editor_the_turn  # noqa: E402
from respec.occur.scenario import load_dataset  # noqa: E402
from respec.controller.provenance_selector import selector_parts  # noqa: E402
from respec.history import History  # noqa: E402
from respec.pixels.masks import erode  # noqa: E402
from respec.post_edit.guard_step import GuardStep  # noqa: E402
from respec.post_edit.reveal_step import RevealStep  # noqa: E402
from respec.sim.drift import sim_editor  # noqa: E402
from respec.turn import TurnParts, TurnSwitches, run_turn  # noqa: E402


def psnr(a: np.ndarray, b: np.ndarray, m: np.ndarray) -> float:
    e = float(((a[m].astype(np.float64) - b[m].astype(np.float64)) ** 2).mean())
    return 100.0 if e == 0 else float(10 * np.log10(255.0 ** 2 / e))


def added_at(scenario, t: int) -> int | None:
    """The turn that added the object turn t removes (the scenario's actions)."""
    label = next((a.label for a in scenario.turns[t - 1].actions if a.do == "remove"), None)
    for j in range(t - 1, 0, -1):
        if any(a.do == "add" and a.label == label for a in scenario.turns[j - 1].actions):
            return j
    return None


def run_scenario(scenario, defects: str, size: int, guard: bool) -> list[dict]:
    editor = sim_editor(defects)
    history = History.start(scenario.load_image(size))
    planner, selector = selector_parts("provenance")
    parts = TurnParts(editor=editor, planner=planner, selector=selector,
                      post_edit=[RevealStep()] + ([GuardStep()] if guard else []))
    out = []
    for t, turn in enumerate(scenario.turns, start=1):
        tell_editor_the_turn(editor, scenario, t)
        before = history
        record, history = run_turn(history, turn.instruction, parts, TurnSwitches(restoration_mode="auto"),
                                   seed=turn_seed(0, scenario.id, t))
        if record.image is not record.edited:
            guarded = any(e.get("step") == "drift_guard" and e.get("applied") for e in record.post_edit)
            tell_editor_the_derived_image(editor, scenario, history.current.image, record.edited,
                                          frame_of=history.turns[-2].image if guarded else None)
        if not any(a.do == "remove" for a in turn.actions):
            continue
        k_true = added_at(scenario, t)
        revealed = erode(editor.truth(scenario, record.edited).revealed, 2)
        truth = before.image(k_true - 1).array
        reveal = next((e for e in record.post_edit if e.get("step") == "reveal_composite"), {})
        located = record.plan.provenance if record.plan is not None else None
        gain = (psnr(history.current.image.array, truth, revealed) - psnr(record.edited.array, truth, revealed)
                if revealed.any() else float("nan"))
        out.append({"scenario": scenario.id, "turn": t, "request": turn.instruction,
                    "restoration": record.is_restoration, "covering": located.turn if located is not None else None, "true": k_true,
                    "source": record.plan.restoration_source_id if record.plan is not None else None,
                    "applied": bool(reveal.get("applied")), "reason": reveal.get("reason", ""),
                    "gain_db": gain, "left": reveal.get("editor_left_fraction")})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sim-defects", nargs="+", default=["default", "subject-warp"])
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--no-guard", action="store_true", help="Reveal Composite without the Drift Guard")
    ap.add_argument("--limit", type=int, default=None)
    args = ap.parse_args(argv)
    scenarios = load_dataset("occur_conversation").scenarios[: args.limit]
    for defects in args.sim_defects:
        rows = [r for s in scenarios for r in run_scenario(s, defects, args.size, not args.no_guard)]
        print(f"\n## --sim-defects {defects} ({'Reveal only' if args.no_guard else 'Reveal + Drift Guard'}, {args.size} px)\n")
        print("| scenario | turn | request | covering (true) | source | reveal | gain dB (revealed) | reason |")
        print("|---|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['scenario']} | {r['turn']} | {r['request']} | {r['covering']} ({r['true']}) | "
                  f"I_{r['source']} | {'applied' if r['applied'] else 'refused'} | {r['gain_db']:+.1f} | "
                  f"{r['reason'][:90]} |", flush=True)
        later = [r for r in rows if r["true"] and r["turn"] > 2 and r["scenario"].endswith("readd")] + \
            [r for r in rows if r["scenario"].endswith("two_objects")]
        gains = [r["gain_db"] for r in rows if r["applied"] and np.isfinite(r["gain_db"])]
        print(f"\nremove turns {len(rows)}; covering turn right {sum(r['covering'] == r['true'] for r in rows)}; "
              f"later removals / named among two right {sum(r['covering'] == r['true'] for r in later)} of {len(later)}; "
              f"applied {sum(r['applied'] for r in rows)}; gain >= +3 dB {sum(g >= 3 for g in gains)} of "
              f"{len(rows)}; applied and worse than the editor {sum(g < 0 for g in gains)}; "
              f"median gain when applied {statistics.median(gains) if gains else float('nan'):+.1f} dB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
