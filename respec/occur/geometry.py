"""Optional scenario geometry: where the occludee is and what each turn does to the picture.

The paper's scenarios are text only; a real editor decides where things go. The simulated
editor (respec/sim/, a test instrument) needs the geometry spelled out, so a scenario may carry

    "occludee_box": [x0, y0, x1, y1]                 (scenario level)
    "actions": [{"do": "add", "label": "bouquet", "box": [x0, y0, x1, y1]}, ...]   (each turn)

Boxes are fractions of I_0's width and height (0..1, x0 < x1, y0 < y1), so a scenario keeps its
meaning at any --size. Geometry is all or nothing: with `occludee_box` every turn has `actions`.

Actions (`do`):
    add      label, box          place an object (O turn: each occluder; M turn: each new object)
    remove   label               take an occluder away                       (R turn), or an object an
                                 earlier intermediate turn added (M turn: a conversation that adds,
                                 removes and adds again; the label may then be added again)
    move     label, box          the occluder to another box of the same size (R turn)
    resize   label, box          the occluder shrunk to a box inside its own (R turn)
    replace  label, by, box      the occluder swapped for a new object `by` at `box` (R turn)
    recolor  box, color          tint a region ('#rrggbb'); before the occlusion it may be the
                                 occludee itself, from the occlusion on it stays off the occludee
                                 and the occluders (M turn)
    recolor  label, color        tint an object added earlier (M turn; the occluder's colour may
                                 change, never its place, size or shape: paper figure 9)
    style    style               a global style filter (S turn only; see STYLES)

`validate_geometry` checks these rules against the scenario's stages, occluders, new objects and
revelation type, and returns problems in the scenario validator's (field, message) form.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

STYLES = ("watercolor", "oil painting", "comic", "sepia", "pastel", "black and white")
ACTIONS = ("add", "remove", "move", "resize", "replace", "recolor", "style")
ACTION_FIELDS = {"do", "label", "box", "by", "color", "style"}
REVEAL_ACTIONS = {"remove": "remove", "move": "move", "resize": "resize", "replace": "replace"}
MIN_BOX_SIDE = 0.02            # boxes thinner than 2 % of the image would hide nothing measurable
MIN_OCCLUSION = 0.3            # the occluders' boxes cover at least this share of the occludee box
_COLOR_RE = re.compile(r"^#[0-9a-fA-F]{6}$")

Box = tuple[float, float, float, float]


@dataclass(frozen=True)
class Action:
    """One geometric step of a turn (see the module docstring)."""

    do: str
    label: str = ""
    box: Box | None = None
    by: str = ""
    color: str = ""
    style: str = ""

    def to_dict(self) -> dict:
        """JSON-able, as written in a scenario file (empty fields left out, the box rounded)."""
        d: dict[str, Any] = {"do": self.do}
        for k in ("label", "by", "color", "style"):
            if getattr(self, k):
                d[k] = getattr(self, k)
        if self.box is not None:
            d["box"] = [round(v, 4) for v in self.box]
        return d


# ------------------------------------------------------------------------------ boxes

def box_area(b: Box) -> float:
    """Area of a normalised box."""
    return max(0.0, b[2] - b[0]) * max(0.0, b[3] - b[1])


def box_intersection(a: Box, b: Box) -> float:
    """Area of the overlap of two boxes."""
    return box_area((max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3])))


def box_inside(inner: Box, outer: Box, tol: float = 1e-6) -> bool:
    """Whether `inner` lies within `outer`."""
    return (inner[0] >= outer[0] - tol and inner[1] >= outer[1] - tol and inner[2] <= outer[2] + tol
            and inner[3] <= outer[3] + tol)


def box_problem(value: Any) -> str | None:
    """Why `value` is not a normalised box, or None."""
    if not isinstance(value, (list, tuple)) or len(value) != 4:
        return "must be [x0, y0, x1, y1], fractions of the image's width and height"
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value):
        return f"must hold four finite numbers; got {value!r}"
    x0, y0, x1, y1 = (float(v) for v in value)
    if not (0.0 <= x0 < x1 <= 1.0 and 0.0 <= y0 < y1 <= 1.0):
        return f"needs 0 <= x0 < x1 <= 1 and 0 <= y0 < y1 <= 1; got {list(value)}"
    if x1 - x0 < MIN_BOX_SIDE or y1 - y0 < MIN_BOX_SIDE:
        return f"is thinner than {MIN_BOX_SIDE} of the image; got {list(value)}"
    return None


def as_box(value: Any) -> Box:
    """A validated box as a tuple of floats."""
    return tuple(float(v) for v in value)  # type: ignore[return-value]


# ------------------------------------------------------------------------------ validation

def parse_actions(raw: Any, field: str, problems: list[tuple[str, str]]) -> tuple[Action, ...]:
    """A turn's `actions` list -> Actions; shape problems are appended as (field, message)."""
    if not isinstance(raw, list) or not raw:
        problems.append((field, "must be a non-empty list of actions ({'do': 'add', 'label': ..., 'box': ...}, ...)"))
        return ()
    out = []
    for i, a in enumerate(raw):
        f = f"{field}[{i}]"
        if not isinstance(a, dict):
            problems.append((f, f"must be an object, got {type(a).__name__}"))
            continue
        for k in sorted(set(a) - ACTION_FIELDS):
            problems.append((f"{f}.{k}", f"unknown field; allowed: {', '.join(sorted(ACTION_FIELDS))}"))
        do = a.get("do")
        if do not in ACTIONS:
            problems.append((f"{f}.do", f"must be one of {', '.join(ACTIONS)}; got {do!r}"))
            continue
        need = {"add": ("label", "box"), "remove": ("label",), "move": ("label", "box"), "resize": ("label", "box"),
                "replace": ("label", "by", "box"), "style": ("style",)}.get(do, ("color",))
        if do == "recolor" and ("box" in a) == ("label" in a):
            problems.append((f, "a recolor names either a 'box' (a region) or a 'label' (an object), not both"))
        allowed = set(need) | ({"box", "label"} if do == "recolor" else set()) | {"do"}
        for k in sorted(set(a) & ACTION_FIELDS - allowed):
            problems.append((f"{f}.{k}", f"is not used by a {do!r} action"))
        bad = False
        for k in need:
            if k not in a:
                problems.append((f"{f}.{k}", f"is required for a {do!r} action"))
                bad = True
        for k in ("label", "by"):
            if k in a and (not isinstance(a[k], str) or not a[k].strip()):
                problems.append((f"{f}.{k}", "must be a non-empty label"))
                bad = True
        if "box" in a:
            p = box_problem(a["box"])
            if p:
                problems.append((f"{f}.box", p))
                bad = True
        if "color" in a and not (isinstance(a["color"], str) and _COLOR_RE.match(a["color"])):
            problems.append((f"{f}.color", f"must be '#rrggbb'; got {a['color']!r}"))
            bad = True
        if "style" in a and a["style"] not in STYLES:
            problems.append((f"{f}.style", f"must be one of {', '.join(STYLES)}; got {a['style']!r}"))
            bad = True
        if bad:
            continue
        out.append(Action(do=do, label=str(a.get("label", "")).strip(), box=as_box(a["box"]) if "box" in a else None,
                          by=str(a.get("by", "")).strip(), color=a.get("color", ""), style=a.get("style", "")))
    return tuple(out)


