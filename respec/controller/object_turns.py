"""Object turns: what each turn added, and whether a later turn took it away again (beyond the
paper).

A conversation repeats itself: glasses added, removed, added again (another pair, another shape),
removed again. "Remove the glasses" at turn 4 undoes turn 3's addition, not turn 1's (which turn 2
already removed): the image to restore from is the one just before the latest addition that is
still in the picture. The history knows which that is, from the requests and the change masks:

    an addition   a turn whose request adds an object (restoration.py's words rule: "add / put /
                  place ... <object> <place>"): its object words and the share of the image its
                  change mask C_k changed; it is confirmed (`local`) when that share is between
                  MIN_CHANGE and GLOBAL_CHANGE (a local part of the image).
                  A move adds the moved object again at its new place; a replace adds what
                  replaces (the words after "with", "for", "into"), whether or not a turn
                  added what it replaced (the beaver of the photo replaced by a fox).
                  Not an addition: a request that names an object still in the picture and changes
                  only (MODIFY_INSIDE of C_k) inside that object's region ("make the stack of
                  books blue": 'stack' is an adding verb, the turn recolours the books).
    consumed      a later turn removed, moved or replaced it: its request has a revealing verb
                  (remove / move / replace ...; a shrink leaves the object in place) and names the
                  addition's words; of several live additions it names, the one it names best
                  (most shared content words, then colour words: "the wooden crate", not "the
                  small crate"; "the red ball", not "the blue ball"), the latest on a tie. A request that names nothing ("remove it", "clear that area")
                  consumes the latest live addition its own change overlaps. Each clause of a
                  request ("remove the hat and move the lamp ...") is read on its own.

`object_turns(history)` reads the history once per turn (kept incrementally, by content, like
respec/pixels/provenance_index.py) and `covering_addition(turns, request, change)` applies the rule
the provenance selector uses (respec/controller/covering.py): the live addition the request names
best, the latest of those; naming nothing, the latest live local addition (that the request's own change overlaps,
when it is known: Reveal Composite knows it, the planner does not).
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import asdict, dataclass, replace
import numpy as np

from ..history import History
from ..pixels.analysis_cache import CACHE, AnalysisCache
from ..pixels.masks import dilate
from ..pixels.provenance import Provenance, provenance_of
from .restoration import (added_object_colours, added_object_words, colour_words, replacement_words,
                          request_words, revealing_action)

MIN_CHANGE = 1e-3      # a change mask smaller than this share of the image is no evidence
GLOBAL_CHANGE = 0.5    # ... and one this large is a global edit (style), not an added object
MODIFY_INSIDE = 0.6    # a turn naming a live object whose change lies this much inside it modifies it
NEAR_PX_FRAC = 0.01    # ... "inside" allows this share of the shorter side around the object
CONSUMING = ("remove", "move", "replace")
_CLAUSES = re.compile(r"\s*(?:[,;.!?]+|\band then\b|\bthen\b|\band\b)\s*", re.IGNORECASE)


@dataclass(frozen=True)
class Addition:
    """What turn `turn` put into the picture: its object words, the share of the image its change
    mask covers, how ("added", "moved", "replaced"), and, once a later turn took it away, which
    turn and how ("removed", "moved", "replaced")."""

    turn: int
    words: frozenset
    share: float
    how: str = "added"
    consumed_by: int | None = None
    consumed_how: str | None = None
    colours: frozenset = frozenset()     # the colour words of the object ("a red ball": {"red"})

    def match(self, words: set, colours: set) -> tuple[int, int]:
        """How well a request's content and colour words name this addition: (shared content words,
        shared colours); the best match is the one named ("remove the wooden crate" names the
        wooden crate, not the small crate; "the red ball", not the blue one)."""
        return len(self.words & words), len(self.colours & colours)

    @property
    def live(self) -> bool:
        """Whether it is still in the picture (no later turn removed, moved or replaced it)."""
        return self.consumed_by is None

    @property
    def local(self) -> bool:
        """Whether its change mask confirms a local addition (MIN_CHANGE <= share < GLOBAL_CHANGE)."""
        return MIN_CHANGE <= self.share < GLOBAL_CHANGE

    def record(self) -> dict:
        """JSON-able: {turn, words, share, how, consumed_by, consumed_how}."""
        d = asdict(self)
        d["words"] = sorted(self.words)
        d["colours"] = sorted(self.colours)
        d["share"] = round(self.share, 6)
        return d


@dataclass(frozen=True)
class ObjectTurns:
    """The additions of a history's turns 1..T, oldest first, each marked live or consumed."""

    additions: tuple[Addition, ...]
    turns: int

    def live(self) -> list[Addition]:
        """The additions still in the picture, oldest first."""
        return [a for a in self.additions if a.live]

    def named_by(self, request: str) -> list[tuple[Addition, list[str]]]:
        """(addition, shared words) for every addition whose object words the request names, oldest first."""
        words = request_words(request)
        return [(a, sorted(a.words & words)) for a in self.additions if a.words & words]


