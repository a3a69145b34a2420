"""The pack in ComfyUI's "Nodes 2.0" (the frontend's Vue node renderer, setting Comfy.VueNodes.Enabled),
in headless Chromium (part of `scripts/comfyui/check_in_comfyui.py --frontend --vue-nodes`; not part
of the pack).

With the setting on, every node is a DOM element (`[data-node-id]`) whose widgets are elements of
their own (`[data-testid="node-widget"]`), not canvas drawings. check_vue_nodes(...):
1. loads every UI workflow as drag-and-drop does: every node must be drawn as an element, with as
   many widget elements as it has widgets a user sees (not hidden, not canvas-only; advanced ones
   may be folded away; a collapsed node may show none), no two elements may overlap, Load Image's
   picture must load, nothing may be logged or toasted, and graphToPrompt must still equal the
   shipped API file;
2. puts one node of every type the pack registers on an empty graph: each must be drawn with its
   widgets and its title;
3. (check_composer with vue_nodes=True, called by the checker) drives the ReSpec sidebar's composer
   for real turns and checks the executed graph's images show in their Vue nodes.
One PASS/FAIL line per workflow and per step; returns the problems found.
"""
from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from pathlib import Path

from comfyui_harness import Page, http_json, log, start_chromium, stop

APP = "window.comfyAPI.app.app"
VUE_SETTING = "Comfy.VueNodes.Enabled"

# Per node of the loaded graph: is it an element, how many widgets does a user see (and how many
# more may be folded away as advanced), how many widget elements are drawn, its pictures.
NODE_FACTS_JS = """(() => {
  const g = %(app)s.rootGraph ?? %(app)s.graph;
  // a frontend before the widgets' test id (1.35, ComfyUI 0.8.0's) marks each widget .lg-node-widget only
  const widgetSel = document.querySelector('[data-testid="node-widget"]') ? '[data-testid="node-widget"]' : '.lg-node-widget';
  return g._nodes.map(n => {
    const el = document.querySelector(`[data-node-id="${n.id}"]`);
    const ws = (n.widgets || []).filter(w => !w.hidden && !w.options?.canvasOnly);
    return {id: n.id, type: n.type, element: !!el, collapsed: !!n.flags?.collapsed,
      seen: ws.filter(w => !w.options?.advanced).map(w => w.name), advanced: ws.filter(w => w.options?.advanced).length,
      drawn: el ? el.querySelectorAll(widgetSel).length : 0,
      title: el?.querySelector('[data-testid="node-title"]')?.innerText?.trim() ?? null,
      // the element's box in graph units (the canvas zoom divided out), title bar included
      pos: [n.pos[0], n.pos[1]], box: el ? (() => { const r = el.getBoundingClientRect(),
        s = %(app)s.canvas?.ds?.scale || 1; return [r.width / s, r.height / s]; })() : null,
      layout: [n.size[0], n.size[1]],
      images: el ? Array.from(el.querySelectorAll('img')).map(i => i.complete && i.naturalWidth > 0) : []};
  });
})()"""

ALL_PACK_NODES_JS = """(() => {
  const g = %(app)s.rootGraph ?? %(app)s.graph;
  g.clear();
  const types = Object.keys(window.LiteGraph.registered_node_types).filter(t => t.startsWith('ReSpec'));
  let x = 0, y = 0;
  for (const t of types) {
    const n = window.LiteGraph.createNode(t);
    n.pos = [x, y]; g.add(n);
    x += 420; if (x > 4000) { x = 0; y += 700; }
  }
  g.setDirtyCanvas?.(true, true);
  return types.length;
})()"""


def node_problems(facts: list[dict]) -> list[str]:
    """What is wrong with a graph as Nodes 2.0 drew it (NODE_FACTS_JS): a node with no element, fewer
    widget elements than the widgets a user sees (a collapsed node shows none) or more than all of
    them, a picture that did not load."""
    out = []
    for f in facts:
        name = f"{f['id']} {f['type']}"
        if not f["element"]:
            out.append(f"{name}: not drawn")
            continue
        least = 0 if f.get("collapsed") else len(f["seen"])
        if not least <= f["drawn"] <= len(f["seen"]) + f["advanced"]:
            out.append(f"{name}: {f['drawn']} widget elements for widgets {f['seen']} (+{f['advanced']} advanced)")
        if not all(f["images"]):
            out.append(f"{name}: {f['images'].count(False)} of {len(f['images'])} pictures did not load")
    return out


def vue_overlaps(facts: list[dict], title: float = 30.0) -> list[str]:
    """Pairs of nodes whose Nodes 2.0 elements overlap ("a/b"): each element spans its measured box
    from its node's pos less the title bar (the element includes the title)."""
    return overlapping_pairs([(f["id"], f["pos"][0], f["pos"][1] - title, f["pos"][0] + f["box"][0],
                               f["pos"][1] - title + f["box"][1]) for f in facts if f.get("box") and not f.get("collapsed")])


