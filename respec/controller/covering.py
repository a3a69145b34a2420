"""The covering turn: which earlier turn hid what a restoration request reveals, read from pixel
provenance with no VLM (beyond the paper).

The paper's controller re-reads the history to guess which past image still shows the content a
revealing edit uncovers (figure 12, steps 1-3). The history's change masks
(respec/pixels/provenance.py) answer it directly:

    the covering turn k  = the earliest earlier turn that added what the request acts on,
                           (a) named by the request (respec/controller/restoration.py's words rule:
                               the request names the object turn k added) and confirmed by turn
                               k's change mask (it changed a part of the image), or
                           (b) when the request names nothing, from provenance alone: the earlier
                               turns that added something and changed a part of the image;
    restoration_source   = k - 1, the latest image before the covering turn (the paper's I_ref).

"Earliest" is the paper's own rule ("select the earliest turn that added content into the
uncovered region"): I_{k-1} then precedes every later addition too.

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
(respec/controller/history_images.py) and Reveal Composite (respec/pixels/reveal.py). It needs
no planner, so all of them import it without a cycle.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from ..errors import InputError
from ..history import History
from ..pixels.provenance import held_near, provenance_of
from .restoration import added_object_words, turns_named

MIN_CHANGE = 1e-3     # a change mask smaller than this share of the image is no evidence
GLOBAL_CHANGE = 0.5   # ... and one this large is a global edit (style), not an added object


@dataclass(frozen=True)
class CoveringTurn:
    """Which earlier turn k covered what turn t reveals, and the evidence for it."""

    turn: int | None                 # k (None: no earlier turn qualifies)
    candidates: tuple[int, ...]      # every turn the evidence allowed, oldest first
    evidence: str                    # "request+provenance" | "request" | "provenance" | "none"
    ambiguous: bool
    reason: str
    changed: dict                    # {k: share of the image turn k changed} for the candidates

    @property
    def source_id(self) -> int | None:
        """restoration_source_id = k - 1."""
        return None if self.turn is None else self.turn - 1

    def record(self) -> dict:
        """JSON-able (for plan.meta["provenance"])."""
        d = asdict(self)
        d["candidates"] = list(self.candidates)
        d["changed"] = {str(k): round(v, 6) for k, v in self.changed.items()}
        d["source_id"] = self.source_id
        return d


def locate_covering_turn(history: History, request: str) -> CoveringTurn:
    """The covering turn k for the restoration request P_t (see the module docstring)."""
    if not isinstance(history, History):
        raise InputError(f"locate_covering_turn needs a History, got {type(history).__name__}")
    t = history.next_turn
    if t < 2:
        return CoveringTurn(None, (), "none", False, "turn 1: no earlier edit", {})
    prov = provenance_of(history)
    share = {k: prov.share(k) for k in range(1, t)}
    local = [k for k in range(1, t) if MIN_CHANGE <= share[k] < GLOBAL_CHANGE]
    named = [k for k, _ in turns_named(history, request)]
    confirmed = [k for k in named if k in local]
    if confirmed:
        k = confirmed[0]
        why = f"the request names what turn {k} added ({share[k]:.1%} of the image changed)"
        if len(confirmed) > 1:
            why += f"; turns {confirmed} all qualify, the earliest is used"
        return CoveringTurn(k, tuple(confirmed), "request+provenance", len(confirmed) > 1, why,
                            {c: share[c] for c in confirmed})
    if named:
        k = named[0]
        return CoveringTurn(k, tuple(named), "request", True,
                            f"the request names what turn {k} added, but its change mask does not confirm it "
                            f"({share[k]:.2%} of the image changed)", {c: share[c] for c in named})
    adders = [k for k in local if added_object_words(history.turns[k].instruction)] or local
    if not adders:
        return CoveringTurn(None, (), "none", False, "no earlier turn changed a part of the image", {})
    k = adders[0]
    why = (f"the request names nothing; turn {k} is the only earlier turn that added something locally"
           if len(adders) == 1 else
           f"the request names nothing; turns {adders} added something locally, the earliest is used")
    return CoveringTurn(k, tuple(adders), "provenance", len(adders) > 1, why, {c: share[c] for c in adders})


def confidence_record(history: History, found: CoveringTurn) -> tuple[float, dict]:
    """(provenance_confidence, its evidence per turn j = k..t-1: {j: [stable_fraction,
    textured_stable_fraction, held, textured, around]}). Each turn contributes the smallest of its
    whole image's stable fraction, its textured blocks' share and (held + 1) / (textured + 2) of
    the textured blocks around C_k (`held_near`; `around` counts every block there, flat ones
    included: a few textured blocks are little evidence), halved when it was flagged re-rendered;
    what every turn since k kept is the product."""
    if found.turn is None:
        return 0.0, {}
    prov = provenance_of(history)
    conf, rec = 1.0, {}
    k = found.turn
    for j in range(k, history.next_turn):
        sf = min(prov.stable_fraction(j), prov.textured_stable_fraction(j))
        near = held_near(history, prov, k, j)
        if near is not None:
            held, n, around = near
            sf = min(sf, (held + 1.0) / (n + 2.0))     # the rule of succession: few blocks, little evidence
        rec[str(j)] = [round(prov.stable_fraction(j), 4), round(prov.textured_stable_fraction(j), 4),
                       *(near if near is not None else (None, None, None))]
        conf *= 0.5 * sf if prov.rerendered(j) else sf
    return float(min(1.0, max(0.0, conf))), rec
