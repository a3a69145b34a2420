"""Describe a ComfyUI graph once in Python; write it in UI format and in API format.

Used by scripts/workflows/build_workflows.py (which holds the graphs) and by the tests. Node input specs
come from the pack's registered nodes (their INPUT_TYPES, read the way ComfyUI's /object_info
reads them) and, for ComfyUI's own nodes, from scripts/workflows/comfy_core_nodes.json, a table taken
from a real ComfyUI's /object_info (`python scripts/workflows/build_workflows.py --refresh-core URL`).
So widget order, socket types and defaults always match what ComfyUI will load.

UI format (what the frontend saves, drag-and-drop, template browser): nodes with id, type,
pos, size, flags, order, mode, properties, inputs (sockets, plus widgets that are fed by a
link), outputs, widgets_values (widget inputs in INPUT_TYPES order, a "control after generate"
value after seed widgets and an "image" value after an upload widget); links as
[id, from, from_slot, to, to_slot, "TYPE"]. API format (what POST /prompt takes):
{id: {"class_type", "inputs", "_meta": {"title"}}}.

A node can be written bypassed (UI mode 4, an option the user switches on with Ctrl+B): it is in
the UI file only, and the API file is what the frontend's graphToPrompt makes of it (see
`resolve_bypass`).
"""
from __future__ import annotations

import importlib.util
import json
import sys
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CORE_TABLE = Path(__file__).resolve().parent / "comfy_core_nodes.json"
PACK_MODULE = "ReSpec-ComfyUI-workflows"

WIDGET_TYPES = ("INT", "FLOAT", "STRING", "BOOLEAN", "COMBO")
# A V3 node's combo whose options add inputs (TextGenerate's sampling_mode). Only options that
# add none are used here: then it is a plain combo of the option keys, in both formats.
DYNAMIC_COMBO = "COMFY_DYNAMICCOMBO_V3"
BYPASS = 4   # LiteGraph's mode of a bypassed node (0 = always)
# Frontend-only nodes: they live in UI files and never reach /prompt.
UI_ONLY_NODES = {
    "Note": {"widgets": ["text"]},
    "MarkdownNote": {"widgets": ["text"]},
}

# ------------------------------------------------------------------------------ layout
# What the frontend draws (LiteGraph, measured in frontends 1.35.9-1.58.1): a node's title bar,
# 30 px, sits above its pos; its body is 6 + 20 per socket row + 8 + 24 per widget (when it has
# any) + 30 per multiline text box px tall, and at least as wide as its title needs (about 7.9 px
# a character + 30). A node that shows a picture it receives (Preview / Save Image, Mask Preview)
# grows by up to about 300 px when one arrives, so nothing is placed in that room below it.
TITLE_H = 30
MIN_WIDTH = 280
IMAGE_ROOM = 300
SHOWS_IMAGE = {"PreviewImage", "SaveImage", "MaskPreview"}
LOAD_PREVIEW = 240        # Load Image draws the picked picture inside its own box
# Widgets newer ComfyUIs add to a core node beyond the 0.8.0 specs the files are written from (the
# frontend draws them, taller): CFGNorm's optional pre_cfg (0.24+).
NEWER_WIDGETS = {"CFGNorm": 1}
MULTILINE_EXTRA = 60      # a text box a few lines taller than the frontend's minimum, to read the request
# The saved view (extra.ds) is fitted to the graph's main chain for this canvas (a 1920 x 1080
# screen's browser window), at least READABLE_SCALE: the frontend stops drawing node text below
# 8 px / 14 px = 0.57 (its default "level of detail" threshold).
REFERENCE_VIEWPORT = (1920, 960)
READABLE_SCALE = 0.6
# A group's box reaches this far beside its nodes: less than half the narrowest gap between columns, so
# the boxes of groups in neighbouring columns do not overlap.
GROUP_PAD_X = 12
FIT_ZOOM = 0.75           # the frontend's own fitView fills 75 % of the canvas (LGraphCanvas.fitToBounds)
# Nodes 2.0 (the frontend's Vue nodes) draws a node taller than its classic size: a pack node by its
# "ReSpec" badge row and the widgets it shows unfolded, a core node by a few px. Graph px, measured in
# frontend 1.58.1 (check_vue_nodes' "taller than laid out" notes, 2026-12-07) and rounded up; the
# layout keeps that much free below an open node, so neither renderer overlaps nodes.
VUE_EXTRA = {"CFGNorm": 36, "DualCFGGuider": 16, "FluxKontextMultiReferenceLatentMethod": 32, "MarkdownNote": 0,
             "ReSpecDriftGuard": 36, "ReSpecEditorImageSlots": 36, "ReSpecFlux2Loader": 68, "ReSpecHistoryStore": 72,
             "ReSpecInstructionRewriter": 32, "ReSpecMaskerLoader": 56, "ReSpecOccurScore": 32,
             "ReSpecOmniGen2Loader": 44, "ReSpecPlanFromText": 32, "ReSpecReferenceConditioning": 32,
             "ReSpecReferenceSelector": 32, "ReSpecResultsWriter": 56, "ReSpecSam3OccluderMask": 32,
             "ReSpecSam3Query": 40, "ReSpecScenarioLoader": 24, "ReSpecScenarioMasks": 36, "ReSpecScenarioTurn": 32,
             "ReSpecScorerLoader": 44, "ReSpecTurnSwitch": 36, "ReSpecVLMLoader": 80, "SAM3_Detect": 16}