def validate_geometry(occludee_box: Box, stages: str, turn_actions: list[tuple[Action, ...]],
                      new_objects: list[tuple[str, ...]], occluders: tuple[str, ...],
                      revelation_type: str) -> list[tuple[str, str]]:
    """The rules that tie a scenario's geometry to its stages (see the module docstring).

    Returns (field, message) problems; empty when the geometry is consistent."""
    problems: list[tuple[str, str]] = []
    occ_turn = stages.index("O") + 1 if "O" in stages else None
    placed: dict[str, Box] = {}            # label -> current box
    for t, (stage, actions, new) in enumerate(zip(stages, turn_actions, new_objects), start=1):
        f = f"turns[{t - 1}].actions"
        after_occ = occ_turn is not None and t >= occ_turn
        added = [a.label for a in actions if a.do == "add"] + [a.by for a in actions if a.do == "replace"]
        allowed_do = {"O": {"add"}, "M": {"add", "recolor", "remove"}, "S": {"style"},
                      "R": set(REVEAL_ACTIONS)}.get(stage, set())
        for a in actions:
            if a.do not in allowed_do:
                problems.append((f, f"a {a.do!r} action does not belong to a {stage} turn "
                                    f"(allowed: {', '.join(sorted(allowed_do))})"))
        if stage == "S" and len(actions) != 1:
            problems.append((f, "a style turn has exactly one 'style' action"))
        if stage == "S" and after_occ:
            problems.append((f, "a style change after the occlusion would change the hidden content too; "
                                "the geometry allows style turns only before the occlusion"))
        expected = set(occluders) if stage == "O" else set(new)
        if stage in "OMR" and sorted(added) != sorted(expected):
            what = "the occluders" if stage == "O" else "this turn's new_objects"
            problems.append((f, f"must add exactly {what} {sorted(expected)}; it adds {sorted(added)}"))
        for a in actions:
            if a.do == "add":
                if a.label in placed:
                    problems.append((f, f"{a.label!r} is already in the picture"))
                if stage == "M" and box_intersection(a.box, occludee_box) > 0:
                    problems.append((f, f"the new object {a.label!r} overlaps the occludee box; intermediate "
                                        f"edits leave the occludee alone"))
                placed[a.label] = a.box
            elif a.do == "remove" and stage == "M":
                if a.label not in placed or a.label in occluders:
                    problems.append((f, f"an intermediate turn removes only an object an earlier intermediate turn "
                                        f"added; {a.label!r} is {'an occluder' if a.label in occluders else 'not in the picture'}"))
                else:
                    del placed[a.label]
            elif a.do == "recolor":
                if a.label:
                    if a.label not in placed:
                        problems.append((f, f"recolors {a.label!r}, which is not in the picture yet"))
                elif after_occ:
                    if box_intersection(a.box, occludee_box) > 0:
                        problems.append((f, "a recolor from the occlusion on must stay off the occludee box"))
                    hit = [o for o in occluders if o in placed and box_intersection(a.box, placed[o]) > 0]
                    if hit:
                        problems.append((f, f"a region recolor must stay off the occluder(s) {hit}"))
        if stage == "O":
            cover = sum(box_intersection(placed[o], occludee_box) for o in occluders if o in placed)
            if cover < MIN_OCCLUSION * box_area(occludee_box):
                problems.append((f, f"the occluders' boxes cover {cover / box_area(occludee_box):.0%} of the "
                                    f"occludee box; an occlusion covers at least {MIN_OCCLUSION:.0%}"))
        if stage == "R":
            problems += _check_revelation(f, actions, placed, occluders, occludee_box, revelation_type)
    return problems


