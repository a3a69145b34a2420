"""What a post-edit step may read of the turn so far (step 6 of respec/turn.py's run_turn).

run_turn hands each step its TurnRecord; a step reads only these four things of it and never
writes to it (what it did comes back in its StepResult, respec/post_edit/result.py). The History
Append node's steps run as nodes and get the same values from their inputs.
"""
from __future__ import annotations

from typing import Any, Mapping, Protocol

from ..history import TurnMask
from ..plan import Plan


class TurnSoFar(Protocol):
    """The turn as a post-edit step sees it (respec.turn.TurnRecord is one)."""

    @property
    def request(self) -> str:
        """P_t, the user's instruction."""

    @property
    def is_restoration(self) -> bool:
        """Whether this is a restoration turn."""

    @property
    def plan(self) -> Plan | None:
        """This turn's controller plan (None: the controller is off)."""

    @property
    def image(self) -> Any:
        """The image the earlier steps left (the editor's output before the first step)."""

    @property
    def masks(self) -> Mapping[str, TurnMask]:
        """The per-pixel records the earlier steps keep with the turn (Reveal Composite's `reveal_source`)."""
