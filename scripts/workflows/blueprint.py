"""Write a graph built with workflow_graph.Graph as a subgraph blueprint: the pack's `subgraphs/*.json`,
which ComfyUI (0.24+) lists at GET /global_subgraphs and the frontend offers in its node library.

A blueprint file is a UI workflow whose one node is an instance of a subgraph defined in
`definitions.subgraphs`: that definition holds the inner nodes (UI format), its links as objects
({id, origin_id, origin_slot, target_id, target_slot, type}), and its boundary: `inputs` (links leave
the input node, id -10, at the input's index) and `outputs` (links enter the output node, id -20).

    g = wg.Graph(...); bp = Blueprint(g, "ReSpec: after the edit", category=..., description=...)
    edited = bp.input("edited", "IMAGE")          # an Out: connect it like any node's output
    ...; bp.output("image", append["current_image"]); bp.to_json()
"""
from __future__ import annotations

import uuid

import workflow_graph as wg

INPUT_NODE, OUTPUT_NODE = -10, -20
WIDGET_TYPES = {"STRING", "INT", "FLOAT", "BOOLEAN"}
INSTANCE_WIDTH = 320


class _Boundary:
    """The subgraph's input node as a source of links: output k is blueprint input k."""
    id, mode, class_type = INPUT_NODE, 0, "subgraph input"

    def __init__(self):
        self.spec = {"output": []}


class Blueprint:
    def __init__(self, g: wg.Graph, name: str, *, category: str, description: str):
        self.g, self.name, self.category, self.description = g, name, category, description
        self.boundary = _Boundary()
        self.input_names: list[str] = []
        self.optional: set[str] = set()
        self.outputs: list[tuple[str, wg.Out]] = []

    def input(self, name: str, type_: str, optional: bool = False) -> wg.Out:
        """A socket of the blueprint's node, to connect to inner inputs as an output. `optional`: left
        unconnected, the inner inputs it feeds are left out (they must be optional there too)."""
        if name in self.input_names:
            raise ValueError(f"{self.name}: input {name!r} declared twice")
        self.input_names.append(name)
        if optional:
            self.optional.add(name)
        self.boundary.spec["output"].append(type_)
        return wg.Out(self.boundary, len(self.input_names) - 1)

    def output(self, name: str, out: wg.Out) -> None:
        self.outputs.append((name, out))

    def spec(self) -> dict:
        """The blueprint's node as /object_info would describe it, so that workflow_graph.Graph can place
        and check an instance of it (its type: the subgraph's id)."""
        types = dict(zip(self.input_names, self.boundary.spec["output"]))
        return {"input": {"required": {n: [t, {}] for n, t in types.items() if n not in self.optional},
                          "optional": {n: [t, {}] for n, t in types.items() if n in self.optional}},
                "input_order": {"required": [n for n in self.input_names if n not in self.optional],
                                "optional": [n for n in self.input_names if n in self.optional]},
                "output": [out.type for _, out in self.outputs], "output_name": [n for n, _ in self.outputs],
                "display_name": self.name, "name": self._uid(), "output_node": False}

    def _uid(self, *parts) -> str:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, "respec-comfyui/subgraphs/" + "/".join(map(str, (self.name,) + parts))))

    def to_json(self) -> dict:
        ui = self.g.to_ui()
        links = [{"id": i, "origin_id": o, "origin_slot": os_, "target_id": t, "target_slot": ts, "type": ty}
                 for i, o, os_, t, ts, ty in ui["links"]]
        by_id = {n["id"]: n for n in ui["nodes"]}
        nodes = list(by_id.values())
        x0 = min(n["pos"][0] for n in nodes)
        x1 = max(n["pos"][0] + n["size"][0] for n in nodes)
        y0 = min(n["pos"][1] for n in nodes)
        inputs = []
        for k, (name, type_) in enumerate(zip(self.input_names, self.boundary.spec["output"])):
            ids = [l["id"] for l in links if l["origin_id"] == INPUT_NODE and l["origin_slot"] == k]
            if not ids:
                raise ValueError(f"{self.name}: input {name!r} is connected to nothing inside")
            inputs.append({"id": self._uid("in", name), "name": name, "type": type_, "linkIds": ids,
                           "pos": [x0 - 120, y0 + 20 * k]})
        outputs = []
        for k, (name, out) in enumerate(self.outputs):
            link_id = len(links) + 1
            links.append({"id": link_id, "origin_id": out.node.id, "origin_slot": out.slot, "target_id": OUTPUT_NODE,
                          "target_slot": k, "type": out.type})
            by_id[out.node.id]["outputs"][out.slot]["links"].append(link_id)
            outputs.append({"id": self._uid("out", name), "name": name, "type": out.type, "linkIds": [link_id],
                            "pos": [x1 + 140, y0 + 20 * k]})
        sub_id = self._uid()
        rows = max(len(inputs), len(outputs))
        definition = {
            "id": sub_id, "version": 1, "revision": 0, "config": {}, "name": self.name,
            "state": {"lastGroupId": 0, "lastNodeId": len(nodes), "lastLinkId": len(links), "lastRerouteId": 0},
            "inputNode": {"id": INPUT_NODE, "bounding": [x0 - 220, y0, 120, 40 + 20 * len(inputs)]},
            "outputNode": {"id": OUTPUT_NODE, "bounding": [x1 + 100, y0, 120, 40 + 20 * len(outputs)]},
            "inputs": inputs, "outputs": outputs, "widgets": [], "nodes": nodes, "groups": [], "links": links,
            "extra": {}, "category": self.category, "description": self.description}
        instance = {
            "id": len(nodes) + 1, "type": sub_id, "pos": [0, 0], "size": [INSTANCE_WIDTH, 26 + 20 * rows],
            "flags": {}, "order": 0, "mode": 0,
            "inputs": [{"name": i["name"], "type": i["type"], "link": None} for i in inputs],
            "outputs": [{"name": o["name"], "type": o["type"], "links": []} for o in outputs],
            "properties": {}, "widgets_values": []}
        return {"id": self._uid("file"), "revision": 0, "last_node_id": instance["id"], "last_link_id": 0,
                "nodes": [instance], "links": [], "groups": [], "definitions": {"subgraphs": [definition]},
                "config": {}, "extra": {}, "version": 0.4}
