"""ComfyUI adapters. Each module exports its own mappings; they are merged here once.

Nodes a module lists in EVAL_NODES need the optional `eval` extra (requirements-eval.txt): they
are registered only when its packages are installed; otherwise one log line says what to install
and the rest of the pack loads.
"""
import logging

from ..respec.extras import EVAL_INSTALL, missing_eval_packages
from . import bench_nodes, controller_nodes, editor_nodes, eval_nodes, guard_nodes, history_nodes, model_nodes, provenance_nodes
from . import edit_region_nodes, sam3_nodes, textgen_nodes
from . import routes  # registers the read-only HTTP routes when a ComfyUI server is running

_MODULES = (history_nodes, controller_nodes, textgen_nodes, provenance_nodes, guard_nodes, edit_region_nodes, editor_nodes,
            eval_nodes, sam3_nodes, bench_nodes, model_nodes)

NODE_CLASS_MAPPINGS: dict = {}
NODE_DISPLAY_NAME_MAPPINGS: dict = {}
_missing = missing_eval_packages()
_left_out = []
for _m in _MODULES:
    for _name, _cls in _m.NODE_CLASS_MAPPINGS.items():
        if _name in NODE_CLASS_MAPPINGS:
            raise RuntimeError(f"node name {_name} is registered twice")
        if _missing and _name in getattr(_m, "EVAL_NODES", ()):
            _left_out.append(_name)
            continue
        NODE_CLASS_MAPPINGS[_name] = _cls
        NODE_DISPLAY_NAME_MAPPINGS[_name] = _m.NODE_DISPLAY_NAME_MAPPINGS[_name]
if _left_out:
    logging.getLogger("respec").warning(
        "ReSpec: %d evaluation nodes not loaded (%s not installed); the editing and controller nodes are "
        "available. For masks and scores install the eval extra: %s", len(_left_out), ", ".join(_missing),
        EVAL_INSTALL)

routes.register()
