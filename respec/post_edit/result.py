"""One result for a post-edit step (step 6 of respec/turn.py's run_turn), and the one function that
keeps it with the turn about to be appended (run_turn and the History Append node both call it).

    result = step(history, record)                   # a StepResult
    keep_step(record.post_edit, record.masks, result)

A step says what it did in one shape, whoever runs it: its name, its `meta.post_edit` entry, the
image it leaves (a StoredImage: hashed once, kept as it is by the append; None when it left the
image it was given), the per-pixel records to keep with the turn (name -> TurnMask), the change
record C_t of the image it leaves when it derived one (the Drift Guard's: run_turn keeps it instead
of measuring C_t again) and, for a later step in a graph, its core result and what the next step
reads of it (Reveal Composite's ExactPatch for the Drift Guard).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import InputError
from ..history import StoredImage, TurnMask


@dataclass(frozen=True, eq=False)
class StepResult:
    """What one post-edit step did to a turn (see the module docstring)."""

    step: str                        # the step's name (RevealStep.name, GuardStep.name, ...)
    entry: dict                      # its meta.post_edit entry, without "step"
    image: StoredImage | None = None  # the image it leaves; None: the image it was given
    masks: dict = field(default_factory=dict)   # name -> TurnMask, kept with the turn
    result: Any = None               # the core's own result (RevealResult, GuardResult), None when it did not run
    exact: Any = None                # Reveal Composite's ExactPatch, for a Drift Guard after it (else None)
    change: TurnMask | None = None   # C_t of I_{t-1} -> the image it leaves, when the step derived it (else None)

    def __post_init__(self):
        if self.image is not None and not isinstance(self.image, StoredImage):
            object.__setattr__(self, "image", StoredImage.of(self.image))

    def record(self) -> dict:
        """The turn's meta.post_edit entry: {"step": name, ...entry}."""
        return {"step": self.step, **self.entry}


def keep_step(post_edit: list, masks: dict, result: StepResult) -> None:
    """Keep one step's result with the turn about to be appended: its entry after the earlier steps'
    in `post_edit` (the turn's meta.post_edit list) and its per-pixel records in `masks`."""
    if not isinstance(post_edit, list):
        raise InputError("meta's 'post_edit' must be a list (the post-edit steps' records); rename that key")
    post_edit.append(result.record())
    masks.update(result.masks)
