"""The first hour in ComfyUI (issue 36), in headless Chromium on a 1920 x 1080 page: the template
browser and freshly opened graphs. Part of `scripts/comfyui/check_in_comfyui.py --frontend`; not part
of the pack.

check_first_hour(url, chromium, ui_files, shots) runs, one PASS/FAIL line each:
1. check_template_browser: Workflow > Browse Templates, the pack's category: its cards are exactly
   the workflows' titles (workflows/api/index.json; in the server's order: the pack no longer
   re-sorts the frontend's list, and its titles sort the same with or without case), no title is cut (its box is as wide as its text), every thumbnail has loaded (a 512 px JPEG);
2. check_opened_from_the_browser: one conversation opened by clicking its card, as a user does: its
   nodes are drawn with their text (zoom above the frontend's level-of-detail threshold);
3. check_opened_readable: every UI workflow opened the way the browser opens it (loadGraphData with
   openSource "template": frontends 1.45+ fit every node in the view, 1.35 restores the graph's saved
   view): a conversation is drawn with its text, and every Preview / Save Image has 300 px free
   below it as the frontend draws the nodes.
With `shots`, the browser (template-browser.png) and the opened graph (graph-opened.png) are saved.
Returns the problems found.
"""
from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from comfyui_harness import Page, browser_page, checker, http_json, log

ROOT = Path(__file__).resolve().parents[2]
APP = "window.comfyAPI.app.app"
VIEWPORT = (1920, 1080)
IMAGE_ROOM = 300
OPENED = "conversational_flux2"          # the graph the docs show opened from the browser
DIALOG_CLOSE = ("document.querySelectorAll('.p-dialog-close-button, .p-dialog-header-close, "
                "[role=\"dialog\"] button[aria-label=\"Close\"]').forEach(b => b.click())")

# The cards of the pack's category: title text, whether the title is cut, the thumbnail's loaded size.
CARDS_JS = """(() => [...document.querySelectorAll('h3')].filter(h => h.closest('[role=dialog], .p-dialog') &&
    %(titles)s.includes(h.textContent.trim())).map(h => {
  let card = h; for (let i = 0; i < 8 && card && !card.querySelector('img'); i++) card = card.parentElement;
  const img = card ? card.querySelector('img') : null;
  return {title: h.textContent.trim(), cut: h.scrollWidth > h.clientWidth + 1,
          thumb: img ? img.naturalWidth : 0, shown: img ? Math.round(img.getBoundingClientRect().width) : 0};
}))()"""
# Click the category entry whose text is exactly `name`.
# The template browser titles the pack's category with its display name (locales/en/main.json).
DISPLAY_NAME = "ReSpec: history-grounded conversational editing"
CATEGORY_JS = """(() => { const el = [...document.querySelectorAll('*')].find(e => e.children.length === 0 &&
    e.textContent.trim() === %(name)s); if (!el) return false;
  (el.closest('button,a,li,[role=option],[role=button]') || el).click(); return true; })()"""
# The canvas after a load: zoom, whether nodes are drawn without text, every node's drawn box.
VIEW_JS = """(() => { const app = %(app)s; const c = app.canvas; const g = app.rootGraph ?? app.graph;
  const threshold = c._lowQualityZoomThreshold ?? c.low_quality_zoom_threshold ?? (c.min_font_size_for_lod ?? 8) / 14;
  const low = typeof c.low_quality === 'boolean' ? c.low_quality : c.ds.scale < threshold;
  return {scale: c.ds.scale, threshold, low, nodes: g._nodes.map(n => ({id: n.id, type: n.type,
    collapsed: !!n.flags?.collapsed, collapsed_width: n.flags?.collapsed ? (n._collapsed_width ?? null) : null,
    pos: [n.pos[0], n.pos[1]], size: [n.size[0], n.size[1]]}))}; })()"""
LOAD_JS = """(async () => { await %(app)s.loadGraphData(%(ui)s, true, true, %(name)s, {openSource: 'template'});
  await new Promise(r => setTimeout(r, 1200)); return true; })()"""


def _index() -> dict:
    return json.loads((ROOT / "workflows" / "api" / "index.json").read_text(encoding="utf-8"))["workflows"]


def crowded_pictures(nodes: list[dict], title_bar: int = 30) -> list[str]:
    """Preview / Save Image (and Mask Preview) nodes whose 300 px below (where a picture makes them
    grow) another node covers, as drawn: ["<id> <type> covers <ids>"]."""
    boxes = [(n["id"], n["type"], n["pos"][0], n["pos"][1] - title_bar, n["pos"][0] + n["size"][0],
              n["pos"][1] + (0 if n["collapsed"] else n["size"][1])) for n in nodes]
    out = []
    for b in boxes:
        if b[1] not in ("PreviewImage", "SaveImage", "MaskPreview"):
            continue
        room = (b[2], b[5], b[4], b[5] + IMAGE_ROOM)
        hit = [o[0] for o in boxes if o[0] != b[0] and room[0] < o[4] and o[2] < room[2] and room[1] < o[5] and o[3] < room[3]]
        if hit:
            out.append(f"{b[0]} {b[1]} covers {hit}")
    return out


