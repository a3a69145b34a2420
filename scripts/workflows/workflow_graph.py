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


def spec_of_class(name: str, cls, display_name: str | None = None) -> dict:
    """What ComfyUI's /object_info says about a V1 node class."""
    inputs = cls.INPUT_TYPES()
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
        self.mode = 0

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


class Graph:
    """A workflow under construction. `node()` checks every input against the spec."""

    def __init__(self, name: str, specs: dict[str, dict], *, title: str = "", description: str = ""):
        self.name, self.specs, self.title, self.description = name, specs, title or name, description
        self.nodes: list[Node] = []
        self.notes: list[tuple[str, str]] = []   # (title, markdown)
        self.groups: list[tuple[str, list[Node]]] = []

    # -- building ---------------------------------------------------------------------
    def node(self, class_type: str, title: str | None = None, control: dict | None = None,
             at: tuple[int, int] | None = None, properties: dict | None = None, bypassed: bool = False,
             **inputs) -> Node:
        """Add a node; `inputs` are literals for widgets or outputs (Out / Node) for sockets.
        `bypassed` writes it bypassed (UI mode 4): an option the user switches on; not in the API file.
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
        node.at = at
        node.properties = dict(properties or {})
        node.mode = BYPASS if bypassed else 0
        self.nodes.append(node)
        return node

    def group(self, title: str, nodes: list[Node]) -> None:
        """A titled box around `nodes` in the UI file."""
        self.groups.append((title, list(nodes)))

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

    def note(self, text: str, title: str = "Read me") -> None:
        """A markdown note shown in the UI file only."""
        self.notes.append((title, text))

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
            depth[n.id] = 1 + max((depth[p] for p in parents), default=-1)
        return depth

    @staticmethod
    def _size(n: Node) -> list[int]:
        entries = ordered_inputs(n.spec)
        sockets = sum(1 for name, _, e in entries if not is_widget(e) or isinstance(n.inputs.get(name), Out))
        widgets = sum(1 + len(extra_widget_values(name, e)) for name, _, e in entries if is_widget(e))
        tall = sum(1 for name, _, e in entries if is_widget(e) and input_options(e).get("multiline"))
        preview = sum(1 for _, _, e in entries if input_options(e).get("image_upload"))
        rows = max(sockets, len(n.spec["output"]))
        # an upload widget shows the picked image under the widgets
        return [360, 46 + 22 * rows + 28 * widgets + 90 * tall + 320 * preview]

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
            size = self._size(n)
            if getattr(n, "at", None) is not None:
                pos = list(n.at)
            else:
                col = depth[n.id]
                y = column_y.get(col, 80)
                column_y[col] = y + size[1] + 50
                pos = [60 + 420 * col, y]
            node = {"id": n.id, "type": n.class_type, "pos": pos, "size": size,
                    "flags": {}, "order": order[n.id], "mode": n.mode, "inputs": slots,
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
        # Notes sit above the graph, left to right.
        next_id = len(self.nodes) + 1
        for k, (title, text) in enumerate(self.notes):
            ui_nodes.append({"id": next_id + k, "type": "MarkdownNote", "pos": [60 + 520 * k, -420],
                             "size": [500, 380], "flags": {}, "order": len(self.nodes) + k, "mode": 0,
                             "inputs": [], "outputs": [], "properties": {}, "title": title,
                             "widgets_values": [text], "color": "#432", "bgcolor": "#653"})
        groups = []
        for title, members in self.groups:
            boxes = [(by_id[m.id]["pos"], by_id[m.id]["size"]) for m in members]
            x0 = min(p[0] for p, _ in boxes) - 20
            y0 = min(p[1] for p, _ in boxes) - 60
            x1 = max(p[0] + s[0] for p, s in boxes) + 20
            y1 = max(p[1] + s[1] for p, s in boxes) + 20
            groups.append({"title": title, "bounding": [x0, y0, x1 - x0, y1 - y0], "color": "#3f789e",
                           "font_size": 24, "flags": {}})
        return {"id": str(uuid.uuid5(uuid.NAMESPACE_URL, f"respec-comfyui/workflows/{self.name}")),
                "revision": 0, "last_node_id": len(ui_nodes), "last_link_id": len(links),
                "nodes": ui_nodes, "links": links, "groups": groups, "config": {},
                "extra": {"ds": {"scale": 0.75, "offset": [0, 460]},
                          "respec": {"title": self.title, "description": self.description}},
                "version": 0.4}
