"""OCCUR scenarios: the JSON format, its validation, and loading a scenario's source image.

A dataset file is one JSON object (see respec/bench/scenario.schema.json and docs/benchmark.md):

    {"format": "occur-scenarios", "version": 1, "name": "...", "description": "...",
     "licence": "...", "sources": {"skimage:astronaut": {"title": ..., "licence": ...}},
     "scenarios": [ {scenario}, ... ]}

and each scenario is

    {"id": "astronaut_2t_remove", "image": "skimage:astronaut",
     "template": "2turn", "revelation_type": "remove", "occluders": ["bouquet"],
     "occludee": "round mission patch", "reference_turn": 0,
     "turns": [{"instruction": "...", "stage": "O", "new_objects": []},
               {"instruction": "...", "stage": "R", "new_objects": []}],
     "notes": "...", "licence": "..."}

Turn t of the list (1-based) produces I_t from I_{t-1}. Stages follow the paper's table 3:
O occlusion, M intermediate edit, S global style, R revelation. `reference_turn` is the id of
the ground-truth restoration reference I_ref (appendix A.4: the latest image in which the
occludee is visible and valid). It is used for scoring and reference accuracy only; it is
never shown to the controller or the editor.

Validation refuses unknown fields and names the file, the scenario and the field of every
problem it finds.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePath
from typing import Any

import numpy as np
from PIL import Image

from .. import paths
from ..errors import InputError
from ..images import clip_text, image_file_problem, open_image, rgb_array
from . import geometry

FORMAT = "occur-scenarios"
FORMAT_VERSION = 1

STAGES = ("O", "M", "S", "R")
STAGE_NAMES = {"O": "occlusion", "M": "intermediate edit", "S": "style transformation", "R": "revelation"}

# Table 3 of the paper. 5-turn v1-v4 place the occlusion at turn k = 1..4 with intermediate
# edits around it; v5 starts with a style transformation.
TEMPLATES: dict[str, str] = {
    "2turn": "OR",
    "3turn": "OMR",
    "4turn_v1": "OMMR",
    "4turn_v2": "SOMR",
    "5turn_v1": "OMMMR",
    "5turn_v2": "MOMMR",
    "5turn_v3": "MMOMR",
    "5turn_v4": "MMMOR",
    "5turn_v5": "SOMMR",
}
CUSTOM_TEMPLATE = "custom"
TEMPLATE_BY_STAGES = {v: k for k, v in TEMPLATES.items()}

REVELATION_TYPES = ("resize", "move", "replace", "remove", "multi")

# Paper §3.1: user instructions never ask for the hidden content back. These words would.
_RESTORE_WORDS = re.compile(
    r"\b(restor\w*|recover\w*|reveal\w*|uncover\w*|reappear\w*|unhid\w*|bring(s|ing)? back|put back)\b",
    re.IGNORECASE)

_ID_RE = re.compile(r"^[A-Za-z0-9_.-]{1,80}$")

# Image references that name a packaged sample rather than a file. 'sample:<file>' is one of the
# photos that ship inside the pack (samples/photos/), so a scenario file naming it can move anywhere.
_BUILTIN_REF = re.compile(r"^(skimage|matplotlib|sample):")
_PHOTO_NAME = re.compile(r"[A-Za-z0-9_.-]+\.(png|jpg|jpeg)")

# Images that ship inside the scikit-image wheel (no download needed).
SKIMAGE_BUNDLED = (
    "astronaut", "brick", "camera", "cat", "chelsea", "coffee", "coins", "colorwheel", "grass",
    "gravel", "horse", "hubble_deep_field", "immunohistochemistry", "logo", "moon", "page",
    "retina", "rocket", "text",
)

DATASET_FIELDS = {"format", "version", "name", "description", "licence", "sources", "scenarios"}
SOURCE_FIELDS = {"title", "credit", "url", "licence", "package"}
SCENARIO_FIELDS = {"id", "image", "turns", "occluders", "revelation_type", "reference_turn",
                   "template", "occludee", "notes", "licence", "occludee_box"}
TURN_FIELDS = {"instruction", "stage", "new_objects", "note", "actions"}

# The shipped sets stay beside the benchmark that runs them (respec/bench/samples/: a path users and
# docs name); this module only reads them.
SAMPLES_DIR = Path(__file__).resolve().parents[1] / "bench" / "samples"
SAMPLE_PHOTOS_DIR = SAMPLES_DIR / "photos"
SAMPLE_PREFIX = "sample:"


def sample_photo_ref(path: str | Path) -> str:
    """The relocatable reference ('sample:astronaut.png') of a photo that ships with the pack."""
    return SAMPLE_PREFIX + Path(path).name


MAX_LISTED_PROBLEMS = 50


class ScenarioError(InputError):
    """A dataset file breaks the scenario format. `.problems` lists (scenario id, field, message)."""

    def __init__(self, where: str, problems: list[tuple[str | None, str, str]]):
        self.where = where
        self.problems = list(problems)
        lines = [f"{where}: {len(problems)} problem(s) in the scenario file:"]
        # Values from the file are echoed cut short (an id may be a megabyte long), and only the
        # first problems are listed: the message stays readable whatever the file holds.
        for sid, fld, msg in problems[:MAX_LISTED_PROBLEMS]:
            who = f"scenario {clip_text(sid, 80)!r}" if sid is not None else "dataset"
            lines.append(f"  - {where}: {who}, field '{clip_text(fld, 80)}': {clip_text(msg, 500)}")
        if len(problems) > MAX_LISTED_PROBLEMS:
            lines.append(f"  ... and {len(problems) - MAX_LISTED_PROBLEMS} more problem(s)")
        lines.append("Fix these fields (the format is described in docs/benchmark.md and "
                     "respec/bench/scenario.schema.json), then run `python -m respec validate FILE`.")
        super().__init__("\n".join(lines))


@dataclass(frozen=True)
class ScenarioTurn:
    """One user turn of a scenario: P_t, its stage, and the objects it introduces."""

    instruction: str
    stage: str
    new_objects: tuple[str, ...] = ()
    note: str = ""
    actions: tuple[geometry.Action, ...] = ()   # optional geometry (respec/occur/geometry.py)

    def to_dict(self) -> dict:
        """JSON-able, as written in a scenario file (empty optional fields left out)."""
        d = {"instruction": self.instruction, "stage": self.stage, "new_objects": list(self.new_objects)}
        if self.note:
            d["note"] = self.note
        if self.actions:
            d["actions"] = [a.to_dict() for a in self.actions]
        return d


@dataclass(frozen=True)
class Scenario:
    """One OCCUR scenario (validated). Turns are 1-based: `turns[t-1]` makes I_t."""

    id: str
    image: str
    turns: tuple[ScenarioTurn, ...]
    occluders: tuple[str, ...]
    revelation_type: str
    reference_turn: int
    template: str
    occludee: str = ""
    notes: str = ""
    licence: str = ""
    base_dir: str = ""          # folder that relative image paths are resolved against
    dataset: str = ""           # the dataset's name
    occludee_box: geometry.Box | None = None   # optional geometry, fractions of I_0 (see geometry.py)

    # -- derived ---------------------------------------------------------------------------
    @property
    def num_turns(self) -> int:
        """N, the number of edit turns (2-5 in the paper)."""
        return len(self.turns)

    @property
    def stages(self) -> str:
        """The stage string, e.g. 'SOMR'."""
        return "".join(t.stage for t in self.turns)

    @property
    def occlusion_turn(self) -> int:
        """t of the occlusion (O) turn."""
        return self.stages.index("O") + 1

    @property
    def restoration_turn(self) -> int:
        """t of the revelation (R) turn: the turn whose ground truth says 'restoration'."""
        return self.stages.index("R") + 1

    @property
    def reference_distance(self) -> int:
        """Paper D.2: turns between the restoration reference and the final revelation turn."""
        return self.restoration_turn - self.reference_turn

    @property
    def has_geometry(self) -> bool:
        """Whether the scenario carries the geometry the simulated editor needs."""
        return self.occludee_box is not None

    @property
    def occluder(self) -> str:
        """The occluder label (several joined with ' + ' for multi-occluder scenarios)."""
        return " + ".join(self.occluders)

    def is_restoration(self, t: int) -> bool:
        """Ground truth: does turn t reveal the occludee? (the paper's runner uses this flag)."""
        return 1 <= t <= self.num_turns and self.turns[t - 1].stage == "R"

    def new_labels_per_turn(self) -> list[list[str]]:
        """For I_1..I_N: the labels of every new (non-occluder) object introduced so far.

        An object added at turn t stays in the picture afterwards, so the new-object mask of
        I_t looks for everything introduced at turns <= t (appendix A.5's M^t_new)."""
        seen: list[str] = []
        out: list[list[str]] = []
        for turn in self.turns:
            for label in turn.new_objects:
                if label not in seen:
                    seen.append(label)
            out.append(list(seen))
        return out

    def load_image(self, max_side: int | None = None, multiple: int = 16, min_side: int = 64) -> Image.Image:
        """I_0 as an RGB PIL image, resized so its longer side is `max_side` (None/0: original
        size) and both sides are multiples of `multiple` (editors work on latent grids)."""
        img = load_image_ref(self.image, self.base_dir)
        size = fit_size(img.size, max_side, multiple, min_side)
        return img if size == img.size else img.resize(size, Image.LANCZOS)

    def to_dict(self) -> dict:
        """The scenario as it appears in a dataset file (plus nothing derived)."""
        d: dict[str, Any] = {"id": self.id, "image": self.image, "template": self.template,
                             "revelation_type": self.revelation_type, "occluders": list(self.occluders),
                             "reference_turn": self.reference_turn,
                             "turns": [t.to_dict() for t in self.turns]}
        for k in ("occludee", "notes", "licence"):
            if getattr(self, k):
                d[k] = getattr(self, k)
        if self.occludee_box is not None:
            d["occludee_box"] = [round(v, 4) for v in self.occludee_box]
        return d

    def summary(self) -> dict:
        """The scenario's derived facts (what the results rows and the report group by)."""
        return {"scenario_id": self.id, "dataset": self.dataset, "template": self.template,
                "stages": self.stages, "num_turns": self.num_turns,
                "revelation_type": self.revelation_type, "occluders": list(self.occluders),
                "occlusion_turn": self.occlusion_turn, "restoration_turn": self.restoration_turn,
                "reference_turn": self.reference_turn, "reference_distance": self.reference_distance}


@dataclass(frozen=True)
class Dataset:
    """A validated scenario file."""

    name: str
    scenarios: tuple[Scenario, ...]
    path: str = ""
    description: str = ""
    licence: str = ""
    version: int = FORMAT_VERSION
    sources: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.scenarios)

    def __getitem__(self, i: int) -> Scenario:
        return self.scenarios[i]

    def __iter__(self):
        return iter(self.scenarios)

    def by_id(self, scenario_id: str) -> Scenario:
        """The scenario with this id; an InputError naming the dataset when there is none."""
        for s in self.scenarios:
            if s.id == scenario_id:
                return s
        raise InputError(f"{self.path or self.name}: no scenario with id {scenario_id!r}")


