"""ReSpec for ComfyUI: history-grounded restoration for conversational image editing.

ComfyUI imports this folder as a package; everything lives in nodes/ (adapters) and
respec/ (the ComfyUI-free core).
"""
from .nodes import NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS

WEB_DIRECTORY = "./js"

__all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS", "WEB_DIRECTORY"]