def overlapping_pairs(boxes: list[tuple]) -> list[str]:
    """"a/b" for every two boxes (id, x0, y0, x1, y1) that overlap."""
    return [f"{a[0]}/{b[0]}" for i, a in enumerate(boxes) for b in boxes[i + 1:]
            if a[1] < b[3] and b[1] < a[3] and a[2] < b[4] and b[2] < a[4]]


def taller_than_laid_out(facts: list[dict], title: float = 30.0) -> dict[str, float]:
    """{node type: how much taller (graph px) its element is than the classic size the file gives it}."""
    out = {}
    for f in facts:
        if f.get("box") and not f.get("collapsed"):
            extra = f["box"][1] - title - f["layout"][1]
            out[f["type"]] = max(out.get(f["type"], extra), extra)
    return {k: round(v) for k, v in sorted(out.items()) if v > 1}


class NoNodes2(RuntimeError):
    """The frontend has no Nodes 2.0 (its setting does not stick): there is nothing to check."""


def set_vue_nodes(url: str, on: bool) -> None:
    """Switch Nodes 2.0 on or off for the server's (default) user: the frontend reads it at page load."""
    status, body = http_json("POST", f"{url}/api/settings/{VUE_SETTING}", bool(on))
    if status != 200:
        raise RuntimeError(f"POST /api/settings/{VUE_SETTING} answered {status}: {body}")


def check_vue_nodes(url: str, chromium: str, ui_files: list[Path], helpers: dict, shots: Path | None = None,
                    info: dict | None = None) -> list[str]:
    """Steps 1-2 of the module text with Nodes 2.0 on (and off again afterwards). `helpers`:
    check_in_comfyui's open_frontend, load_graph, ui_file_problems and screenshot."""

    async def run() -> list[str]:
        problems: list[str] = []
        profile = Path(tempfile.mkdtemp(prefix="respec-vue-chrome-"))
        proc, port = start_chromium(chromium, profile)
        page = None
        try:
            page = await Page.open(port, timeout=120, max_size=256 * 2 ** 20)
            await helpers["open_frontend"](page, url)
            on = await page.js(f"{APP}.extensionManager.setting.get({json.dumps(VUE_SETTING)})")
            # The page's own start-up (the default graph's missing-model check) may log after it is up.
            await asyncio.sleep(3.0)
            page.console.clear()
            if on is not True:
                raise NoNodes2(f"the setting {VUE_SETTING} is {on!r} after switching it on: this frontend has no "
                               "Nodes 2.0")
            for path in ui_files:
                ui = json.loads(path.read_text(encoding="utf-8"))
                res = await helpers["load_graph"](page, path.name, ui)
                await asyncio.sleep(1.0)   # Vue draws after the graph is configured; pictures load after
                facts = await page.js(NODE_FACTS_JS % {"app": APP})
                overlaps = vue_overlaps(facts)
                # The layout keeps Nodes 2.0's taller nodes free below each node (issue 45): none may overlap.
                found = (helpers["ui_file_problems"](path, ui, res, info) + node_problems(facts)
                         + ([f"overlapping elements {overlaps}; taller than laid out (graph px): "
                             f"{taller_than_laid_out(facts)}"] if overlaps else []))
                if found:
                    log(f"FAIL  frontend/nodes-2.0/{path.name}")
                    for p in found:
                        log(f"      {p}")
                    problems += [f"frontend/nodes-2.0/{path.name}: {p}" for p in found]
                else:
                    widgets = sum(f["drawn"] for f in facts)
                    log(f"PASS  frontend/nodes-2.0/{path.name}: {len(facts)} nodes drawn as elements, {widgets} "
                        f"widget elements, pictures loaded, no errors; graphToPrompt == {path.stem}.api.json")
                if not overlaps:   # what VUE_EXTRA (scripts/workflows/workflow_graph.py) is measured from
                    log(f"note  frontend/nodes-2.0/{path.name}: taller than laid out (graph px): "
                        f"{taller_than_laid_out(facts)}")
                if shots is not None:
                    await helpers["screenshot"](page, shots, Path(f"nodes2-{path.stem}.png"))
            page.console.clear()
            try:
                n = await page.js(ALL_PACK_NODES_JS % {"app": APP})
                await asyncio.sleep(1.5)
                facts = await page.js(NODE_FACTS_JS % {"app": APP})
            except RuntimeError as e:
                return problems + [f"frontend/nodes-2.0/all pack nodes: the page failed: {e}"]
            found = node_problems(facts) + [f"{f['id']} {f['type']}: no title" for f in facts if not f["title"]]
            found += [f"errors while adding them: {page.console}"] if page.console else []
            if found:
                log(f"FAIL  frontend/nodes-2.0: every pack node type ({n}) on one graph")
                problems += [f"frontend/nodes-2.0/all pack nodes: {p}" for p in found]
            else:
                log(f"PASS  frontend/nodes-2.0: every pack node type ({n}) drawn with its title and "
                    f"{sum(f['drawn'] for f in facts)} widget elements, no errors")
        finally:
            if page is not None:
                await page.close()
            stop(proc, timeout=10)
            shutil.rmtree(profile, ignore_errors=True)
        return problems

    set_vue_nodes(url, True)
    try:
        return asyncio.run(run())
    finally:
        set_vue_nodes(url, False)
