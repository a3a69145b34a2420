"""Controller demo with a tiny random Qwen3-VL (no weights needed, CPU, ~10 s).

1. Builds a 3-turn history from scikit-image's astronaut photo:
   I_0 original, I_1 "add a cardboard box in front of the chest" (a box is drawn),
   I_2 "make the background blue" (a tint), then plans turn 3 twice:
   a restoration turn ("remove the cardboard box") and a mid-turn ("add a red balloon ...").
   Each turn runs through respec.turn.run_turn with a stand-in editor that keeps the image;
   its plan is printed with the image ids the editor got and the instruction it was sent. With random weights the VLM's words are noise: what the demo shows is the path -
   prompt -> one call -> C.2 parse -> C.3 fallbacks -> selected images.
   It runs the restoration turn twice: unconstrained (noise, so the parse-failure fallback
   fires) and JSON-constrained with xgrammar (a parseable answer, ids read from it).
2. Counts VLM calls for 2-, 3-, 4- and 5-turn scenarios (restoration on the last turn), with
   and without skipping non-restoration turns.

Run from the pack's root:  python scripts/dev/demo_controller.py
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("RESPEC_PROGRESS", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # script only: run from a checkout

import numpy as np  # noqa: E402
from skimage import data  # noqa: E402

from respec.controller import count_vlm_calls, load_backend, rewrite_instruction, select_references  # noqa: E402
from respec.controller.backends.transformers_vlm import xgrammar_available  # noqa: E402
from respec.history import History  # noqa: E402
from respec.tiny.vlm import build_tiny_qwen3vl  # noqa: E402
from respec.turn import TurnParts, TurnSwitches, run_turn  # noqa: E402


class CountingVLM:
    """Counts the calls that reach the real backend."""

    def __init__(self, inner):
        self.inner, self.name, self.calls = inner, inner.name, 0
        self.max_pixels, self.max_new_tokens = inner.max_pixels, inner.max_new_tokens

    def chat(self, parts, **kw):
        self.calls += 1
        return self.inner.chat(parts, **kw)


class KeepImage:
    """A stand-in editor: returns its last input image unchanged (this demo is about the controller)."""
    name, last_run = "keep", {}

    def edit(self, images, instruction, *, output_size, seed, steps=None, guidance=None):
        return images[-1].resize(output_size)


def three_turn_history() -> History:
    img = np.ascontiguousarray(data.astronaut()[::4, ::4])            # 128x128 RGB
    box = img.copy()
    box[70:118, 34:94] = (150, 110, 70)                                  # the cardboard box
    blue = box.copy()
    bg = blue.sum(axis=2) > 600                                          # brightish pixels ~ background
    blue[bg] = (blue[bg] * np.array([0.6, 0.7, 1.0])).astype(np.uint8)
    h = History.start(img)
    h = h.append(box, "add a large cardboard box in front of the astronaut's chest")
    h = h.append(blue, "make the background blue")
    return h


def show(title: str, history: History, record, seconds: float) -> None:
    print(f"\n=== {title} ===")
    plan = record.plan
    d = plan.to_dict()
    d["raw_text"] = d["raw_text"][:160] + ("..." if len(d["raw_text"]) > 160 else "")
    d["seconds"] = round(d["seconds"], 3)
    d["controller"] = "qwen3-vl:<tiny random folder>"
    print(json.dumps(d, indent=2, ensure_ascii=True, default=str))
    print(f"the turn (HRS on, PTI on) gave the editor image ids {record.editor_image_ids} "
          f"(fallbacks {record.fallbacks}) and sent {record.sent_instruction!r}")
    # The ablations' answers for the same plan (no second controller call).
    off = select_references(history, plan, use_history_reference=False)
    print(f"with HRS off the editor would get image ids {off.ids}; with PTI off it would be sent "
          f"{rewrite_instruction(plan, False)!r}")
    print(f"(turn ran in {seconds:.2f} s)")


def scenario_calls(n_turns: int, backend, skip: bool) -> tuple[int, int]:
    h = History.start(np.ascontiguousarray(data.astronaut()[::8, ::8]))
    counter = CountingVLM(backend)
    for t in range(1, n_turns + 1):
        instr = "remove the cardboard box" if t == n_turns else (
            "add a cardboard box in front of the chest" if t == 1 else f"make the sky shade {t} of blue")
        _, h = run_turn(h, instr, TurnParts(editor=KeepImage(), backend=counter),
                        TurnSwitches(skip_non_restoration=skip))
    return counter.calls, count_vlm_calls(h)


def _say_decision(request: str, record) -> None:
    print(f"\nauto restoration decision for {request!r}: {record.is_restoration} "
          f"({record.plan.meta['restoration_reason']})")


def main() -> None:
    start = time.perf_counter()
    folder = build_tiny_qwen3vl(Path(tempfile.mkdtemp(prefix="respec-demo-")) / "tiny-qwen3-vl")
    plain = load_backend("qwen3-vl", str(folder), device="cpu", json_constrained=False, max_new_tokens=48)
    history = three_turn_history()
    print(f"history: {len(history)} images (I_0..I_{len(history) - 1}), next turn t = {history.next_turn}")
    for k, instr in enumerate(history.instructions, start=1):
        print(f"  turn {k}: {instr}")

    request = "remove the cardboard box"
    t0 = time.perf_counter()
    record, _ = run_turn(history, request, TurnParts(editor=KeepImage(), backend=plain))
    _say_decision(request, record)
    show("restoration turn, unconstrained decoding", history, record, time.perf_counter() - t0)

    if xgrammar_available():
        constrained = load_backend("qwen3-vl", str(folder), device="cpu", json_constrained=True,
                                   json_max_string=4, max_new_tokens=500)
        t0 = time.perf_counter()
        record, _ = run_turn(history, request, TurnParts(editor=KeepImage(), backend=constrained))
        show("restoration turn, JSON-constrained decoding (xgrammar)", history, record, time.perf_counter() - t0)
    else:
        print("\n(xgrammar not installed: constrained run skipped)")

    mid = "add a red balloon in the upper left sky"
    t0 = time.perf_counter()
    record, _ = run_turn(history, mid, TurnParts(editor=KeepImage(), backend=plain))
    _say_decision(mid, record)
    show("mid-turn (non-restoration), unconstrained decoding", history, record, time.perf_counter() - t0)

    print("\n=== VLM calls per scenario (restoration on the last turn) ===")
    print("turns | calls (every turn) | calls (skip non-restoration) | paper: T-1")
    for n in (2, 3, 4, 5):
        every, every_meta = scenario_calls(n, plain, skip=False)
        skipped, skipped_meta = scenario_calls(n, plain, skip=True)
        assert every == every_meta and skipped == skipped_meta
        print(f"{n:5d} | {every:18d} | {skipped:28d} | {n - 1}")
    print(f"\ndone in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