# ------------------------------------------------------------------------------ images

def fit_size(size: tuple[int, int], max_side: int | None, multiple: int = 16, min_side: int = 64) -> tuple[int, int]:
    """(w, h) scaled so the longer side is max_side (None/0 keeps the scale), rounded to
    multiples of `multiple`, each side at least `min_side`."""
    w, h = size
    if max_side:
        s = float(max_side) / max(w, h)
        w, h = w * s, h * s
    m = max(1, int(multiple))
    w = max(min_side, int(round(w / m)) * m)
    h = max(min_side, int(round(h / m)) * m)
    return (int(w), int(h))


def image_ref_problem(ref: Any, base_dir: str | Path | None) -> str | None:
    """Why `ref` is not a usable image reference, or None when it is."""
    if not isinstance(ref, str) or not ref.strip():
        return ("must be a non-empty string: a path relative to the dataset file, 'sample:<file>', "
                "'skimage:<name>' or 'matplotlib:<file>'")
    if ref.startswith(SAMPLE_PREFIX):
        name = ref[len(SAMPLE_PREFIX):]
        shipped = sorted(p.name for p in SAMPLE_PHOTOS_DIR.iterdir()) if SAMPLE_PHOTOS_DIR.is_dir() else []
        if not _PHOTO_NAME.fullmatch(name) or name not in shipped:
            return f"unknown shipped photo {name!r}; the pack ships: {', '.join(shipped) or 'none'}"
        return None
    if ref.startswith("skimage:"):
        name = ref.split(":", 1)[1]
        if name not in SKIMAGE_BUNDLED:
            return f"unknown scikit-image sample {name!r}; bundled ones: {', '.join(SKIMAGE_BUNDLED)}"
        return None
    if ref.startswith("matplotlib:"):
        name = ref.split(":", 1)[1]
        if not re.fullmatch(r"[A-Za-z0-9_.-]+\.(png|jpg|jpeg)", name):
            return f"matplotlib sample {name!r} must be an image file name such as 'grace_hopper.jpg'"
        return None
    if "\x00" in ref:
        return "contains a NUL character"
    p = Path(ref)
    if not p.is_absolute() and base_dir is not None:
        p = Path(base_dir) / p
    if not os.path.lexists(p) or (p.is_symlink() and not p.exists()):
        return f"image file {str(p)!r} does not exist (relative paths are resolved against the dataset file's folder)"
    problem = image_file_problem(p)
    return f"image file {str(p)!r} {problem}" if problem else None


