"""ComfyUI adapters. Each module exports its own mappings; they are merged here once."""
from . import bench_nodes, controller_nodes, editor_nodes, eval_nodes, history_nodes, model_nodes
from . import routes  # registers the read-only HTTP routes when a ComfyUI server is running

_MODULES = (history_nodes, controller_nodes, editor_nodes, eval_nodes, bench_nodes, model_nodes)

NODE_CLASS_MAPPINGS: dict = {}
NODE_DISPLAY_NAME_MAPPINGS: dict = {}
for _m in _MODULES:
    for _name in _m.NODE_CLASS_MAPPINGS:
        if _name in NODE_CLASS_MAPPINGS:
            raise RuntimeError(f"node name {_name} is registered twice")
    NODE_CLASS_MAPPINGS.update(_m.NODE_CLASS_MAPPINGS)
    NODE_DISPLAY_NAME_MAPPINGS.update(_m.NODE_DISPLAY_NAME_MAPPINGS)

routes.register()