VUE_EXTRA_PACK, VUE_EXTRA_CORE = 40, 12   # a type not measured yet
# A markdown note in Nodes 2.0 grows to its text: about this many px² per character (measured: 1916
# characters at 280 px wide drew 720 px tall); a note is made at least that tall.
NOTE_CHAR_AREA = 105
NOTE_MARGIN = 40


def vue_extra(class_type: str) -> int:
    """Graph px Nodes 2.0 draws a node of `class_type` taller than its classic size (VUE_EXTRA)."""
    default = VUE_EXTRA_PACK if class_type.startswith("ReSpec") else VUE_EXTRA_CORE
    return VUE_EXTRA.get(class_type, default)


def note_height(text: str, width: int) -> int:
    """The height a markdown note of `text` takes at `width` px in Nodes 2.0 (NOTE_CHAR_AREA)."""
    return int(NOTE_CHAR_AREA * len(text) / max(width - 20, 100)) + NOTE_MARGIN


def fit_scale(bounds: tuple[float, float, float, float], viewport=REFERENCE_VIEWPORT, zoom: float = FIT_ZOOM) -> float:
    """The zoom the frontend's fitView gives `bounds` (x, y, w, h) on `viewport` (its fitToBounds)."""
    return min(zoom * viewport[0] / max(bounds[2], 300), zoom * viewport[1] / max(bounds[3], 300))


# ------------------------------------------------------------------------------ node specs

