"""Render the template browser's thumbnails (workflows/<name>.jpg beside each UI workflow) and the
README's picture of the conversational graph, from the real ComfyUI frontend in headless Chromium.

    python scripts/comfyui/render_thumbnails.py --comfyui /path/to/ComfyUI --python /path/to/its/python \
        [--pythonpath DIR] [--chromium /usr/bin/chromium] [--only NAME ...]

Starts ComfyUI (CPU, API nodes off, 127.0.0.1, a temporary --base-directory whose custom_nodes/
links to this pack), opens the page, and for each workflows/*.json loads the graph as the template
browser would (app.loadGraphData), fits it to the view, hides the menus and side bars, and saves a
screenshot of the canvas: workflows/<name>.jpg (JPEG, THUMB_WIDTH px wide) and, for README_GRAPH,
docs/<README_GRAPH>.png at full size. The graph's nodes must all be registered in that ComfyUI (the
evaluation nodes need the eval extra; --pythonpath adds a folder of packages to ComfyUI's path).
Regenerate after changing a workflow (scripts/workflows/build_workflows.py).
"""
from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from comfyui_harness import Page, free_port, log, start_chromium, start_comfyui, stop

ROOT = Path(__file__).resolve().parents[2]
APP = "window.comfyAPI.app.app"
VIEWPORT = (2400, 1500)   # large, so the fitted graph is drawn at a zoom with readable text
THUMB_WIDTH = 640
README_GRAPH = "conversational_flux2"
# Everything but the graph canvas: the top menu, the side and bottom bars, toasts, the minimap.
HIDE_CSS = """body > *:not(#vue-app) {display: none !important}
.comfyui-body-top, .comfyui-body-left, .comfyui-body-right, .comfyui-body-bottom, .side-tool-bar-container,
.p-toast, .comfy-menu, .actionbar, .graph-canvas-menu, .minimap-main-container, .p-splitter-gutter,
.workflow-tabs-container, .bottom-panel, .litegraph-minimap, span.p-buttongroup.absolute,
div.absolute.z-999.pointer-events-none {display: none !important}"""
# Frontend settings for the picture: full detail at any zoom, no render statistics in the corner.
SETTINGS = {"LiteGraph.Canvas.MinFontSizeForLOD": 0, "Comfy.Graph.CanvasInfo": False,
            "Comfy.Minimap.Visible": False}


async def render(port: int, url: str, names: list[str]) -> dict[str, bytes]:
    page = await Page.open(port, viewport=VIEWPORT)
    shots = {}
    try:
        await page.send("Page.navigate", {"url": url})
        await page.wait_for(f"!!({APP}?.graph && document.querySelector('canvas'))", 180, "the ComfyUI page")
        await asyncio.sleep(3)
        for key, value in SETTINGS.items():
            await page.js(f"{APP}.extensionManager.setting.set({json.dumps(key)}, {json.dumps(value)})")
        await page.js(f"(() => {{ const s = document.createElement('style'); s.textContent = {json.dumps(HIDE_CSS)};"
                      " document.head.appendChild(s); return true; })()")
        for name in names:
            graph = json.loads((ROOT / "workflows" / f"{name}.json").read_text())
            await page.js(f"{APP}.loadGraphData({json.dumps(graph)}, true, true, {json.dumps(name)})")
            # Registered = known to LiteGraph (as check_in_comfyui.py reads it: newer frontends give core
            # nodes no constructor.nodeData).
            missing = await page.js(f"({APP}.rootGraph ?? {APP}.graph)._nodes.filter(n => n.has_errors || "
                                    "!(window.LiteGraph?.registered_node_types ?? {})[n.type]).map(n => n.type)")
            if missing:
                raise RuntimeError(f"{name}: nodes not registered in this ComfyUI: {sorted(set(missing))}")
            await page.js(f"{APP}.extensionManager.command.execute('Comfy.Canvas.FitView')")
            await asyncio.sleep(1.5)
            await page.js(f"{APP}.canvas.setDirty(true, true)")
            await asyncio.sleep(0.5)
            path = Path(tempfile.mkstemp(suffix=".png")[1])
            await page.screenshot(path)
            shots[name] = path.read_bytes()
            path.unlink()
            log(f"  rendered {name}")
    finally:
        await page.close()
    return shots


def crop_to_graph(img, margin: int = 32):
    """The screenshot cut to what differs from the canvas background (its corner colour), plus a margin."""
    import numpy as np
    arr = np.asarray(img).astype(np.int16)
    differs = np.abs(arr - arr[2, 2]).max(axis=2) > 12
    ys, xs = np.nonzero(differs)
    if len(xs) == 0:
        return img
    box = (max(int(xs.min()) - margin, 0), max(int(ys.min()) - margin, 0),
           min(int(xs.max()) + margin, img.width), min(int(ys.max()) + margin, img.height))
    return img.crop(box)


def save(shots: dict[str, bytes]) -> None:
    from PIL import Image
    for name, png in shots.items():
        img = crop_to_graph(Image.open(io.BytesIO(png)).convert("RGB"))
        if name == README_GRAPH:
            width = min(img.width, 1800)
            img.resize((width, round(img.height * width / img.width)), Image.LANCZOS).save(
                ROOT / "docs" / f"{name}.png", optimize=True)
        thumb = img.resize((THUMB_WIDTH, round(img.height * THUMB_WIDTH / img.width)), Image.LANCZOS)
        thumb.save(ROOT / "workflows" / f"{name}.jpg", quality=85, optimize=True)
        log(f"  wrote workflows/{name}.jpg")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--comfyui", required=True, help="a ComfyUI checkout (never modified)")
    ap.add_argument("--python", default=sys.executable, help="the Python that runs ComfyUI")
    ap.add_argument("--pythonpath", default="", help="extra folder(s) for ComfyUI's PYTHONPATH")
    ap.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    ap.add_argument("--only", nargs="*", help="workflow names (default: every UI workflow)")
    a = ap.parse_args(argv)
    names = a.only or sorted(p.stem for p in (ROOT / "workflows").glob("*.json"))
    base = Path(tempfile.mkdtemp(prefix="respec-thumbs-"))
    (base / "custom_nodes").mkdir()
    os.symlink(ROOT, base / "custom_nodes" / "ReSpec-ComfyUI")
    # Newer frontends flag a loader whose file is missing and a Load Image without its picture:
    # empty files of the names the graphs select, and ComfyUI's example picture.
    from check_in_comfyui import model_placeholders
    model_placeholders(base, [json.loads(p.read_text()) for p in (ROOT / "workflows" / "api").glob("*.api.json")],
                       ui_files=sorted((ROOT / "workflows").glob("*.json")))
    (base / "input").mkdir(exist_ok=True)
    if (Path(a.comfyui) / "input" / "example.png").is_file():
        shutil.copy(Path(a.comfyui) / "input" / "example.png", base / "input" / "example.png")
    env = {"RESPEC_HOME": str(base / "respec_home"), "NO_PROXY": "127.0.0.1,localhost", "DO_NOT_TRACK": "1"}
    if a.pythonpath:
        env["PYTHONPATH"] = a.pythonpath
    port = free_port()
    proc = chrome = None
    try:
        proc = start_comfyui(Path(a.comfyui), a.python, base, port, env=env)
        chrome, devtools = start_chromium(a.chromium, base / "chrome-profile")
        save(asyncio.run(render(devtools, f"http://127.0.0.1:{port}", names)))
    finally:
        stop(chrome)
        stop(proc)
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
