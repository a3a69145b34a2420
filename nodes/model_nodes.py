"""Model memory: unload every ReSpec model from a graph (what ComfyUI's /free does for the pack)."""
from __future__ import annotations

import json

from ..respec import models
from ..respec.comfy import io, node_schema

CATEGORY = "ReSpec"


class ReSpecUnloadModels(io.ComfyNode):
    """Unload the pack's models and drop its caches; other nodes' models stay loaded."""

    @classmethod
    def define_schema(cls):
        return node_schema(
            node_id="ReSpecUnloadModels", display_name="Unload Models (ReSpec)", category=CATEGORY,
            is_output_node=True,
            description=("Unloads every ReSpec model (controller VLM, editors, YOLO-World, SAM, LPIPS, CLIP) from "
                         "ComfyUI's memory manager and forgets the pack's model cache, so the memory goes back. "
                         "Connect 'after' to the output that must be finished first. The next prompt reloads the "
                         "models from disk. The ReSpec panel's 'Unload models' button does the same."),
            inputs=[io.AnyType.Input(id="after", optional=True,
                                     tooltip="Any output: the unload runs after the node that makes it.")],
            outputs=[io.String.Output(id="summary", tooltip=(
                "JSON: how many models ComfyUI unloaded, and what the pack still holds (should be nothing)."))])

    @classmethod
    def fingerprint_inputs(cls, **_):
        return float("nan")  # unload every time it is queued

    @classmethod
    def execute(cls, after=None):
        summary = models.unload_all(unload_from_comfyui=True)   # on ComfyUI's prompt worker
        return io.NodeOutput(json.dumps(summary, indent=1), ui={"text": [json.dumps(summary)]})


NODE_CLASS_MAPPINGS = {"ReSpecUnloadModels": ReSpecUnloadModels}
NODE_DISPLAY_NAME_MAPPINGS = {"ReSpecUnloadModels": "Unload Models (ReSpec)"}