def load_pack(name: str = PACK_MODULE):
    """Import the repo folder as a package (as ComfyUI does), without touching sys.path."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "__init__.py",
                                                  submodule_search_locations=[str(ROOT)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _v1_entry(entry):
    """An input as a V1 node declares it: a V3 drop-down ("COMBO", {"options": [...]}) as its list."""
    kind, *rest = entry
    opts = dict(rest[0]) if rest else {}
    if kind == "COMBO" and "options" in opts:
        kind = opts.pop("options")
        opts.pop("multiselect", None)
    return (kind, opts) if rest else (kind,)


def spec_of_class(name: str, cls, display_name: str | None = None) -> dict:
    """What ComfyUI's /object_info says about a node class (a V3 one's drop-downs written the V1 way,
    as the graphs hold the same values for both)."""
    inputs = {section: {k: _v1_entry(v) if section != "hidden" else v for k, v in specs.items()}
              for section, specs in cls.INPUT_TYPES().items()}
    outputs = list(cls.RETURN_TYPES)
    return {
        "input": inputs,
        "input_order": {k: list(v.keys()) for k, v in inputs.items()},
        "output": outputs,
        "output_is_list": list(getattr(cls, "OUTPUT_IS_LIST", [False] * len(outputs))),
        "output_name": list(getattr(cls, "RETURN_NAMES", outputs)),
        "name": name,
        "display_name": display_name or name,
        "category": getattr(cls, "CATEGORY", ""),
        "output_node": bool(getattr(cls, "OUTPUT_NODE", False)),
        "python_module": "custom_nodes.ReSpec",
    }


def pack_specs(pack=None) -> dict[str, dict]:
    """Specs of every node the pack registers."""
    pack = pack or load_pack()
    names = getattr(pack, "NODE_DISPLAY_NAME_MAPPINGS", {})
    return {n: spec_of_class(n, c, names.get(n)) for n, c in pack.NODE_CLASS_MAPPINGS.items()}


def core_specs() -> dict[str, dict]:
    """Specs of the ComfyUI core nodes the workflows use (read from a real ComfyUI)."""
    data = json.loads(CORE_TABLE.read_text(encoding="utf-8"))
    return data["nodes"]


def all_specs(pack=None) -> dict[str, dict]:
    specs = core_specs()
    for name, spec in pack_specs(pack).items():
        if name in specs:
            raise RuntimeError(f"pack node {name} shadows a ComfyUI core node")
        specs[name] = spec
    return specs


def input_entry(spec: dict, name: str) -> tuple[str, list]:
    """(section, [type, options]) of an input; section is required/optional/hidden."""
    for section in ("required", "optional", "hidden"):
        entries = spec.get("input", {}).get(section) or {}
        if name in entries:
            entry = entries[name]
            return section, list(entry) if isinstance(entry, (list, tuple)) else [entry]
    raise KeyError(name)


def ordered_inputs(spec: dict) -> list[tuple[str, str, list]]:
    """(name, section, entry) for required then optional inputs, in declaration order."""
    out = []
    for section in ("required", "optional"):
        entries = spec.get("input", {}).get(section) or {}
        order = (spec.get("input_order") or {}).get(section) or list(entries)
        out.extend((n, section, list(entries[n])) for n in order)
    return out


def input_type(entry: list) -> str:
    """The socket/widget type name: a list of choices is a COMBO."""
    t = entry[0]
    return "COMBO" if isinstance(t, (list, tuple)) or t == DYNAMIC_COMBO else str(t)


def input_options(entry: list) -> dict:
    return dict(entry[1]) if len(entry) > 1 and isinstance(entry[1], dict) else {}


def combo_choices(entry: list) -> list | None:
    t = entry[0]
    if isinstance(t, (list, tuple)):
        return list(t)
    if t == "COMBO":
        return list(input_options(entry).get("options", []))
    if t == DYNAMIC_COMBO:
        return [o["key"] for o in input_options(entry).get("options", [])]
    return None


def dynamic_option_inputs(entry: list, key) -> list:
    """The inputs a dynamic combo's option `key` adds (empty for a plain combo)."""
    if entry[0] != DYNAMIC_COMBO:
        return []
    for o in input_options(entry).get("options", []):
        if o["key"] == key:
            return [n for sec in ("required", "optional") for n in (o.get("inputs", {}).get(sec) or {})]
    return []


def is_widget(entry: list) -> bool:
    """Does the frontend draw this input as a widget (rather than only a socket)?"""
    opts = input_options(entry)
    if opts.get("forceInput"):
        return False
    return input_type(entry) in WIDGET_TYPES


def extra_widget_values(name: str, entry: list) -> list:
    """Values the frontend stores after a widget's own: seed control, upload button."""
    opts = input_options(entry)
    extra = []
    if input_type(entry) == "INT" and (opts.get("control_after_generate") or name in ("seed", "noise_seed")):
        extra.append("fixed")
    if opts.get("image_upload"):
        extra.append("image")
    return extra


