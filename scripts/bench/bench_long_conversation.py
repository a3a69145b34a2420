#!/usr/bin/env python
"""Benchmark of a long conversation (not a test): what one turn costs the pack at turn 5, 20, 50
and 100 of a 100-turn conversation, with the editor and the controller taken out.

    python scripts/bench/bench_long_conversation.py [--sizes 512 1024] [--turns 100] [--history bounded paper]
        [--removals recent|oldest] [--parts hybrid|provenance]

The conversation: a synthetic textured I_0; most turns add a small object ("add a blue vase12"),
every fifth turn removes one ("remove the vase12", a restoration turn): the object added three
turns before (`--removals recent`, the default), or the oldest one still in the picture
(`--removals oldest`: at turn 50 it was added about 40 turns before, so the covering turn's
evidence spans the whole conversation). The parts (`--parts hybrid`, the default): a trivial editor
(paints the object's square, or copies the reference's pixels back into it: microseconds of numpy,
no model), the hybrid planner (provenance picks the references,
respec/controller/provenance_selector.py) and a recording controller stub (answers a valid JSON
plan at once and records what it was sent). So every turn from 2 on makes one controller call,
and the time left is the pack's own: the prompt and its images, the covering-turn search, the
change mask, the history. `--parts provenance`: what the `conversational_provenance_flux2` graph
runs, no controller at all: the provenance planner and selector, Reveal Composite and the Drift
Guard after the edit.

Columns, at each reported turn t (one run per size and history mode):
- pack ms: the turn's time (`--clock cpu`, the default: this process's CPU time, so a loaded
  machine's other work is left out; `--clock wall`: elapsed) minus the editor's and the stub's own
  time (median of the turns t-2..t+2, so one slow turn does not decide it);
- images / est. tokens: what the controller was sent at turn t (images; Qwen3-VL's 32x32-pixel
  visual tokens of each image plus ~4 characters a text token, system prompt included);
- covering ms: locate_covering_turn(H_{t-1}, P_t), the first call of the turn (median of t-2..t+2);
- restore ms: the pack ms of the restoration turns t - 5, t, t + 5 (median; the report turns are
  multiples of 5).
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import zlib
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))            # a script, not part of the pack

from respec.controller.covering import locate_covering_turn  # noqa: E402
from respec.controller.provenance_selector import HybridPlanner, ProvenancePlanner, ProvenanceSelector  # noqa: E402
from respec.history import History  # noqa: E402
from respec.post_edit.guard_step import GuardStep  # noqa: E402
from respec.post_edit.reveal_step import RevealStep  # noqa: E402
from respec.turn import TurnParts, run_turn  # noqa: E402

REPORT_AT = (5, 20, 50, 100)
CLOCK = time.process_time     # --clock cpu (default): this process's CPU time, the machine's other load left out
NOUNS = ["vase", "lamp", "chair", "clock", "kite", "ball", "book", "cup", "hat", "bell"]


def scene(side: int, seed: int = 0) -> np.ndarray:
    """A textured uint8 I_0 (smooth gradients plus fine noise, so masks have something to fit)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:side, 0:side].astype(np.float32) / side
    img = np.stack([0.3 + 0.4 * x, 0.25 + 0.5 * y, 0.5 + 0.3 * np.sin(6 * x + 3 * y)], axis=2)
    img += rng.normal(0, 0.03, img.shape).astype(np.float32)
    return (np.clip(img, 0, 1) * 255).astype(np.uint8)


def conversation(turns: int, removals: str = "recent") -> list[tuple[str, bool, str]]:
    """[(P_t, is_restoration, object name)]: adds, and every fifth turn a removal of the object
    added three turns before ("recent") or of the oldest one still there ("oldest")."""
    out, live = [], []
    for t in range(1, turns + 1):
        if t % 5 == 0:
            name = out[t - 4][2] if removals == "recent" else live[0]
            live.remove(name)
            out.append((f"remove the {name}", True, name))
        else:
            name = f"{NOUNS[t % len(NOUNS)]}{t}"
            live.append(name)
            out.append((f"add a blue {name}", False, name))
    return out


class TrivialEditor:
    """Paints an added object's square on the current image; on a removal, copies the reference's
    pixels (the first image it gets) back into that square. Its own time is kept in `seconds`."""

    name = "trivial"

    def __init__(self, side: int):
        self.side, self.boxes, self.seconds, self.last_run = side, {}, 0.0, {}

    def edit(self, images, instruction, output_size=None, seed=0, steps=None, guidance=None):
        start = CLOCK()
        cur = np.array(images[-1])
        words = instruction.split()
        name = next((w.strip(",.") for w in words if w.strip(",.") in self.boxes or w.startswith(tuple(NOUNS))), None)
        if instruction.startswith("add") and name:
            rng = np.random.default_rng(zlib.crc32(name.encode()))
            b = self.side // 8
            y, x = (int(v) for v in rng.integers(0, self.side - b, 2))
            self.boxes[name] = (y, x, b)
            cur[y:y + b, x:x + b] = (40, 60, 220)
        elif name in self.boxes:
            y, x, b = self.boxes[name]
            cur[y:y + b, x:x + b] = np.asarray(images[0])[y:y + b, x:x + b]
        self.seconds += CLOCK() - start
        return cur


