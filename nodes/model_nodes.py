"""Model memory: unload every ReSpec model from a graph (what ComfyUI's /free does for the pack)."""
from __future__ import annotations

import json

from ..respec import models

CATEGORY = "ReSpec"


class ReSpecUnloadModels:
    """Unload the pack's models and drop its caches; other nodes' models stay loaded."""

    CATEGORY = CATEGORY
    FUNCTION = "unload"
    OUTPUT_NODE = True
    RETURN_TYPES = ("STRING",)
    RETURN_NAMES = ("summary",)
    OUTPUT_TOOLTIPS = ("JSON: how many models ComfyUI unloaded, and what the pack still holds (should be nothing).",)
    DESCRIPTION = ("Unloads every ReSpec model (controller VLM, editors, YOLO-World, SAM, LPIPS, CLIP) from "
                   "ComfyUI's memory manager and forgets the pack's model cache, so the memory goes back. "
                   "Connect 'after' to the output that must be finished first. The next prompt reloads the "
                   "models from disk. The ReSpec panel's 'Unload models' button does the same.")

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {}, "optional": {
            "after": ("*", {"tooltip": "Any output: the unload runs after the node that makes it."}),
        }}

    @classmethod
    def IS_CHANGED(cls, **_):
        return float("nan")  # unload every time it is queued

    def unload(self, after=None):
        summary = models.unload_all(unload_from_comfyui=True)   # on ComfyUI's prompt worker
        return {"ui": {"text": [json.dumps(summary)]}, "result": (json.dumps(summary, indent=1),)}


NODE_CLASS_MAPPINGS = {"ReSpecUnloadModels": ReSpecUnloadModels}
NODE_DISPLAY_NAME_MAPPINGS = {"ReSpecUnloadModels": "Unload Models (ReSpec)"}