def default_value(name: str, entry: list) -> Any:
    """What the frontend puts in a fresh widget."""
    opts = input_options(entry)
    if "default" in opts:
        return opts["default"]
    choices = combo_choices(entry)
    if choices is not None:
        if not choices:
            raise ValueError(f"input {name!r} lists files (none installed here): give its value explicitly")
        return choices[0]
    return {"INT": 0, "FLOAT": 0.0, "STRING": "", "BOOLEAN": False}[input_type(entry)]


def types_match(out_type: str, in_type: str) -> bool:
    """ComfyUI's link rule: equal type names (comma-separated unions allowed) or a wildcard."""
    if out_type == "*" or in_type == "*":
        return True
    a, b = set(out_type.split(",")), set(in_type.split(","))
    return bool(a & b)


# ------------------------------------------------------------------------------ the graph

def resolve_bypass(out: "Out") -> "Out | None":
    """The output a link from `out` carries once bypassed nodes are taken out, by the frontend's rule
    (graphToPrompt): a bypassed node passes on the input at the output's own slot index when that
    input has the output's type, else its first input of that type; that input's link is followed
    (through further bypassed nodes). None when no input has the type or it is not connected: the
    consumer's input is then left out of the prompt."""
    while out is not None and out.node.mode == BYPASS:
        slots = out.node.ui_slots()
        order = ([out.slot] if out.slot < len(slots) else []) + list(range(len(slots)))
        match = next((i for i in order if slots[i][1] == out.type), None)
        if match is None:
            return None
        value = slots[match][2]
        out = value if isinstance(value, Out) else None
    return out


class Out:
    """Output `slot` of `node`."""

    def __init__(self, node: "Node", slot: int):
        self.node, self.slot = node, slot

    @property
    def type(self) -> str:
        return self.node.spec["output"][self.slot]


class Node:
    def __init__(self, graph: "Graph", node_id: int, class_type: str, spec: dict | None,
                 inputs: dict, title: str | None, control: dict | None = None):
        self.graph, self.id, self.class_type, self.spec = graph, node_id, class_type, spec
        self.inputs, self.title, self.control = inputs, title, dict(control or {})
        self.at: tuple[int, int] | None = None
        self.mode = 0
        self.collapsed = False

    def size(self) -> list[int]:
        """[width, height] of the node's body as the frontend draws it (see TITLE_H ...)."""
        entries = ordered_inputs(self.spec)
        sockets = sum(1 for name, _, e in entries if not is_widget(e))
        widgets = sum(1 + len(extra_widget_values(name, e)) for name, _, e in entries if is_widget(e))
        widgets += NEWER_WIDGETS.get(self.class_type, 0)
        multiline = sum(1 for _, _, e in entries if is_widget(e) and input_options(e).get("multiline"))
        rows = max(sockets, len(self.spec["output"]))
        height = 6 + 20 * rows + (8 + 24 * widgets if widgets else 0) + (30 + MULTILINE_EXTRA) * multiline
        if any(input_options(e).get("image_upload") for _, _, e in entries):
            height += LOAD_PREVIEW
        return [max(MIN_WIDTH, _text_width(self.shown_title())), height]

    def room(self) -> int:
        """Free space to keep below the node: a picture it receives makes it grow; Nodes 2.0 draws an
        open node taller (vue_extra)."""
        if self.class_type in SHOWS_IMAGE:
            return IMAGE_ROOM
        return 0 if self.collapsed else vue_extra(self.class_type)

    def drawn(self) -> list[int]:
        """[width, height] of the body as first drawn: a collapsed node is its title bar alone (no
        wider than its open width; the file keeps the open size)."""
        return [self.size()[0], 0] if self.collapsed else self.size()

    def shown_title(self) -> str:
        return self.title or self.spec.get("display_name") or self.class_type

    def ui_slots(self) -> list[tuple[str, str, Any]]:
        """(name, type, value) of the node's input slots in the UI file's order: every socket input,
        then the widget inputs fed by a link."""
        sockets, widgets = [], []
        for name, _, entry in ordered_inputs(self.spec):
            value = self.inputs.get(name)
            if not is_widget(entry):
                sockets.append((name, input_type(entry), value))
            elif isinstance(value, Out):
                widgets.append((name, input_type(entry), value))
        return sockets + widgets

    def out(self, which: int | str = 0) -> Out:
        """An output by index or by its RETURN_NAME / type name."""
        if isinstance(which, int):
            if not 0 <= which < len(self.spec["output"]):
                raise IndexError(f"{self.class_type} has no output {which}")
            return Out(self, which)
        names = list(self.spec.get("output_name") or self.spec["output"])
        if which in names:
            return Out(self, names.index(which))
        if which in self.spec["output"]:
            return Out(self, self.spec["output"].index(which))
        raise KeyError(f"{self.class_type} has no output {which!r}; outputs: {names}")

    def __getitem__(self, which) -> Out:
        return self.out(which)