def request_clauses(text: str) -> list[str]:
    """A request split into clauses ("remove the hat and move the lamp left" -> two): each is read
    on its own (here and by Reveal Composite's removal rule)."""
    return [c for c in _CLAUSES.split(text or "") if c.strip()]


def _overlap(prov: Provenance, a: int, b: int, near: int) -> float:
    """The share of C_b (in I_b's frame) that lies within `near` px of C_a carried into I_b's frame."""
    cb = prov.changes[b]
    n = int(cb.sum())
    if n == 0:
        return 0.0
    ca = prov.in_frame(prov.changes[a], a, b)
    return float((cb & dilate(ca, near)).sum()) / n


def _step(adds: list[Addition], history: History, prov: Provenance, t: int) -> list[Addition]:
    """The additions after turn t (those before it given): turn t's consumptions, then its addition."""
    text = history.turns[t].instruction or ""
    share = prov.share(t)
    local = MIN_CHANGE <= share < GLOBAL_CHANGE
    near = max(2, round(NEAR_PX_FRAC * min(prov.changes[0].shape)))
    out = list(adds)
    new: list[Addition] = []
    clauses = request_clauses(text)
    consumed_any = False
    add_words: set = set()
    add_colours: set = set()
    for clause in clauses:
        action = revealing_action(clause)
        if action is not None and action[0] in CONSUMING:
            kind = action[0]
            named_words = request_words(clause) - (replacement_words(clause) if kind == "replace" else set())
            live = [i for i, a in enumerate(out) if a.live and a.words & named_words]
            if live:
                live = [_best(out, live, named_words, colour_words(clause))]
            elif not (named_words & set().union(*(a.words for a in out))) and local:
                # names nothing an earlier turn added: the latest live addition this turn's change overlaps
                live = [i for i, a in enumerate(out) if a.live and a.local and _overlap(prov, a.turn, t, near) > 0]
                live = live[-1:]
            for i in live:
                gone = out[i]
                how = {"remove": "removed", "move": "moved", "replace": "replaced"}[kind]
                out[i] = replace(gone, consumed_by=t, consumed_how=how)
                consumed_any = True
                if kind == "move":
                    new.append(Addition(t, gone.words, share, "moved", colours=gone.colours))
            if kind == "replace" and replacement_words(clause):
                # what replaces is in the picture from now on, whether or not a turn added the old object
                new.append(Addition(t, frozenset(replacement_words(clause)), share, "replaced",
                                    colours=frozenset(colour_words(clause.split(" with ")[-1]))))
                consumed_any = True
        elif action is None:
            add_words |= added_object_words(clause)
            add_colours |= added_object_colours(clause)
    if add_words and not consumed_any:
        # A request naming a live object whose change lies inside that object modifies it (a recolour
        # read as "stack ... books"): no new addition.
        holder = [a for a in out if a.live and a.local and a.words & add_words]
        if not (holder and local and _overlap(prov, holder[-1].turn, t, near) >= MODIFY_INSIDE):
            new.append(Addition(t, frozenset(add_words), share, "added", colours=frozenset(add_colours)))
    return out + new


def _best(adds: list[Addition], idx: list[int], words: set, colours: set) -> int:
    """Of the additions `idx`, the one the words name best (`Addition.match`); the latest on a tie."""
    return max(idx, key=lambda i: (adds[i].match(words, colours), adds[i].turn))


def _chain(history: History) -> list[str]:
    keys = [history.turns[0].image.digest]
    for turn in history.turns[1:]:
        keys.append(hashlib.blake2b(f"{keys[-1]}|{turn.image.digest}|{turn.instruction}".encode(),
                                    digest_size=16).hexdigest())
    return keys