def _decode_ref(ref: str, base_dir: str) -> np.ndarray:
    if ref.startswith(SAMPLE_PREFIX):
        arr = np.asarray(open_image(SAMPLE_PHOTOS_DIR / ref[len(SAMPLE_PREFIX):], "shipped photo").convert("RGB"))
    elif ref.startswith("skimage:"):
        import skimage.data
        arr = getattr(skimage.data, ref.split(":", 1)[1])()
    elif ref.startswith("matplotlib:"):
        import matplotlib.cbook
        name = ref.split(":", 1)[1]
        try:
            with matplotlib.cbook.get_sample_data(name) as fh:
                arr = np.asarray(Image.open(fh).convert("RGB"))
        except (OSError, ValueError) as e:
            raise InputError(f"matplotlib sample image {name!r} is not installed: {e}") from e
    else:
        p = Path(ref)
        if not p.is_absolute():
            p = Path(base_dir) / p
        im = open_image(p, "the scenario image")
        arr = np.asarray(im.convert("RGBA" if "A" in im.getbands() else "RGB"))
    out = rgb_array(arr)
    out.flags.writeable = False
    return out


def load_image_ref(ref: str, base_dir: str | Path | None = None) -> Image.Image:
    """An image reference -> RGB PIL image ('sample:astronaut.png', 'skimage:astronaut',
    'matplotlib:grace_hopper.jpg', or a path, relative paths against `base_dir`), decoded on every
    call (the runner loads a scenario's I_0 once for all its configs; the scenario generator keeps
    its photos in the analysis cache, respec/sim/generate.py)."""
    problem = image_ref_problem(ref, base_dir)
    if problem:
        raise InputError(f"image {ref!r}: {problem}")
    return Image.fromarray(_decode_ref(ref, str(base_dir or "")))