def _check_revelation(f: str, actions, placed: dict, occluders, occludee_box: Box, rtype: str) -> list:
    problems = []
    touched = [a.label for a in actions]
    if sorted(touched) != sorted(occluders):
        problems.append((f, f"a revelation acts once on every occluder {sorted(occluders)}; it acts on {sorted(touched)}"))
        return problems
    kinds = {a.do for a in actions}
    if rtype != "multi" and kinds != {rtype}:
        problems.append((f, f"a {rtype!r} revelation uses a {rtype!r} action; got {sorted(kinds)}"))
    before = sum(box_intersection(placed[o], occludee_box) for o in occluders if o in placed)
    after = 0.0
    for a in actions:
        old = placed.get(a.label)
        if old is None:
            continue
        if a.do == "move" and (abs((a.box[2] - a.box[0]) - (old[2] - old[0])) > 1e-3
                               or abs((a.box[3] - a.box[1]) - (old[3] - old[1])) > 1e-3):
            problems.append((f, f"a move keeps {a.label!r}'s size ({old[2] - old[0]:.3f} x {old[3] - old[1]:.3f})"))
        if a.do == "resize" and not (box_inside(a.box, old) and box_area(a.box) < 0.9 * box_area(old)):
            problems.append((f, f"a resize shrinks {a.label!r} to a box inside its own"))
        if a.do in ("move", "resize"):
            placed[a.label] = a.box
            after += box_intersection(a.box, occludee_box)
        elif a.do == "replace":
            del placed[a.label]
            placed[a.by] = a.box
            after += box_intersection(a.box, occludee_box)
        else:
            del placed[a.label]
    if after > before - 0.1 * box_area(occludee_box):
        problems.append((f, "the revelation must uncover at least 10% of the occludee box"))
    return problems
