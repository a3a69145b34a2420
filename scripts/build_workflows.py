"""Build the shipped workflows: workflows/<name>.json (UI format) and workflows/api/<name>.api.json.

Every graph is described once below, in Python; both files are generated from it against the
registered nodes' INPUT_TYPES (and a table of ComfyUI core node specs), so widget order, socket
types and defaults are always those ComfyUI will load. Run after changing a node's inputs:

    python scripts/build_workflows.py            # write the files
    python scripts/build_workflows.py --check    # exit 1 if a file is out of date
    python scripts/build_workflows.py --refresh-core http://127.0.0.1:8188
        # re-read the core node specs from a running ComfyUI (scripts/comfy_core_nodes.json)

API files live in workflows/api/ because ComfyUI's template browser lists every *.json directly
in workflows/ and loads it as a UI workflow.
"""
from __future__ import annotations

import argparse
import json
import sys
import urllib.request
from pathlib import Path

sys.dont_write_bytecode = True
HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:   # a script, not part of the pack: its sibling module
    sys.path.insert(0, str(HERE))

import workflow_graph as wg  # noqa: E402

ROOT = wg.ROOT
WORKFLOWS = ROOT / "workflows"
API_DIR = WORKFLOWS / "api"

# ComfyUI core nodes the workflows use; their specs are read from a real ComfyUI.
CORE_NODES = [
    "LoadImage", "SaveImage", "PreviewImage", "CLIPTextEncode", "ConditioningZeroOut",
    "DualCFGGuider", "CFGGuider", "BasicGuider", "FluxGuidance", "SamplerCustomAdvanced",
    "KSamplerSelect", "BasicScheduler", "Flux2Scheduler", "RandomNoise", "VAEDecode", "VAEEncode",
    "UNETLoader", "CLIPLoader", "VAELoader", "EmptySD3LatentImage", "EmptyFlux2LatentImage",
    "ReferenceLatent", "ImageScaleToTotalPixels", "GetImageSize", "ImageFromBatch", "ImageBatch",
    "PrimitiveInt", "PrimitiveFloat", "PrimitiveString", "PrimitiveStringMultiline", "PrimitiveBoolean",
]
_KEEP = ("input", "input_order", "output", "output_is_list", "output_name", "name", "display_name",
         "category", "output_node", "python_module")


def _strip(entry):
    """An input entry without its tooltip (the table keeps what validation and layout need)."""
    if isinstance(entry, list) and len(entry) > 1 and isinstance(entry[1], dict):
        return [entry[0], {k: v for k, v in entry[1].items() if k != "tooltip"}] + entry[2:]
    return entry


def refresh_core(url: str) -> None:
    """Rewrite scripts/comfy_core_nodes.json from a running ComfyUI's /object_info."""
    nodes, version = {}, None
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/system_stats", timeout=30) as r:
            version = json.load(r).get("system", {}).get("comfyui_version")
    except Exception:
        pass
    for name in CORE_NODES:
        with urllib.request.urlopen(f"{url.rstrip('/')}/object_info/{name}", timeout=60) as r:
            info = json.load(r).get(name)
        if info is None:
            raise SystemExit(f"{url} has no node {name}: use a ComfyUI >= 0.8")
        info = {k: info[k] for k in _KEEP if k in info}
        info["input"] = {sec: {n: _strip(e) for n, e in ents.items()} for sec, ents in info["input"].items()}
        # File lists depend on the machine: keep them empty (a value must then be given explicitly).
        for sec, ents in info["input"].items():
            for n, e in ents.items():
                if name.endswith("Loader") and isinstance(e, list) and isinstance(e[0], list) and \
                        n.endswith("_name"):
                    ents[n] = [[]] + e[1:]
        nodes[name] = info
    table = {"comment": "ComfyUI core node specs, from GET /object_info/<name> of a real ComfyUI "
                        "(tooltips dropped, loader file lists emptied). Regenerate with "
                        "`python scripts/build_workflows.py --refresh-core URL`.",
             "comfyui_version": version, "nodes": nodes}
    wg.CORE_TABLE.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {wg.CORE_TABLE} ({len(nodes)} nodes, ComfyUI {version})")


# ------------------------------------------------------------------------------ the graphs

GRAPHS = {}


def graph(fn):
    GRAPHS[fn.__name__] = fn
    return fn


def build_all(specs: dict | None = None) -> dict[str, wg.Graph]:
    specs = specs if specs is not None else wg.all_specs()
    return {name: fn(specs) for name, fn in GRAPHS.items()}


def render(g: wg.Graph) -> tuple[str, str]:
    """(UI JSON text, API JSON text) of a graph, exactly as written to disk."""
    return (json.dumps(g.to_ui(), indent=1, ensure_ascii=False) + "\n",
            json.dumps(g.to_api(), indent=1, ensure_ascii=False) + "\n")


def paths(name: str) -> tuple[Path, Path]:
    return WORKFLOWS / f"{name}.json", API_DIR / f"{name}.api.json"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="report out-of-date files, write nothing")
    ap.add_argument("--refresh-core", metavar="URL", help="re-read core node specs from a running ComfyUI")
    args = ap.parse_args(argv)
    if args.refresh_core:
        refresh_core(args.refresh_core)
        if not args.check:
            return 0
    stale = []
    API_DIR.mkdir(parents=True, exist_ok=True)
    for name, g in build_all().items():
        ui_text, api_text = render(g)
        for path, text in zip(paths(name), (ui_text, api_text)):
            current = path.read_text(encoding="utf-8") if path.exists() else None
            if current != text:
                stale.append(path)
                if not args.check:
                    path.write_text(text, encoding="utf-8")
    known = {p for name in GRAPHS for p in paths(name)}
    extra = [p for p in list(WORKFLOWS.glob("*.json")) + list(API_DIR.glob("*.json")) if p not in known]
    for p in stale:
        print(("out of date: " if args.check else "wrote: ") + str(p.relative_to(ROOT)))
    for p in extra:
        print(f"not built by this script: {p.relative_to(ROOT)}")
    if args.check and (stale or extra):
        print("run `python scripts/build_workflows.py` and commit the result")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