# ------------------------------------------------------------------------------ validation

@dataclass
class _ScenarioCheck:
    """One scenario being validated: the raw object, the problems found so far, what has parsed so far.

    `_validate_scenario` runs the numbered _check_* steps over it in order (so the problems come out in
    the same order as the fields are read); each step records what it parsed for the later ones."""
    raw: dict
    base_dir: str
    problems: list
    sid_for_msg: str
    n_before: int = 0
    occluders: list = field(default_factory=list)
    rtype: Any = None
    raw_turns: Any = None
    turns: list = field(default_factory=list)
    stages: str = ""
    template: str | None = None
    derived: str = ""
    occ_turn: int | None = None
    res_turn: int | None = None
    occludee: str = ""
    occludee_box: Any = None

    def bad(self, fld: str, msg: str) -> None:
        self.problems.append((self.sid_for_msg, fld, msg))


def _validate_scenario(raw: Any, index: int, base_dir: str, problems: list) -> Scenario | None:
    """Scenario `index` of a dataset, or None with its problems appended to `problems`."""
    if not isinstance(raw, dict):
        problems.append((f"#{index}", f"scenarios[{index}]", f"must be an object, got {type(raw).__name__}"))
        return None
    sid = raw.get("id")
    ok_id = isinstance(sid, str) and _ID_RE.match(sid)
    c = _ScenarioCheck(raw, base_dir, problems, sid if ok_id else f"#{index}", n_before=len(problems))
    _check_fields(c)                  # 1. field names, id, required fields, image, strings
    _check_occluders(c)               # 2. occluder labels and the revelation type
    _check_turns(c)                   # 3. each turn
    _check_stages(c)                  # 4. the stages' order and the template
    _check_instructions(c)            # 5. no restoration asked for, occludee not named
    _check_geometry(c)                # 6. the sim editor's geometry (all or nothing)
    ref = _check_reference_turn(c)    # 7. I_ref before the occlusion and after any restyle
    if len(problems) > c.n_before:
        return None
    return Scenario(id=sid, image=raw["image"], turns=tuple(c.turns), occluders=tuple(c.occluders),
                    revelation_type=c.rtype, reference_turn=ref, template=c.template or c.derived,
                    occludee=c.occludee, notes=raw.get("notes", ""), licence=raw.get("licence", ""),
                    base_dir=base_dir, occludee_box=c.occludee_box)


