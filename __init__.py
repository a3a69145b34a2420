"""ReSpec for ComfyUI: history-grounded restoration for conversational image editing.

ComfyUI imports this folder as a package; everything lives in nodes/ (adapters) and
respec/ (the ComfyUI-free core).
"""
if __package__:
    from .nodes import NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS
else:
    # Imported as a bare module (pytest sets up the checkout's folder as a package, and a folder
    # name like "ReSpec-ComfyUI" is no Python name): there is no package to import the nodes from.
    NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS = {}, {}

WEB_DIRECTORY = "./js"

__all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS", "WEB_DIRECTORY"]
