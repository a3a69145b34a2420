"""The conversations readable on the screens people use (issue 45), in headless Chromium: each chat graph
opened as the template browser opens it, on pages of 1366 x 768, 1600 x 1000 and 1920 x 1080, with the
classic renderer and with Nodes 2.0 (the frontend's Vue nodes). Part of
`scripts/comfyui/check_in_comfyui.py --frontend` (Nodes 2.0 with `--vue-nodes`); not part of the pack.

Per graph, size and mode, one PASS/FAIL line:
- the node text is drawn: the zoom the frontend chose is above its level-of-detail threshold (frontends
  1.45+ fit every node in the view when a template opens; 1.35 restores the graph's saved view);
- no two nodes overlap as drawn (classic: the nodes' boxes, title bars included; Nodes 2.0: the nodes'
  elements as measured), and every Preview / Save Image has 300 px free below it for its picture.
With `shots`, each is saved as readable-<mode>-<width>x<height>-<title>.png. Once per mode, the Flux.2
loader of the provenance graph must mark its model "(not installed)" in its drop-down (the pack's
extension labels each entry from the loader's INSTALLED_OPTION).
Returns the problems found.
"""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

from check_first_hour import APP, DIALOG_CLOSE, LOAD_JS, VIEW_JS, crowded_pictures
from check_vue_nodes import NODE_FACTS_JS, VUE_SETTING, overlapping_pairs, set_vue_nodes, vue_overlaps
from comfyui_harness import Page, browser_page, checker, http_json, log

SIZES = ((1366, 768), (1600, 1000), (1920, 1080))
TITLE_BAR = 30


def classic_overlaps(nodes: list[dict]) -> list[str]:
    """Pairs of nodes ("a/b") whose boxes overlap as the classic renderer draws them: a node spans its
    title bar and, unless collapsed, its size (VIEW_JS's nodes; a collapsed node's width is its
    title's, at most its open width)."""
    return overlapping_pairs([(n["id"], n["pos"][0], n["pos"][1] - TITLE_BAR,
                               n["pos"][0] + (n.get("collapsed_width") or n["size"][0]),
                               n["pos"][1] + (0 if n["collapsed"] else n["size"][1])) for n in nodes])


async def _one(page: Page, check, path: Path, mode: str, size: tuple[int, int], shots: Path | None) -> dict:
    ui = json.loads(path.read_text(encoding="utf-8"))
    await page.js(LOAD_JS % {"app": APP, "ui": json.dumps(ui), "name": json.dumps(path.stem)})
    await page.js(DIALOG_CLOSE)
    await asyncio.sleep(0.8)   # Vue draws its elements after the graph is configured
    view = await page.js(VIEW_JS % {"app": APP})
    crowded = crowded_pictures(view["nodes"])
    if mode == "nodes2":
        facts = await page.js(NODE_FACTS_JS % {"app": APP})
        overlaps = vue_overlaps(facts)
    else:
        overlaps = classic_overlaps(view["nodes"])
    where = f"{path.stem}, {mode}, {size[0]} x {size[1]}"
    check(f"{where}: node text drawn, nothing overlaps", not view["low"] and not overlaps and not crowded,
          f"zoom {view['scale']:.2f} (text drawn from {view['threshold']:.2f}); "
          f"{'overlapping nodes ' + str(overlaps[:6]) if overlaps else 'no overlap'}; "
          f"{'pictures would cover ' + str(crowded) if crowded else 'pictures have room'}")
    if shots is not None:
        await page.screenshot(shots / f"readable-{mode}-{size[0]}x{size[1]}-{path.stem}.png")
    return view