def _check_fields(c: _ScenarioCheck) -> None:
    raw, bad, sid = c.raw, c.bad, c.raw.get("id")
    for k in sorted(set(raw) - SCENARIO_FIELDS):
        bad(k, f"unknown field; allowed: {', '.join(sorted(SCENARIO_FIELDS))}")
    if not (isinstance(sid, str) and _ID_RE.match(sid)):
        bad("id", f"must be 1-80 characters of letters, digits, '_', '.', '-'; got {sid!r}")
    for k in ("id", "image", "turns", "occluders", "revelation_type", "reference_turn"):
        if k not in raw:
            bad(k, "is required")
    if "image" in raw:
        p = image_ref_problem(raw["image"], c.base_dir)
        if p:
            bad("image", p)
    for k in ("occludee", "notes", "licence", "template"):
        if k in raw and not isinstance(raw[k], str):
            bad(k, f"must be a string, got {type(raw[k]).__name__}")


def _check_occluders(c: _ScenarioCheck) -> None:
    raw, bad = c.raw, c.bad
    if "occluders" in raw:
        occ = raw["occluders"]
        if isinstance(occ, str):
            occ = [occ]
        if not isinstance(occ, list) or not occ or not all(isinstance(o, str) and o.strip() for o in occ):
            bad("occluders", "must be a non-empty list of non-empty labels (the detector's text queries)")
        elif len(set(occ)) != len(occ):
            bad("occluders", f"labels repeat: {occ}")
        else:
            c.occluders = [o.strip() for o in occ]
    c.rtype = rtype = raw.get("revelation_type")
    if "revelation_type" in raw:
        if rtype not in REVELATION_TYPES:
            bad("revelation_type", f"must be one of {', '.join(REVELATION_TYPES)}; got {rtype!r}")
        elif c.occluders:
            if rtype == "multi" and len(c.occluders) < 2:
                bad("occluders", "a 'multi' revelation needs at least two occluders")
            if rtype != "multi" and len(c.occluders) != 1:
                bad("occluders", f"a {rtype!r} revelation has exactly one occluder (use 'multi' for several); "
                                 f"got {c.occluders}")


def _check_turns(c: _ScenarioCheck) -> None:
    c.raw_turns = raw_turns = c.raw.get("turns")
    if "turns" not in c.raw:
        return
    if not isinstance(raw_turns, list) or len(raw_turns) < 2:
        c.bad("turns", "must be a list of at least two turns (an occlusion and a revelation)")
        c.raw_turns = raw_turns = raw_turns if isinstance(raw_turns, list) else []
    for i, rt in enumerate(raw_turns):
        turn = _check_turn(c, i, rt)
        if turn is not None:
            c.turns.append(turn)