class Note:
    """A markdown note in the UI file (not a node of the prompt)."""

    def __init__(self, title: str, text: str, size: tuple[int, int], collapsed: bool = False):
        self.title, self.text, self.at = title, text, None
        self.id: int | None = None   # given when the UI file is written (after the graph's nodes)
        # At least as tall as Nodes 2.0 draws its text, so it does not grow over the node below it.
        self._size = [int(size[0]), max(int(size[1]), note_height(text, int(size[0])))]
        self.collapsed = collapsed

    def size(self) -> list[int]:
        return list(self._size)

    def room(self) -> int:
        return 0

    def drawn(self) -> list[int]:
        return [self._size[0], 0] if self.collapsed else self.size()


def _text_width(title: str) -> int:
    """The width a node needs for its title (rounded up to 10 px)."""
    return -(-int(7.9 * len(title) + 30) // 10) * 10


class Graph:
    """A workflow under construction. `node()` checks every input against the spec."""

    def __init__(self, name: str, specs: dict[str, dict], *, title: str = "", summary: str = "",
                 description: str = ""):
        """`name`: the graph's key (its id derives from it); `title`: what the template browser shows
        (the file name); `summary`: a one-line heading; `description`: what it does."""
        self.name, self.specs, self.title, self.description = name, specs, title or name, description
        self.summary = summary
        self.nodes: list[Node] = []
        self.notes: list[Note] = []
        self.groups: list[tuple[str, list, int]] = []
        self.main_chain: list[Node] = []   # what the saved view shows (default: every node)
        self.editor_block: list[Node] = []  # the editor as one replaceable group (editor_block.py)

    # -- building ---------------------------------------------------------------------
    def node(self, class_type: str, title: str | None = None, control: dict | None = None,
             at: tuple[int, int] | None = None, properties: dict | None = None, bypassed: bool = False,
             collapsed: bool = False, **inputs) -> Node:
        """Add a node; `inputs` are literals for widgets or outputs (Out / Node) for sockets.
        `bypassed` writes it bypassed (UI mode 4): an option the user switches on; not in the API file.
        `collapsed` writes it collapsed (its title bar only, until the user opens it).
        `control` sets a seed-like widget's "control after generate" mode (default "fixed");
        `at` places the node in the UI (default: a column per graph depth); `properties` are
        added to the UI node's properties (e.g. "models" for the frontend's missing-models dialog)."""
        if class_type not in self.specs:
            raise KeyError(f"{self.name}: unknown node type {class_type!r} (not registered by the pack, "
                           f"not in scripts/workflows/comfy_core_nodes.json)")
        spec = self.specs[class_type]
        known = {n for n, _, _ in ordered_inputs(spec)}
        for key in inputs:
            if key not in known:
                raise KeyError(f"{self.name}: {class_type} has no input {key!r}; inputs: {sorted(known)}")
        filled: dict[str, Any] = {}
        for name, section, entry in ordered_inputs(spec):
            value = inputs.get(name)
            if isinstance(value, Node):
                value = value.out(0)
            if isinstance(value, Out):
                if not types_match(value.type, input_type(entry)):
                    raise TypeError(f"{self.name}: {class_type}.{name} takes {input_type(entry)}, "
                                    f"got {value.type} from {value.node.class_type}")
                filled[name] = value
            elif name in inputs:
                if not is_widget(entry):
                    raise TypeError(f"{self.name}: {class_type}.{name} is a {input_type(entry)} socket; "
                                    f"connect an output to it")
                self._check_widget(class_type, name, entry, value)
                filled[name] = value
            elif is_widget(entry):
                filled[name] = default_value(name, entry)
            elif section == "required":
                raise ValueError(f"{self.name}: required input {class_type}.{name} ({input_type(entry)}) "
                                 f"is not connected")
        for name, mode in (control or {}).items():
            entry = input_entry(spec, name)[1]
            if not extra_widget_values(name, entry) or mode not in ("fixed", "increment", "decrement", "randomize"):
                raise ValueError(f"{self.name}: {class_type}.{name} has no control_after_generate mode {mode!r}")
        node = Node(self, len(self.nodes) + 1, class_type, spec, filled, title, control)
        node.at = tuple(at) if at is not None else None
        node.properties = dict(properties or {})
        node.mode = BYPASS if bypassed else 0
        node.collapsed = collapsed
        self.nodes.append(node)
        return node

    def group(self, title: str, nodes: list, font_size: int = 24) -> None:
        """A titled box around `nodes` (and notes) in the UI file; its title is drawn at `font_size` px."""
        self.groups.append((title, list(nodes), font_size))

    def _check_widget(self, class_type, name, entry, value):
        t, opts = input_type(entry), input_options(entry)
        where = f"{self.name}: {class_type}.{name}"
        choices = combo_choices(entry)
        if choices is not None:
            if choices and value not in choices:
                raise ValueError(f"{where} = {value!r} is not one of {choices}")
            if dynamic_option_inputs(entry, value):
                raise ValueError(f"{where} = {value!r} adds inputs {dynamic_option_inputs(entry, value)}: "
                                 "this generator writes only dynamic-combo options without inputs")
            return
        ok = {"INT": lambda v: isinstance(v, int) and not isinstance(v, bool),
              "FLOAT": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
              "STRING": lambda v: isinstance(v, str),
              "BOOLEAN": lambda v: isinstance(v, bool)}[t](value)
        if not ok:
            raise TypeError(f"{where} must be {t}, got {value!r}")
        if t in ("INT", "FLOAT"):
            if "min" in opts and value < opts["min"] or "max" in opts and value > opts["max"]:
                raise ValueError(f"{where} = {value} is outside [{opts.get('min')}, {opts.get('max')}]")

    def note(self, text: str, title: str = "Read me", size: tuple[int, int] = (500, 380),
             collapsed: bool = False) -> Note:
        """A markdown note shown in the UI file only (placed by columns(), else above the graph);
        `collapsed`: its title bar only, until the user opens it."""
        note = Note(title, text, size, collapsed)
        self.notes.append(note)
        return note

    @staticmethod
    def column_height(item, gap_y: int = 20, room: bool = True) -> int:
        """How far down a column `item` reaches (a number is that much space): its title bar, its body
        as drawn, the gap, and (with `room`) the room kept free below it (Node.room)."""
        if isinstance(item, int):
            return item
        return item.drawn()[1] + (item.room() if room else 0) + gap_y + TITLE_H

    def columns(self, columns: list[list], x: int = 0, y: int = 0, gap_x: int = 40, gap_y: int = 20) -> int:
        """Place nodes and notes in columns, left to right, each top to bottom: a column is as wide
        as its widest member, the next starts gap_x further; a member's title bar and the room a
        picture needs below it are kept free; a number in a column is that much more space (around a
        group's box). Returns the x after the last column."""
        for column in columns:
            top = y + TITLE_H
            for item in column:
                if not isinstance(item, int):
                    item.at = (x, top)
                top += self.column_height(item, gap_y)
            x += max(item.drawn()[0] for item in column if not isinstance(item, int)) + gap_x
        return x

    def main(self, *nodes) -> None:
        """The main chain: the graph's saved view is fitted to these nodes and notes (default: all)."""
        self.main_chain = list(nodes)

    def saved_view(self, placed: dict[int, tuple[list, list]]) -> dict:
        """extra.ds: the main chain (every node when none is named) fitted to REFERENCE_VIEWPORT at
        a zoom between READABLE_SCALE and 1; when it does not fit at READABLE_SCALE its start (top
        left) is shown. `placed`: node id -> (pos, size) as written."""
        members = self.main_chain or self.nodes + self.notes
        boxes = [placed[n.id] for n in members]
        x0 = min(p[0] for p, _ in boxes)
        y0 = min(p[1] for p, _ in boxes) - TITLE_H
        x1 = max(p[0] + s[0] for p, s in boxes)
        y1 = max(p[1] + s[1] for p, s in boxes)
        vw, vh = REFERENCE_VIEWPORT
        scale = min(1.0, max(READABLE_SCALE, fit_scale((x0, y0, x1 - x0, y1 - y0), zoom=0.9)))
        margin = 40 / scale
        ox = vw / 2 / scale - (x0 + x1) / 2 if (x1 - x0) * scale <= vw - 80 else margin - x0
        oy = vh / 2 / scale - (y0 + y1) / 2 if (y1 - y0) * scale <= vh - 80 else margin - y0
        return {"scale": round(scale, 4), "offset": [round(ox, 1), round(oy, 1)]}

    # -- API format -------------------------------------------------------------------
    def to_api(self) -> dict:
        """The API prompt, as the frontend's graphToPrompt makes it: bypassed nodes left out, links
        through them resolved (`resolve_bypass`), an input whose link resolves to nothing dropped."""
        api = {}
        for n in self.nodes:
            if n.mode == BYPASS:
                continue
            inputs = {}
            for name, value in n.inputs.items():
                if isinstance(value, Out):
                    value = resolve_bypass(value)
                    if value is None:
                        continue
                    inputs[name] = [str(value.node.id), value.slot]
                else:
                    inputs[name] = value
            api[str(n.id)] = {"inputs": inputs, "class_type": n.class_type,
                              "_meta": {"title": n.title or n.spec.get("display_name") or n.class_type}}
        return api

    # -- UI format --------------------------------------------------------------------
    def _depths(self) -> dict[int, int]:
        depth: dict[int, int] = {}
        for n in self.nodes:   # nodes are created after their inputs, so one pass suffices
            parents = [v.node.id for v in n.inputs.values() if isinstance(v, Out)]
            depth[n.id] = 1 + max((depth.get(p, -1) for p in parents), default=-1)   # a blueprint's input: -1
        return depth

    def to_ui(self) -> dict:
        depth = self._depths()
        links: list[list] = []
        out_links: dict[tuple[int, int], list[int]] = {}
        ui_nodes = []
        column_y: dict[int, int] = {}
        order = {n.id: i for i, n in enumerate(sorted(self.nodes, key=lambda n: (depth[n.id], n.id)))}
        for n in self.nodes:
            socket_inputs, widget_inputs, widgets_values = [], [], []
            for name, _, entry in ordered_inputs(n.spec):
                value = n.inputs.get(name)
                if isinstance(value, Out):
                    link_id = len(links) + 1
                    links.append([link_id, value.node.id, value.slot, n.id, None, value.type])
                    out_links.setdefault((value.node.id, value.slot), []).append(link_id)
                    slot = {"name": name, "type": input_type(entry), "link": link_id}
                    if is_widget(entry):
                        slot["widget"] = {"name": name}
                        widget_inputs.append(slot)
                    else:
                        socket_inputs.append(slot)
                elif not is_widget(entry):
                    socket_inputs.append({"name": name, "type": input_type(entry), "link": None})
                if is_widget(entry):
                    shown = value if not isinstance(value, Out) else default_value(name, entry)
                    widgets_values.append(shown)
                    extra = extra_widget_values(name, entry)
                    if extra and entry[0] == "INT" and name in n.control:
                        extra[0] = n.control[name]
                    widgets_values.extend(extra)
            slots = socket_inputs + widget_inputs
            for i, slot in enumerate(slots):
                if slot["link"] is not None:
                    links[slot["link"] - 1][4] = i
            size = n.size()
            if n.at is not None:
                pos = list(n.at)
            else:
                col = depth[n.id]
                y = column_y.get(col, 80)
                column_y[col] = y + size[1] + n.room() + 50
                pos = [60 + 420 * col, y]
            node = {"id": n.id, "type": n.class_type, "pos": pos, "size": size,
                    "flags": {"collapsed": True} if n.collapsed else {}, "order": order[n.id], "mode": n.mode,
                    "inputs": slots,
                    "outputs": [], "properties": {"Node name for S&R": n.class_type, **n.properties},
                    "widgets_values": widgets_values}
            if n.title:
                node["title"] = n.title
            ui_nodes.append(node)
        by_id = {u["id"]: u for u in ui_nodes}
        for n in self.nodes:
            names = list(n.spec.get("output_name") or n.spec["output"])
            by_id[n.id]["outputs"] = [
                {"name": names[i], "type": t, "links": out_links.get((n.id, i), []), "slot_index": i}
                for i, t in enumerate(n.spec["output"])]
        # Notes not placed by columns() sit above the graph, left to right.
        next_id = len(self.nodes) + 1
        for k, note in enumerate(self.notes):
            note.id = next_id + k
            pos = list(note.at) if note.at is not None else [60 + 520 * k, -420]
            ui_nodes.append({"id": next_id + k, "type": "MarkdownNote", "pos": pos,
                             "size": note.size(), "flags": {"collapsed": True} if note.collapsed else {},
                             "order": len(self.nodes) + k, "mode": 0,
                             "inputs": [], "outputs": [], "properties": {}, "title": note.title,
                             "widgets_values": [note.text], "color": "#432", "bgcolor": "#653"})
        by_id = {u["id"]: u for u in ui_nodes}   # the notes too: a group may hold one
        groups = []
        for title, members, font_size in self.groups:
            boxes = [(by_id[m.id]["pos"], m.drawn()) for m in members]
            x0 = min(p[0] for p, _ in boxes) - GROUP_PAD_X
            y0 = min(p[1] for p, _ in boxes) - 60
            x1 = max(p[0] + s[0] for p, s in boxes) + GROUP_PAD_X
            y1 = max(p[1] + s[1] for p, s in boxes) + 20
            groups.append({"title": title, "bounding": [x0, y0, x1 - x0, y1 - y0], "color": "#3f789e",
                           "font_size": font_size, "flags": {}})
        return {"id": str(uuid.uuid5(uuid.NAMESPACE_URL, f"respec-comfyui/workflows/{self.name}")),
                "revision": 0, "last_node_id": len(ui_nodes), "last_link_id": len(links),
                "nodes": ui_nodes, "links": links, "groups": groups, "config": {},
                "extra": {"ds": self.saved_view({m.id: (by_id[m.id]["pos"], m.drawn())
                                                 for m in self.nodes + self.notes}),
                          "respec": {"title": self.title, "summary": self.summary,
                                     "description": self.description,
                                     **({"editor_block": [n.id for n in self.editor_block]}
                                        if self.editor_block else {})}},
                "version": 0.4}