# The Flux.2 loader's model drop-down as the page shows it: the label of its value and of each entry
# (the pack's extension marks each "(installed)" / "(not installed)"), and, in Nodes 2.0, the node's text.
LOADER_LABELS_JS = """(() => { const g = %(app)s.rootGraph ?? %(app)s.graph;
  const n = g._nodes.find(n => n.type === 'ReSpecFlux2Loader'); if (!n) return null;
  const w = n.widgets.find(w => w.name === 'model'); const f = w.options?.getOptionLabel;
  return {value: w.value, shown: f ? f(w.value) : null, entries: (w.options?.values ?? []).map(v => f ? f(v) : v),
          element: document.querySelector(`[data-node-id="${n.id}"]`)?.innerText ?? null}; })()"""
PROVENANCE = "ReSpec chat - No VLM, provenance"


async def check_installed_labels(page: Page, check, mode: str) -> None:
    """The loader's drop-down says which entries are installed (its default is not, on the checker's
    server). Nodes 2.0 draws the label in the node from frontend 1.4x; 1.35's draws the raw value
    (EXPECTED there: its drop-down and the classic node carry the labels)."""
    got = await page.js(LOADER_LABELS_JS % {"app": APP})
    version = await page.js("window.__COMFYUI_FRONTEND_VERSION__ ?? ''")
    in_node = "(not installed)" in ((got or {}).get("element") or "")
    if mode != "classic" and got and not in_node and str(version).startswith("1.3"):
        log(f"EXPECTED  frontend/readable: frontend {version}'s Nodes 2.0 draws the loader's raw value, not its "
            f"label (its drop-down entries are labelled: {got['entries'][:2]})")
        in_node = True
    ok = bool(got) and str(got["shown"]).startswith("(not installed) ") and all(
        str(e).startswith(("(installed) ", "(not installed) ")) for e in got["entries"]) and (
        mode == "classic" or in_node)
    check(f"the Flux.2 loader marks its model not installed ({mode})", ok,
          f"shows {got and got['shown']!r}; entries {got and got['entries'][:3]}"
          + (f"; the node's text has it: {'(not installed)' in (got['element'] or '')}" if got and mode != "classic" else ""))


def check_readable(url: str, chromium: str, chat_files: list[Path], vue_nodes: bool,
                   shots: str | None = None) -> list[str]:
    """Every chat graph in `chat_files` at SIZES, classic and (with `vue_nodes`) Nodes 2.0; the problems."""
    problems: list[str] = []
    check = checker("frontend/readable", problems)
    shots_dir = Path(shots) if shots else None
    if shots_dir is not None:
        shots_dir.mkdir(parents=True, exist_ok=True)
    modes = ("classic", "nodes2") if vue_nodes else ("classic",)

    async def run() -> None:
        for mode in modes:
            set_vue_nodes(url, mode == "nodes2")
            for size in SIZES:
                async with browser_page(chromium, check, f"readable {mode} {size}", shots_dir,
                                        f"readable-failure-{mode}-{size[0]}.png", viewport=size,
                                        max_size=256 * 2 ** 20) as page:
                    http_json("POST", f"{url}/api/settings/Comfy.TutorialCompleted", True)
                    await page.send("Page.navigate", {"url": url})
                    await page.wait_for(f"!!({APP}?.graph && document.querySelector('canvas'))", 180, "the page")
                    await asyncio.sleep(2)
                    await page.js(DIALOG_CLOSE)
                    on = await page.js(f"{APP}.extensionManager?.setting?.get({json.dumps(VUE_SETTING)})")
                    if mode == "nodes2" and on is not True:
                        log("EXPECTED  frontend/readable: this frontend has no Nodes 2.0; checked classic only")
                        return
                    for path in chat_files:
                        await _one(page, check, path, mode, size, shots_dir)
                        if path.stem == PROVENANCE and size == SIZES[-1]:
                            await check_installed_labels(page, check, mode)

    log(f"readable: {len(chat_files)} conversations at {', '.join(f'{w} x {h}' for w, h in SIZES)} ({', '.join(modes)})")
    try:
        asyncio.run(run())
    finally:
        set_vue_nodes(url, False)
    return problems