def _check_turn(c: _ScenarioCheck, i: int, rt: Any) -> ScenarioTurn | None:
    f, bad = f"turns[{i}]", c.bad
    if not isinstance(rt, dict):
        bad(f, f"must be an object, got {type(rt).__name__}")
        return None
    for k in sorted(set(rt) - TURN_FIELDS):
        bad(f"{f}.{k}", f"unknown field; allowed: {', '.join(sorted(TURN_FIELDS))}")
    ins = rt.get("instruction")
    if not isinstance(ins, str) or not ins.strip():
        bad(f"{f}.instruction", "must be a non-empty string")
        ins = ""
    stage = rt.get("stage")
    if stage not in STAGES:
        bad(f"{f}.stage", f"must be one of O, M, S, R; got {stage!r}")
        stage = "?"
    new = rt.get("new_objects", [])
    if not isinstance(new, list) or not all(isinstance(o, str) and o.strip() for o in new):
        bad(f"{f}.new_objects", "must be a list of non-empty labels")
        new = []
    clash = [o for o in new if o.strip() in c.occluders]
    if clash:
        bad(f"{f}.new_objects", f"{clash} is an occluder label; occluders are listed in 'occluders' only")
    note = rt.get("note", "")
    if not isinstance(note, str):
        bad(f"{f}.note", "must be a string")
        note = ""
    actions: tuple = ()
    if "actions" in rt:
        shape: list[tuple[str, str]] = []
        actions = geometry.parse_actions(rt["actions"], f"{f}.actions", shape)
        for fld, msg in shape:
            bad(fld, msg)
    return ScenarioTurn(ins.strip(), stage, tuple(o.strip() for o in new), note, actions)


def _check_stages(c: _ScenarioCheck) -> None:
    bad, turns = c.bad, c.turns
    c.stages = stages = "".join(t.stage for t in turns)
    c.template = template = c.raw.get("template") if isinstance(c.raw.get("template"), str) else None
    c.derived = derived = TEMPLATE_BY_STAGES.get(stages, CUSTOM_TEMPLATE)
    if not turns or "?" in stages:
        return
    if stages.count("O") != 1:
        bad("turns", f"needs exactly one occlusion (O) turn; stages are {stages!r}")
    if stages.count("R") != 1 or not stages.endswith("R"):
        bad("turns", f"needs exactly one revelation (R) turn, and it must be the last; stages are {stages!r}")
    if stages.count("O") == 1 and stages.count("R") == 1 and stages.index("O") < stages.index("R"):
        c.occ_turn, c.res_turn = stages.index("O") + 1, stages.index("R") + 1
    elif stages.count("O") == 1 and "R" in stages:
        bad("turns", f"the occlusion must come before the revelation; stages are {stages!r}")
    if template is not None and template != derived:
        if template in TEMPLATES:
            bad("template", f"{template!r} means stages {TEMPLATES[template]!r} but the turns are {stages!r}")
        elif template != CUSTOM_TEMPLATE:
            bad("template", f"unknown template {template!r}; table 3's are {', '.join(TEMPLATES)} "
                            f"(or 'custom'; it can also be left out: it is derived from the stages)")
        else:
            bad("template", f"the stages {stages!r} are table 3's {derived!r}; say so or leave 'template' out")
    if c.rtype == "replace" and c.res_turn and not turns[c.res_turn - 1].new_objects:
        bad(f"turns[{c.res_turn - 1}].new_objects",
            "a 'replace' revelation introduces the replacement object: list its label here "
            "(otherwise its pixels would count as restored content)")


def _check_instructions(c: _ScenarioCheck) -> None:
    # Instructions never mention restoration (paper §3.1); from the occlusion on they also
    # never name the occludee (an earlier turn may edit it: appendix A.4).
    occludee = c.raw.get("occludee") if isinstance(c.raw.get("occludee"), str) else ""
    c.occludee = occludee
    occludee_key = re.sub(r"^(the|a|an)\s+", "", occludee.strip().lower())
    for i, t in enumerate(c.turns):
        m = _RESTORE_WORDS.search(t.instruction)
        if m:
            c.bad(f"turns[{i}].instruction", f"asks for restoration ({m.group(0)!r}); OCCUR instructions never "
                                             f"request the hidden content back")
        if c.occ_turn and i + 1 >= c.occ_turn and occludee_key and occludee_key in t.instruction.lower():
            c.bad(f"turns[{i}].instruction", f"names the occludee ({occludee!r}); from the occlusion on, "
                                             f"instructions never mention it")


