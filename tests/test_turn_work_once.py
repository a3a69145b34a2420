"""No work twice in a turn (respec/turn.py): one copy and one hash of each output image, one
change mask per image (Reveal Composite's C_t reused by the append when it leaves the image)."""
from __future__ import annotations

import numpy as np

from respec import history as history_mod
from respec.controller.provenance_selector import ProvenancePlanner, ProvenanceSelector
from respec.history import CHANGE, History
from respec.pixels import change_mask as changes
from respec.pixels import reveal as reveal_mod
from respec.pixels.change_mask import change_for
from respec.post_edit.reveal_step import RevealStep
from respec.turn import TurnParts, TurnSwitches, run_turn

from synthetic_scenes import background, draw_rect, u8

BOX = (12, 16, 30, 40)


class Editor:
    """Returns the current image (the last it gets), optionally with a square painted on it."""

    name = "plain"
    last_run: dict = {}

    def __init__(self, paint: bool = True):
        self.paint = paint

    def edit(self, images, instruction, output_size=None, seed=0, steps=None, guidance=None):
        out = np.array(images[-1])
        if self.paint:
            out[2:8, 2:8] = (255, 255, 0)
        return out


def _covered_history() -> History:
    scene = background(4, (48, 64))
    h = History.start(u8(scene))
    img = u8(draw_rect(scene, BOX, (0.9, 0.1, 0.1)))
    return h.append(img, "add a red crate", masks={CHANGE: change_for(h, img)})


def test_one_hash_of_the_output_image_per_turn(monkeypatch):
    h = _covered_history()
    shape = h.current.image.array.shape
    hashed = []
    real = history_mod.content_hash
    monkeypatch.setattr(history_mod, "content_hash", lambda a: hashed.append(np.asarray(a).shape) or real(a))
    record, new = run_turn(h, "add a yellow square", TurnParts(editor=Editor()),
                           TurnSwitches(use_controller=False), seed=1)
    assert hashed.count(shape) == 1, "the output image is hashed once (History.append and change_for share it)"
    assert new.current.image is record.image


def test_a_reveal_that_leaves_the_image_costs_one_change_mask(monkeypatch):
    h = _covered_history()
    calls = []
    real = changes.change_of
    counted = lambda *a, **k: calls.append(1) or real(*a, **k)   # noqa: E731
    monkeypatch.setattr(changes, "change_of", counted)
    monkeypatch.setattr(reveal_mod, "change_of", counted)
    # (a move: a removal the editor did not make would be completed by Reveal, issue 32)
    record, new = run_turn(h, "move the red crate to the left",
                           TurnParts(editor=Editor(paint=False), planner=ProvenancePlanner(),
                                     selector=ProvenanceSelector(), post_edit=[RevealStep()]),
                           is_restoration=True, seed=2)
    assert record.post_edit[0]["applied"] is False
    assert len(calls) == 1, "Reveal's C_t of the edited image is the one History Append keeps"
    assert new.current.change is not None