async def check_template_browser(page: Page, check, shots: Path | None) -> None:
    """Step 1 of the module docstring."""
    index = _index()
    titles = [e["title"] for e in index.values()]
    want = sorted(titles, key=str.casefold)
    await page.js(f"{APP}.extensionManager.command.execute('Comfy.BrowseTemplates')")
    await page.wait_for(CATEGORY_JS % {"name": json.dumps(DISPLAY_NAME)}, 30, "the pack's category, by its display name")
    # One reading in which every card has its thumbnail (the grid may redraw a card while its picture
    # loads; a later second reading could catch it mid-load); the last reading when none such comes.
    every = f"(c => c.filter(x => x.thumb > 0).length === {len(titles)} ? c : null)({CARDS_JS % {'titles': json.dumps(titles)}})"
    try:
        cards = await page.wait_for(every, 60, "every card and its thumbnail")
    except TimeoutError:
        cards = await page.js(CARDS_JS % {"titles": json.dumps(titles)})
    shown = [c["title"] for c in cards]
    check("the template browser lists every workflow by its title", sorted(shown, key=str.casefold) == want,
          f"{len(shown)} cards: {shown[:3]} ... {shown[-2:]}" + ("" if sorted(shown, key=str.casefold) == want
                                                                 else f"; expected {want}"))
    cut = [c["title"] for c in cards if c["cut"]]
    check("no card title is cut", not cut, f"cut: {cut}" if cut else
          f"every title fits its {len(cards)} card(s)")
    thumbs = sorted({(c["thumb"], c["shown"]) for c in cards})
    check("every card shows its thumbnail", all(c["thumb"] == 512 for c in cards),
          f"(natural, shown) px: {thumbs}")
    if shots is not None:
        await page.screenshot(shots / "template-browser.png")


async def check_opened_from_the_browser(page: Page, check, shots: Path | None) -> None:
    """Step 2: click a conversation's card, as a user does."""
    entry = _index()[OPENED]
    title = entry["title"]
    want = len(json.loads((ROOT / "workflows" / entry["ui"]).read_text(encoding="utf-8"))["nodes"])
    t0 = time.monotonic()
    # The card is the largest box around the title that holds no other title (its picture may not be
    # drawn yet: climbing to the first box with a picture once reached the grid and opened another card).
    clicked = await page.js(f"(() => {{ const h = [...document.querySelectorAll('h3')].find(h => "
                            f"h.textContent.trim() === {json.dumps(title)}); if (!h) return false; "
                            "let card = h; while (card.parentElement && card.parentElement.querySelectorAll('h3').length === 1) "
                            "card = card.parentElement; (card.querySelector('img') || card).click(); return true; })()")
    await page.wait_for(f"({APP}.rootGraph ?? {APP}.graph)._nodes.some(n => n.type === 'ReSpecHistoryAppend')", 60,
                        "the opened graph")
    await asyncio.sleep(1.5)
    await page.js(DIALOG_CLOSE)
    view = await page.js(VIEW_JS % {"app": APP})
    check(f"{title} opened from its card is drawn readable", clicked and not view["low"] and len(view["nodes"]) == want,
          f"{time.monotonic() - t0:.1f} s; zoom {view['scale']:.2f} (text drawn above {view['threshold']:.2f}), "
          f"{len(view['nodes'])} nodes (its file has {want})")
    if shots is not None:
        await page.screenshot(shots / "graph-opened.png")


async def check_opened_readable(page: Page, check, ui_files: list[Path], shots: Path | None = None) -> None:
    """Step 3: every UI workflow as the browser opens it (with `shots`, each conversation as opened:
    opened-<title>.png)."""
    for path in ui_files:
        ui = json.loads(path.read_text(encoding="utf-8"))
        await page.js(LOAD_JS % {"app": APP, "ui": json.dumps(ui), "name": json.dumps(path.stem)})
        view = await page.js(VIEW_JS % {"app": APP})
        crowded = crowded_pictures(view["nodes"])
        chat = path.stem.startswith("ReSpec chat")
        ok = not crowded and (not view["low"] if chat else True)
        check(f"opened {path.stem}", ok,
              f"zoom {view['scale']:.2f} ({'text drawn' if not view['low'] else 'nodes drawn without text'}"
              f"{'' if chat else '; a benchmark graph need not fit whole'}); "
              + (f"pictures would cover nodes: {crowded}" if crowded else "every picture has room below it"))
        if shots is not None and chat:
            await page.screenshot(shots / f"opened-{path.stem}.png")


def check_first_hour(url: str, chromium: str, ui_files: list[Path], shots: str | None = None) -> list[str]:
    """Steps 1-3 of the module docstring in one Chromium; the problems found ([] = all passed)."""
    problems: list[str] = []
    check = checker("frontend/first-hour", problems)
    shots_dir = Path(shots) if shots else None
    if shots_dir is not None:
        shots_dir.mkdir(parents=True, exist_ok=True)

    async def run() -> None:
        async with browser_page(chromium, check, "first-hour run", shots_dir, "first-hour-failure.png",
                                viewport=VIEWPORT, max_size=256 * 2 ** 20) as page:
            http_json("POST", f"{url}/api/settings/Comfy.TutorialCompleted", True)
            await page.send("Page.navigate", {"url": url})
            await page.wait_for(f"!!({APP}?.graph && document.querySelector('canvas'))", 180, "the ComfyUI page")
            await asyncio.sleep(2)
            await page.js(DIALOG_CLOSE)
            await check_template_browser(page, check, shots_dir)
            await check_opened_from_the_browser(page, check, shots_dir)
            await check_opened_readable(page, check, ui_files, shots_dir)
    log("first hour: the template browser and freshly opened graphs (1920 x 1080)")
    asyncio.run(run())
    return problems