def _check_geometry(c: _ScenarioCheck) -> None:
    raw, bad = c.raw, c.bad
    with_actions = [i for i, rt in enumerate(c.raw_turns or []) if isinstance(rt, dict) and "actions" in rt]
    if "occludee_box" in raw:
        p = geometry.box_problem(raw["occludee_box"])
        if p:
            bad("occludee_box", p)
        else:
            c.occludee_box = geometry.as_box(raw["occludee_box"])
        missing = [i for i in range(len(c.turns)) if i not in with_actions]
        if missing:
            bad("turns", f"with an occludee_box every turn needs 'actions' (the geometry is all or nothing); "
                         f"turns {missing} have none")
    elif with_actions:
        bad("occludee_box", f"turns {with_actions} have 'actions': the geometry then needs the occludee_box too")
    # The geometry's own rules only once everything else holds (they read the stages and labels).
    if (c.occludee_box is not None and c.occ_turn and c.res_turn and len(c.problems) == c.n_before
            and c.rtype in REVELATION_TYPES):
        for fld, msg in geometry.validate_geometry(c.occludee_box, c.stages, [t.actions for t in c.turns],
                                                   [t.new_objects for t in c.turns], tuple(c.occluders), c.rtype):
            bad(fld, msg)


def _check_reference_turn(c: _ScenarioCheck) -> Any:
    ref, bad, occ_turn = c.raw.get("reference_turn"), c.bad, c.occ_turn
    if "reference_turn" not in c.raw:
        return ref
    if not isinstance(ref, int) or isinstance(ref, bool):
        bad("reference_turn", f"must be an integer image id (0 = the original image); got {ref!r}")
    elif occ_turn is not None:
        if not 0 <= ref < occ_turn:
            bad("reference_turn", f"must be an image before the occlusion (0..{occ_turn - 1}); got {ref}")
        else:
            styles = [i + 1 for i, t in enumerate(c.turns[: occ_turn - 1]) if t.stage == "S"]
            if styles and ref < styles[-1]:
                bad("reference_turn", f"turn {styles[-1]} restyles the whole picture, so I_ref is "
                                      f"turn {styles[-1]} or later; got {ref}")
    return ref


def validate_dataset(data: Any, where: str = "<dataset>", base_dir: str | Path | None = None) -> Dataset:
    """Validate a parsed dataset object; raise ScenarioError listing every problem."""
    problems: list[tuple[str | None, str, str]] = []
    base = str(base_dir) if base_dir is not None else ""
    if not isinstance(data, dict):
        raise ScenarioError(where, [(None, "(top level)", f"must be a JSON object with 'format' and 'scenarios'; "
                                                          f"got {type(data).__name__}")])
    for k in sorted(set(data) - DATASET_FIELDS):
        problems.append((None, k, f"unknown field; allowed: {', '.join(sorted(DATASET_FIELDS))}"))
    if data.get("format") != FORMAT:
        problems.append((None, "format", f"must be {FORMAT!r}; got {data.get('format')!r}"))
    if data.get("version", FORMAT_VERSION) != FORMAT_VERSION:
        problems.append((None, "version", f"this pack reads version {FORMAT_VERSION}; got {data.get('version')!r}"))
    for k in ("name", "description", "licence"):
        if k in data and not isinstance(data[k], str):
            problems.append((None, k, "must be a string"))
    sources = data.get("sources", {})
    if not isinstance(sources, dict):
        problems.append((None, "sources", "must be an object mapping image references to {title, credit, url, licence}"))
        sources = {}
    for ref, info in sources.items():
        if not isinstance(info, dict):
            problems.append((None, f"sources[{ref!r}]", "must be an object"))
            continue
        for k in sorted(set(info) - SOURCE_FIELDS):
            problems.append((None, f"sources[{ref!r}].{k}", f"unknown field; allowed: {', '.join(sorted(SOURCE_FIELDS))}"))
        if not isinstance(info.get("licence"), str) or not info.get("licence"):
            problems.append((None, f"sources[{ref!r}].licence", "is required: say under which licence the image may be used"))
    raw_scenarios = data.get("scenarios")
    if not isinstance(raw_scenarios, list) or not raw_scenarios:
        problems.append((None, "scenarios", "must be a non-empty list of scenarios"))
        raw_scenarios = []
    name = data.get("name") if isinstance(data.get("name"), str) and data.get("name") else Path(where).stem
    scenarios: list[Scenario] = []
    seen: dict[str, int] = {}
    for i, raw in enumerate(raw_scenarios):
        s = _validate_scenario(raw, i, base, problems)
        rid = raw.get("id") if isinstance(raw, dict) else None
        if isinstance(rid, str):
            if rid in seen:
                problems.append((rid, "id", f"repeats scenario #{seen[rid]}'s id; ids must be unique"))
            seen.setdefault(rid, i)
        if s is not None:
            scenarios.append(replace(s, dataset=name))
    if problems:
        raise ScenarioError(where, problems)
    return Dataset(name=name, scenarios=tuple(scenarios), path=where, description=data.get("description", ""),
                   licence=data.get("licence", ""), version=data.get("version", FORMAT_VERSION),
                   sources=dict(sources))


