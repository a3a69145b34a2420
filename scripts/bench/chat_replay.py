"""The chat graphs' conversational steps replayed on an editor's recorded outputs (a helper of the
benchmark scripts bench_undo_chains.py and bench_harm.py; not a test).

    for turn in replay(i0, outputs, instructions, history_first=True):
        turn.record, turn.history, turn.editor_image, turn.editor_called ...

Each turn the editor's recorded output, scaled to I_{t-1}'s size (bicubic) as the chat graphs do,
is returned by a "replay" editor, through the pack's conversational steps as
`conversational_provenance` runs them: the provenance planner and selector (no VLM), the
restoration flag from the request's words, Reveal Composite and the Drift Guard; with
`history_first` on, a removal that history can answer is answered before the edit and the replay
editor is not called.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from respec.controller.provenance_selector import selector_parts  # noqa: E402
from respec.history import History  # noqa: E402
from respec.post_edit.guard_step import GuardStep  # noqa: E402
from respec.post_edit.reveal_step import RevealStep  # noqa: E402
from respec.post_edit.undo_step import UndoStep  # noqa: E402
from respec.pixels.undo import UndoParams  # noqa: E402
from respec.turn import TurnParts, TurnRecord, TurnSwitches, run_turn  # noqa: E402

CAP_DB = 100.0


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """Whole-image PSNR (dB, 8-bit), CAP_DB for identical images."""
    e = float(((a.astype(np.float64) - b.astype(np.float64)) ** 2).mean())
    return CAP_DB if e == 0 else min(CAP_DB, 10 * np.log10(255.0 ** 2 / e))


def scaled(img: Image.Image, size: tuple[int, int]) -> Image.Image:
    """`img` at `size` (w, h), bicubic, as the chat graphs scale an editor's output to I_{t-1}'s."""
    return img if img.size == tuple(size) else img.resize(tuple(size), Image.BICUBIC)


class ReplayEditor:
    """Returns turn t's recorded output, scaled to the current image's size; counts its calls."""

    name = "replay"

    def __init__(self, outputs: list[Image.Image]):
        self.outputs, self.t, self.last_run, self.calls = outputs, 0, {}, []

    def seek(self, t: int) -> None:
        """The next edit is turn t's."""
        self.t = t

    def edit(self, images, instruction, *, output_size, seed, steps=None, guidance=None):
        self.calls.append(self.t)
        return scaled(self.outputs[self.t - 1], output_size)


@dataclass(frozen=True, eq=False)
class ReplayedTurn:
    """One replayed turn: its number and request, the turn's record, H_{t-1} and H_t, the editor's
    recorded output at I_{t-1}'s size (uint8 H×W×3, also when the editor was not called), whether the
    editor was called, and the turn's seconds (run_turn only)."""

    t: int
    request: str
    record: TurnRecord
    before: History
    history: History
    editor_image: np.ndarray
    editor_called: bool
    seconds: float

    @property
    def kept(self) -> np.ndarray:
        """The picture the pack handed back (I_t of the new history)."""
        return self.history.current.image.array


def conversational_parts(editor: ReplayEditor, latest_whole: bool = True) -> TurnParts:
    """The chat graphs' parts: provenance planner and selector, Reveal Composite then the Drift
    Guard, and the undo from history (UndoParams.latest_whole as given)."""
    planner, selector = selector_parts("provenance")
    return TurnParts(editor=editor, planner=planner, selector=selector, post_edit=[RevealStep(), GuardStep()],
                     undo=UndoStep(UndoParams(latest_whole=latest_whole)))


def replay(i0: Image.Image, outputs: list[Image.Image], instructions: list[str], history_first: bool,
           latest_whole: bool = True) -> Iterator[ReplayedTurn]:
    """Replay one conversation: I_0, the editor's recorded outputs I_1..I_n and their requests; yields
    each turn as it is run (see the module docstring)."""
    if len(outputs) != len(instructions):
        raise ValueError(f"{len(outputs)} outputs but {len(instructions)} instructions")
    editor = ReplayEditor(outputs)
    parts = conversational_parts(editor, latest_whole)
    switches = TurnSwitches(restoration_mode="auto", history_first=history_first)
    h = History.start(np.asarray(i0))
    for t, request in enumerate(instructions, start=1):
        editor.seek(t)
        before = h
        start = time.perf_counter()
        record, h = run_turn(h, request, parts, switches, seed=t)
        seconds = time.perf_counter() - start
        shown = np.asarray(scaled(outputs[t - 1], before.current.image.size).convert("RGB"))
        yield ReplayedTurn(t, request, record, before, h, shown, t in editor.calls, seconds)