def object_turns(history: History, prov: Provenance | None = None, cache: AnalysisCache = CACHE) -> ObjectTurns:
    """The additions of every turn of `history`, each live or consumed (see the module docstring).
    Kept by content in `cache.object_turns` (chain key after turn t -> the additions after turn t):
    a history extending one already read costs only its new turns."""
    keys = _chain(history)
    j = len(keys) - 1
    while j > 0 and cache.object_turns.get(keys[j]) is None:
        j -= 1
    adds: list[Addition] = list(cache.object_turns.get(keys[j]) or ()) if j else []
    if j < len(keys) - 1:
        prov = prov if prov is not None else provenance_of(history, cache=cache)
        for t in range(j + 1, len(keys)):
            adds = _step(adds, history, prov, t)
            cache.object_turns.put(keys[t], tuple(adds))
    return ObjectTurns(tuple(adds), len(history.turns) - 1)


@dataclass(frozen=True)
class Covering:
    """Which addition a restoration request undoes: `addition` (None: none found), the candidates
    the rule weighed, and why."""

    addition: Addition | None
    candidates: tuple[Addition, ...]
    evidence: str              # "request+provenance" | "request" | "provenance" | "none"
    ambiguous: bool
    reason: str


def covering_addition(turns: ObjectTurns, request: str, prov: Provenance | None = None,
                      change: np.ndarray | None = None) -> Covering:
    """The addition a restoration request P_t undoes (see the module docstring): of the live
    additions it names (and the change masks confirm), the one it names best, the latest of those;
    a named addition that is no longer in the picture only when none is; naming nothing, the latest live local addition (that `change`,
    the request's own C_t in I_{t-1}'s frame when known, overlaps)."""
    named = turns.named_by(request)
    if named:
        live = [a for a, _ in named if a.live]
        confirmed = [a for a in live if a.local]
        pool = confirmed or live or [a for a, _ in named]
        words, colours = request_words(request), colour_words(request)
        best = max(a.match(words, colours) for a in pool)
        k = [a for a in pool if a.match(words, colours) == best][-1]
        confirmed = [a for a in confirmed if a.match(words, colours) == best]
        live = [a for a in live if a.match(words, colours) == best]
        words = " ".join(sorted(k.words & request_words(request)))
        gone = [a for a, _ in named if not a.live]
        if confirmed:
            why = f"the request names the {words} that turn {k.turn} {_verb(k)} ({k.share:.1%} of the image changed)"
            why += _history_of(gone, confirmed, k)
            return Covering(k, tuple(confirmed), "request+provenance", len(confirmed) > 1, why)
        if live:
            return Covering(k, tuple(live), "request", True,
                            f"the request names the {words} that turn {k.turn} {_verb(k)}, but its change mask does "
                            f"not confirm it ({k.share:.2%} of the image changed)")
        return Covering(k, tuple(pool), "request", True,
                        f"the request names the {words}, but every turn that added them was undone since "
                        f"({', '.join(f'turn {a.turn} by turn {a.consumed_by}' for a in gone)}); the latest is used")
    live = [a for a in turns.live() if a.local]
    if change is not None and prov is not None and live:
        m = np.asarray(change, bool)
        over = [a for a in live if (m & prov.in_frame(prov.changes[a.turn], a.turn)).any()]
        live = over or live
    if not live:
        return Covering(None, (), "none", False, "no earlier turn added something locally that is still there")
    k = live[-1]
    why = (f"the request names nothing; turn {k.turn} is the only local addition still in the picture"
           if len(live) == 1 else
           f"the request names nothing; turns {[a.turn for a in live]} added something still in the picture, "
           f"the latest is used")
    return Covering(k, tuple(live), "provenance", len(live) > 1, why)


def _verb(a: Addition) -> str:
    return {"added": "added", "moved": "moved there", "replaced": "put in"}.get(a.how, a.how)


def _history_of(gone: list[Addition], live: list[Addition], k: Addition) -> str:
    parts = [f"turn {a.turn}'s were {a.consumed_how} at turn {a.consumed_by}" for a in gone]
    if len(live) > 1:
        parts.append(f"turns {[a.turn for a in live]} are all still there, the latest is used")
    return f"; {'; '.join(parts)}" if parts else ""


def object_record(turns: ObjectTurns, request: str) -> list[dict]:
    """The additions the request names (or, naming none, the live ones), for the plan's record."""
    named = [a for a, _ in turns.named_by(request)]
    return [a.record() for a in (named or turns.live())][-12:]