def packaged_datasets() -> dict[str, Path]:
    """Scenario files that ship with the pack: name -> path."""
    return {p.stem: p for p in sorted(SAMPLES_DIR.glob("*.json"))}


def resolve_dataset(name_or_path: str | Path | None) -> Path:
    """A dataset file path from a path, or a packaged sample's name (default: 'occur_sample')."""
    if name_or_path in (None, ""):
        name_or_path = "occur_sample"
    p = Path(str(name_or_path)).expanduser()
    if p.is_file():
        return p.resolve()
    packaged = packaged_datasets()
    key = p.name[:-5] if p.name.endswith(".json") else p.name
    if key in packaged and (len(p.parts) == 1):
        return packaged[key]
    raise InputError(f"dataset {str(name_or_path)!r} not found: give a path to a scenario JSON file or the name "
                     f"of a packaged set ({', '.join(packaged) or 'none installed'})")


def resolve_workflow_dataset(name: str) -> Path:
    """The file a workflow's dataset value names: a packaged set by name, else a scenario file
    inside ComfyUI's input/respec_datasets folder (anything outside it is refused)."""
    key = (name or "").strip() or "occur_sample"
    packaged = packaged_datasets()
    stem = key[:-5] if key.endswith(".json") else key
    if stem in packaged and len(PurePath(key).parts) == 1:
        return packaged[stem]
    path = paths.confine(key, paths.datasets_dir(), "the dataset")
    if not path.is_file():
        raise InputError(f"dataset {key!r} not found in {paths.datasets_dir()}: put the scenario JSON file "
                         f"(and its images) there, or name a packaged set ({', '.join(packaged)})")
    return path


def load_workflow_dataset(name: str) -> Dataset:
    """A dataset a workflow names (see resolve_workflow_dataset); the image files of a dataset from
    input/respec_datasets must lie in that folder too, so a scenario file cannot read others."""
    path = resolve_workflow_dataset(name)
    ds = load_dataset(path)
    if path not in packaged_datasets().values():
        confine_images(ds, paths.datasets_dir())
    return ds


def confine_images(ds: Dataset, root: str | Path) -> None:
    """Refuse (InputError) a scenario whose image file lies outside `root` once links are resolved
    (the rule of the Bench node and of `validate`); packaged samples are not files and pass."""
    for sc in ds.scenarios:
        if not _BUILTIN_REF.match(sc.image):
            ref = Path(sc.image) if Path(sc.image).is_absolute() else Path(sc.base_dir) / sc.image
            paths.confine(str(ref), Path(root), f"scenario {sc.id!r}'s image")


def load_dataset(name_or_path: str | Path | None = None) -> Dataset:
    """Read and validate a dataset file (a path or a packaged sample's name)."""
    path = resolve_dataset(name_or_path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ScenarioError(str(path), [(None, "(file)", f"is not valid JSON: {e}")]) from None
    except UnicodeDecodeError as e:
        raise ScenarioError(str(path), [(None, "(file)", f"is not valid UTF-8 (byte {e.start}); scenario files "
                                                         f"are UTF-8 JSON")]) from None
    except RecursionError:
        raise ScenarioError(str(path), [(None, "(file)", "is nested too deeply to read; a scenario file is a few "
                                                         "levels deep")]) from None
    except OSError as e:
        raise InputError(f"could not read the dataset file {path}: {e}") from e
    return validate_dataset(data, str(path), path.parent)