class RecordingController:
    """A controller backend that answers a valid plan at once and records, per call, the images
    and the estimated tokens it was sent."""

    name = "recording-stub"
    max_pixels = 512 * 512

    def __init__(self):
        self.calls, self.seconds = [], 0.0

    def chat(self, parts, system=None, max_new_tokens=None, json_schema=None):
        start = CLOCK()
        images = [p for p in parts if not isinstance(p, str)]
        text = "\n".join(p for p in parts if isinstance(p, str))
        tokens = (sum(math.ceil(im.size[0] / 32) * math.ceil(im.size[1] / 32) for im in images)
                  + (len(text) + len(system or "")) // 4)
        self.calls.append({"images": len(images), "tokens": tokens})
        request = text.split("[Current Request]", 1)[-1].split(":", 1)[-1].strip().splitlines()[0]
        props = (json_schema or {}).get("properties", {})
        if "restoration_source_id" in props:
            last = props["restoration_source_id"]["maximum"]
            answer = {"reasoning": {}, "identity_anchor_id": last, "restoration_source_id": 0,
                      "restoration_region": "the object's square", "image_ids": [0, last],
                      "synthesis_instruction": f"{request}, revealing what was there"}
        else:
            answer = {"reasoning": {"action_type": "Add", "notes": ""}, "synthesis_instruction": request}
        self.seconds += CLOCK() - start
        return json.dumps(answer)


def run(side: int, turns: int, mode: str, removals: str = "recent", kind: str = "hybrid") -> dict[int, dict]:
    """One conversation; per turn: pack ms, images, tokens, covering ms."""
    editor, stub = TrivialEditor(side), RecordingController()
    history = History.start(scene(side))
    if kind == "provenance":
        parts = TurnParts(editor=editor, planner=ProvenancePlanner(), selector=ProvenanceSelector(),
                          post_edit=[RevealStep(), GuardStep()])
    else:
        parts = TurnParts(editor=editor, backend=stub, planner=HybridPlanner(history_mode=mode),
                          selector=ProvenanceSelector())
    per_turn = {}
    for t, (request, restoration, _) in enumerate(conversation(turns, removals), start=1):
        start = CLOCK()
        locate_covering_turn(history, request)
        covering = CLOCK() - start
        ed0, st0, calls0 = editor.seconds, stub.seconds, len(stub.calls)
        start = CLOCK()
        _, history = run_turn(history, request, parts, is_restoration=restoration, seed=t)
        spent = CLOCK() - start
        pack = spent - (editor.seconds - ed0) - (stub.seconds - st0)
        call = stub.calls[-1] if len(stub.calls) > calls0 else {"images": 0, "tokens": 0}
        per_turn[t] = {"pack_ms": pack * 1000, "covering_ms": covering * 1000, **call}
    return per_turn


def around(per_turn: dict, t: int, key: str) -> float:
    vals = [per_turn[j][key] for j in range(t - 2, t + 3) if j in per_turn]
    return statistics.median(vals)


def restore_ms(per_turn: dict, t: int) -> float:
    """The pack ms of the restoration turns t - 5, t, t + 5 (median; every fifth turn restores)."""
    return statistics.median(per_turn[j]["pack_ms"] for j in (t - 5, t, t + 5) if j > 0 and j in per_turn)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[512, 1024])
    ap.add_argument("--turns", type=int, default=100)
    ap.add_argument("--history", nargs="+", default=["bounded", "paper"],
                    help="the controller's history modes to run (--parts hybrid)")
    ap.add_argument("--removals", choices=["recent", "oldest"], default="recent",
                    help="every fifth turn removes the object added three turns before, or the oldest one still there")
    ap.add_argument("--parts", choices=["hybrid", "provenance"], default="hybrid",
                    help="hybrid planner + controller stub, or the provenance graph's parts (Reveal + Drift Guard)")
    ap.add_argument("--clock", choices=["cpu", "wall"], default="cpu",
                    help="cpu: this process's CPU time (default; run with OMP_NUM_THREADS=1), wall: elapsed time")
    args = ap.parse_args(argv)
    global CLOCK
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    at = [t for t in REPORT_AT if t <= args.turns]
    modes = args.history if args.parts == "hybrid" else ["-"]
    print(f"parts: {args.parts}; removals: {args.removals}; clock: {args.clock}\n")
    print("| size | history | turn | pack ms | images | est. tokens | covering ms | restore ms |")
    print("|---|---|---|---|---|---|---|---|")
    verdicts = []
    for side in args.sizes:
        for mode in modes:
            per_turn = run(side, args.turns, mode if mode != "-" else "bounded", args.removals, args.parts)
            for t in at:
                print(f"| {side}² | {mode} | {t} | {around(per_turn, t, 'pack_ms'):.1f} | {per_turn[t]['images']} | "
                      f"{per_turn[t]['tokens']:,} | {around(per_turn, t, 'covering_ms'):.2f} | "
                      f"{restore_ms(per_turn, t):.1f} |", flush=True)
            p = {t: around(per_turn, t, "pack_ms") for t in at}
            c = {t: around(per_turn, t, "covering_ms") for t in at}
            r = {t: restore_ms(per_turn, t) for t in at}
            if 50 in p:
                verdicts.append(f"{side}² {mode}: pack t50/t5 = {p[50] / p[5]:.2f} (\u2264 1.5), "
                                + (f"t100/t5 = {p[100] / p[5]:.2f} (\u2264 2), " if 100 in p else "")
                                + f"restoration turn t50/t5 = {r[50] / r[5]:.2f} (\u2264 1.5)"
                                + (f", t100/t5 = {r[100] / r[5]:.2f} (\u2264 2)" if 100 in r else "")
                                + f", covering t50/t5 = {c[50] / c[5]:.2f} (\u2264 2), images at t50 = {per_turn[50]['images']}")
    print()
    for v in verdicts:
        print(v)
    return 0


if __name__ == "__main__":
    sys.exit(main())
