"""The covering turn: which earlier turn hid what a restoration request reveals, read from pixel
provenance with no VLM (beyond the paper).

The paper's controller re-reads the history to guess which past image still shows the content a
revealing edit uncovers (figure 12, steps 1-3). The history's change masks, read as per-pixel
provenance (respec/pixels/provenance.py), and requests answer it directly, through its object turns
(respec/controller/object_turns.py: what each turn added, and which later turn removed, moved or
replaced it):

    the covering turn k  = the latest turn whose addition is still in the picture and
                           (a) is named by the request (restoration.py's words rule; of several, the
                               one it names best: shared words, then colours) and confirmed by turn
                               k's change mask (it changed a local part of the image), or
                           (b) when the request names nothing, from provenance alone: the latest
                               local addition still in the picture (that the request's own change
                               overlaps, when it is known);
    restoration_source   = k - 1, the latest image before the covering turn (the paper's I_ref).

"Latest", not the paper's "earliest" (its figure 12 asks the VLM for "the earliest turn that added
content into the uncovered region"): a conversation that adds, removes and adds again the same
object (glasses on a face at turns 1 and 3, removed at turns 2 and 4) must undo turn 3 at turn 4,
whose image before (I_2) shows the face as it was before the second pair; I_0 shows it before the
first, and turn 3's glasses, of another shape, hid something else. The paper's VLM route keeps its
own rule (its prompt); the provenance and hybrid planners use this one. The record says which turn
was undone and why (`reason`, `objects`: the additions the request names, and which turns undid
them).

Confidence. The change masks are evidence only where the editor kept the scene: every turn's
change record has a stable_fraction and a rerendered flag (respec/pixels/provenance.py, not
resting on the adaptive threshold). `confidence_record` gives the product over the turns k..t-1
of the smallest of: the turn's stable_fraction, the share of its textured blocks that held, and
the share of the textured blocks around C_k that held (respec.pixels.provenance.held_near, by the
rule of succession (held + 1) / (textured + 2): surroundings with few textured blocks, a figure
redrawn inside its own change mask on a flat backdrop, vouch for little); halved for a turn
flagged re-rendered; 0 when no turn was located.

Who reads it: the provenance and hybrid planners and the provenance selector
(respec/controller/provenance_selector.py), the controller's bounded history images
(respec/controller/history_images.py) and Reveal Composite (respec/post_edit/reveal_step.py). It needs
no planner, so all of them import it without a cycle.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..history import History
from ..plan import ProvenanceRecord
from ..pixels.provenance import NearEvidence, provenance_of
from .object_turns import GLOBAL_CHANGE, MIN_CHANGE, covering_addition, object_record, object_turns

__all__ = ["CoveringTurn", "locate_covering_turn", "confidence_record", "MIN_CHANGE", "GLOBAL_CHANGE"]


@dataclass(frozen=True)
class CoveringTurn:
    """Which earlier turn k covered what turn t reveals, and the evidence for it."""

    turn: int | None                 # k (None: no earlier turn qualifies)
    candidates: tuple[int, ...]      # every turn the evidence allowed, oldest first
    evidence: str                    # "request+provenance" | "request" | "provenance" | "none"
    ambiguous: bool
    reason: str
    changed: dict                    # {k: share of the image turn k changed} for the candidates
    objects: tuple = ()              # the additions the request names (object_turns records), oldest first

    @property
    def source_id(self) -> int | None:
        """restoration_source_id = k - 1."""
        return None if self.turn is None else self.turn - 1

    def record(self) -> ProvenanceRecord:
        """What the plan keeps of it (Plan.provenance), the shares rounded."""
        return ProvenanceRecord(self.turn, self.candidates, self.evidence, self.ambiguous, self.reason,
                                tuple((k, round(v, 6)) for k, v in self.changed.items()), tuple(self.objects))


def locate_covering_turn(history: History, request: str, change: np.ndarray | None = None) -> CoveringTurn:
    """The covering turn k for the restoration request P_t (see the module docstring). change:
    this turn's own change mask C_t in I_{t-1}'s frame when it is known (after the edit), for a
    request that names nothing."""
    t = history.next_turn
    if t < 2:
        return CoveringTurn(None, (), "none", False, "turn 1: no earlier edit", {})
    prov = provenance_of(history)
    turns = object_turns(history, prov)
    found = covering_addition(turns, request, prov, change)
    objects = tuple(object_record(turns, request))
    if found.addition is None:
        return CoveringTurn(None, (), "none", False, found.reason, {}, objects)
    return CoveringTurn(found.addition.turn, tuple(a.turn for a in found.candidates), found.evidence, found.ambiguous,
                        found.reason, {a.turn: a.share for a in found.candidates}, objects)


def confidence_record(history: History, found: CoveringTurn) -> tuple[float, dict]:
    """(provenance_confidence, its evidence per turn j = k..t-1: {j: [stable_fraction,
    textured_stable_fraction, held, textured, around]}). Each turn contributes the smallest of its
    whole image's stable fraction, its textured blocks' share and (held + 1) / (textured + 2) of
    the textured blocks around C_k (`held_near`, through one NearEvidence; `around` counts every block there, flat ones
    included: a few textured blocks are little evidence), halved when it was flagged re-rendered;
    what every turn since k kept is the product."""
    if found.turn is None:
        return 0.0, {}
    prov = provenance_of(history)
    conf, rec = 1.0, {}
    k = found.turn
    evidence = NearEvidence(history, prov, k)      # what C_k's surroundings need, made once for every j
    for j in range(k, history.next_turn):
        sf = min(prov.stable_fraction(j), prov.textured_stable_fraction(j))
        near = evidence.held(j)
        if near is not None:
            held, n, around = near
            sf = min(sf, (held + 1.0) / (n + 2.0))     # the rule of succession: few blocks, little evidence
        rec[str(j)] = [round(prov.stable_fraction(j), 4), round(prov.textured_stable_fraction(j), 4),
                       *(near if near is not None else (None, None, None))]
        conf *= 0.5 * sf if prov.rerendered(j) else sf
    return float(min(1.0, max(0.0, conf))), rec
