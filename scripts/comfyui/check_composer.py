"""The ReSpec panel's composer in a real ComfyUI frontend, in headless Chromium (part of
`scripts/comfyui/check_in_comfyui.py --frontend`; not part of the pack).

check_composer(url, chromium, python, base, tiny, shots) loads conversational_provenance_flux2 in the
page (tiny random-weight FLUX.2 [klein], 4 steps, the artist's picture uploaded through
/upload/image), opens the ReSpec sidebar tab and, like an artist:
0. sends a request while the editor's model file is not installed, ten times: each failed card names
   the loader by its title and the file, with no empty picture box and no plan line (check_failed_turn);
1. types three requests into the composer and presses Enter after each: each turn must show a
   pending card with step progress (ComfyUI's progress events for the composer's prompt; a turn
   that ended before the panel learnt its id may go from "sending…" straight to its card, but one
   of the three must show steps) and then
   appear as a turn card; the session read back through GET /respec/sessions/<id> must have turns
   0..k after request k; the first says "starting…" and shows no plan line; then the panel's text
   holds no fallback identifier and cuts no label, and every "show changes" shows the change's
   outline or says no change was recorded (check_plain_words, check_show_changes);
2. presses *Undo to here* on turn 1 and confirms: the session has turns 0..1;
3. presses *Branch from here* on turn 1: a new session <id>-b1 with turns 0..1, which the panel
   shows;
4. presses *Regenerate* on the branch's latest turn: the branch again has turns 0..1, turn 1 with
   the same request and a new image (new seed); the source session is unchanged.
One PASS/FAIL line per check with its timing; returns the problems found.
"""
from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path

from check_vue_nodes import NODE_FACTS_JS, node_problems, set_vue_nodes
from comfyui_harness import Page, browser_page, build_tiny_models, checker, http_json, log, upload_picture

ROOT = Path(__file__).resolve().parents[2]
APP = "window.comfyAPI.app.app"
SESSION = "check-chat"
REQUESTS = ("add a red box on the left", "make the sky purple", "remove the red box")
PR = "(document.querySelector('[data-respec-panel]')?.shadowRoot)"
DIALOG_CLOSE = ("document.querySelectorAll('.p-dialog-close-button, .p-dialog-header-close, "
                "[role=\"dialog\"] button[aria-label=\"Close\"]').forEach(b => b.click())")

# Records what the composer's pending card and the panel's message say, as they change (a step
# progress shows for a moment).
WATCH_JS = """(() => { window.__respecSeen = []; window.__respecMsgs = []; const root = %(pr)s;
  const note = (list, el) => { if (!el || el.hidden) return; const t = el.innerText.replace(/\\s+/g, ' ');
    if (list[list.length - 1] !== t) list.push(t); };
  const obs = new MutationObserver(() => { note(window.__respecSeen, root.querySelector('[data-pending]'));
    note(window.__respecMsgs, root.querySelector('.respec-msg')); });
  obs.observe(root, {subtree: true, childList: true, characterData: true, attributes: true}); return true; })()"""
# What the panel shows, in a line: for a click that did nothing.
PANEL_STATE_JS = """(() => { const r = %s; const t = (q) => r.querySelector(q)?.innerText.replace(/\\s+/g, ' ').slice(0, 160);
  return {cards: r.querySelectorAll('.respec-card').length, session: r.querySelector('select')?.value,
    status: t('.respec-status'), message: r.querySelector('.respec-msg')?.hidden ? null : t('.respec-msg'),
    composer: t('.respec-composer'),
    toasts: [...document.querySelectorAll('.p-toast-message')].map(e => e.innerText.replace(/\\s+/g, ' ').slice(0, 200)),
    panels: document.querySelectorAll('[data-respec-panel]').length,
    regenerate: [...r.querySelectorAll('.respec-regenerate')].map(b => ({disabled: b.disabled, connected: b.isConnected})),
    fetches: Object.values(window.__respecFetches ?? {}).map(f => `${f.url} ${((Date.now() - f.t) / 1000).toFixed(1)} s`)}; })()"""
# The page's requests still open, by URL and age (a panel that waits on a request that never ends).
FETCH_WATCH_JS = """(() => { if (window.__respecFetches) return true; window.__respecFetches = {}; let n = 0;
  const orig = window.fetch; window.fetch = function (input, init) { const id = ++n;
    window.__respecFetches[id] = {url: String(input?.url ?? input).replace(location.origin, ''), t: Date.now()};
    return orig.call(this, input, init).finally(() => { delete window.__respecFetches[id]; }); }; return true; })()"""
# The graph's seed widgets, "<node id>:<value>" (Regenerate must give them a new value).
SEEDS_JS = """(() => { const g = %(app)s.rootGraph ?? %(app)s.graph; return g._nodes.flatMap(n => (n.widgets ?? [])
  .filter(w => w.name === 'seed' || w.name === 'noise_seed').map(w => `${n.id}:${w.value}`)); })()"""
TYPE_JS = """(() => { const t = %(pr)s.querySelector('textarea'); t.focus(); t.value = %(text)s;
  t.dispatchEvent(new KeyboardEvent('keydown', {key: 'Enter', bubbles: true, composed: true})); return true; })()"""
SET_WIDGET_JS = """(() => { const g = %(app)s.rootGraph ?? %(app)s.graph; const n = g._nodes.find(n => n.type === %(type)s);
  const w = n.widgets.find(w => w.name === %(name)s); const old = w.value; w.value = %(value)s; return old; })()"""
# A fallback identifier left in the panel's text (three or more snake_case words); tooltips may keep them.
RAW_IDENTIFIER = re.compile(r"\b[a-z]+(?:_[a-z]+){2,}\b")
# Text boxes of the panel wider than their box (cut) - the session drop-down's own text excepted: it
# has a tooltip and the line under it says the session in full.
CUT_JS = """(() => [...%(pr)s.querySelectorAll('div, span, button, label, h3, summary')].filter(e =>
  e.offsetParent !== null && e.children.length === 0 && e.scrollWidth > e.clientWidth + 1 &&
  getComputedStyle(e).overflowX !== 'auto').map(e => e.className + ': ' + e.textContent.trim().slice(0, 60)))()"""
# The yellow of the change overlay's outline (rgb 241, 196, 15) on the large canvas: pixels of it.
CHANGE_PIXELS_JS = """(() => { const c = %(pr)s.querySelector('.respec-latest canvas');
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; let n = 0;
  for (let i = 0; i < d.length; i += 4) if (Math.abs(d[i] - 241) < 24 && Math.abs(d[i + 1] - 196) < 24 && d[i + 2] < 70) n++;
  return n; })()"""

# Started, not awaited through the DevTools call: its outcome lands in window.__respecSetup (an
# awaited evaluation's promise was "collected" by frontend 1.45.15 in Nodes 2.0 after other graphs
# had been loaded in an earlier page, though the graph loaded).
SETUP_JS = """(() => { window.__respecSetup = null; (async () => {
  const app = %(app)s;
  await app.loadGraphData(%(ui)s, true, true, %(name)s);
  const g = app.rootGraph ?? app.graph; const set = (type, name, value) => {
    for (const n of g._nodes) if (n.type === type) { const w = n.widgets.find(x => x.name === name);
      if (!w) throw new Error(type + ' has no widget ' + name); w.value = value; } };
  set('LoadImage', 'image', %(image)s);
  set('ReSpecHistoryStore', 'session_id', %(session)s);
  set('ReSpecFlux2Loader', 'model', %(model)s);
  set('ReSpecFlux2Loader', 'dtype', 'fp32');
  set('ReSpecFlux2Edit', 'steps', 4);   // long enough for its steps to show: a 2-step turn once ended (0.5 s) before its id was known
  return g._nodes.length; })().then(n => { window.__respecSetup = {n}; },
                                    e => { window.__respecSetup = {error: String(e)}; });
  return true; })()"""


def _session(url: str, sid: str) -> tuple[list[int] | None, dict]:
    status, body = http_json("GET", f"{url}/respec/sessions/{sid}")
    if status != 200 or not isinstance(body, dict):
        return None, {"status": status, "body": str(body)[:200]}
    return [t.get("index") for t in body.get("turns") or []], body


async def _click(page: Page, selector: str) -> bool:
    return await page.js(f"(() => {{ const b = {PR}.querySelector({json.dumps(selector)}); "
                         "if (!b) return false; b.click(); return true; })()")


async def _wait_turns(page: Page, url: str, sid: str, want: list[int], timeout: float) -> tuple[list[int] | None, dict]:
    deadline = time.monotonic() + timeout
    turns, body = _session(url, sid)
    while turns != want and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        turns, body = _session(url, sid)
    return turns, body


async def _wait_panel(page: Page, expression: str, timeout: float, what: str) -> object:
    """page.wait_for, and on a timeout what the panel showed then (cards, message, open requests)."""
    try:
        return await page.wait_for(expression, timeout, what)
    except TimeoutError as e:
        raise TimeoutError(f"{e}; the panel shows {await page.js(PANEL_STATE_JS % PR)}") from None


async def _send(page: Page, text: str) -> None:
    await page.js(TYPE_JS % {"pr": PR, "text": json.dumps(text)})


LOADER_TITLE = "Flux.2 [klein] Loader (ReSpec)"
FAILED_SENDS = 10   # a prompt that fails at once raced the composer's learning of its id (issue 45): sent again and again


async def check_failed_turn(page: Page, check, model: str, shots: Path | None, sends: int = FAILED_SENDS,
                            missing: str = "no-such-klein-model", how: bool = False) -> None:
    """A request sent while the editor's model is not installed, `sends` times: each time the pending
    card turns into a failed card (never left at "sending…" / "starting…") whose first line names the
    loader by its title and the missing model, with no empty picture box and no plan line; with `how`,
    the card also says where it looked and how to get it (the loader's own words, from ComfyUI's
    validation: `missing` is a listed Hugging Face id that is not on this machine)."""
    await page.js(SET_WIDGET_JS % {"app": APP, "type": json.dumps("ReSpecFlux2Loader"), "name": json.dumps("model"),
                                   "value": json.dumps(missing)})
    good, bad, seconds = 0, [], []
    for k in range(sends):
        t0 = time.monotonic()
        await _send(page, f"{REQUESTS[0]} ({k + 1})")
        try:
            await page.wait_for(f"!!{PR}.querySelector('[data-pending].failed')", 60, "the failed card")
        except TimeoutError:
            status = await page.js(f"{PR}.querySelector('[data-pending] .st')?.innerText ?? 'no card'")
            bad.append(f"send {k + 1}: no failed card in 60 s (status {status!r})")
            await page.js(f"[...{PR}.querySelectorAll('[data-pending] button')].find(b => b.innerText.includes('Cancel'))?.click()")
            await asyncio.sleep(2)
            continue
        seconds.append(time.monotonic() - t0)
        card = await page.js(f"""(() => {{ const c = {PR}.querySelector('[data-pending].failed');
          return {{err: [...c.querySelectorAll('.err')].map(e => e.innerText), slot: !!c.querySelector('.respec-slot'),
                   plan: c.querySelectorAll('.s').length, text: c.innerText.replace(/\\s+/g, ' ')}}; }})()""")
        first = card["err"][0] if card["err"] else ""
        # A file the frontend can see is not in the list is refused before it runs (no execution_error: the
        # card names the loader and the file); one that fails while loading adds where it looked and how to get it.
        ok = missing in first and first.startswith(LOADER_TITLE) and not card["slot"] and card["plan"] == 0 and (
            not how or ("Looked in" in card["text"] and "How to get it" in card["text"]))
        if ok:
            good += 1
        else:
            bad.append(f"send {k + 1}: {card['text'][:200]!r}")
        if k == 0 and shots is not None:
            await page.screenshot(shots / "frontend-failed-turn.png")
        await page.js(DIALOG_CLOSE)
        await page.js(f"[...{PR}.querySelectorAll('[data-pending] button')].find(b => b.innerText.includes('Dismiss'))?.click()")
        await page.wait_for(f"!{PR}.querySelector('[data-pending]')", 10, "the dismissed card")
    check(f"a failed turn says why, every time: the loader's title and the missing "
          f"{'model, where it looked, how to get it' if how else 'file'}", good == sends, f"{good} of {sends} sends; failed card after {min(seconds or [0]):.1f}-{max(seconds or [0]):.1f} s"
          + (f"; {bad[:3]}" if bad else ""))
    await page.js(SET_WIDGET_JS % {"app": APP, "type": json.dumps("ReSpecFlux2Loader"), "name": json.dumps("model"),
                                   "value": json.dumps(model)})


def first_turn_words(seen: list[str], msgs: list[str]) -> tuple[bool, str]:
    """While the first turn of a new session was being made: the panel said it was starting, never
    that the session does not exist, and showed no plan line (turn 1 makes no plan worth showing)."""
    starting = any("starting…" in m for m in msgs + seen)
    missing = [m for m in msgs if "does not exist yet" in m]
    planned = [s for s in seen if "not a restoration" in s]
    return (starting and not missing and not planned,
            f"messages {msgs[:3]!r}; pending card {seen[:2]!r}"
            + (f"; said 'does not exist' {len(missing)}x" if missing else "")
            + (f"; showed a plan line {planned[:1]!r}" if planned else ""))


async def check_plain_words(page: Page, check, session: str) -> None:
    """No fallback identifier in the panel's text, no label cut, the session shown said in full."""
    text = await page.js(f"{PR}.querySelector('.respec-panel').innerText")
    raw = sorted(set(RAW_IDENTIFIER.findall(text)))
    showing = await page.js(f"{PR}.querySelector('.respec-showing')?.innerText ?? ''")
    title = await page.js(f"{PR}.querySelector('select').title")
    cut = await page.js(CUT_JS % {"pr": PR})
    check("the panel speaks in words and cuts no label", not raw and not cut and session in showing and bool(title),
          f"identifiers in the text: {raw or 'none'}; cut: {cut or 'none'}; under the drop-down: {showing!r}; "
          f"its tooltip {title!r}")


async def check_show_changes(page: Page, check) -> None:
    """Every "show changes" shows a visible overlay (the outline of the change) or says that no
    change was recorded for the turn."""
    results = []
    n = await page.js(f"{PR}.querySelectorAll('.respec-card').length")
    for i in range(n):
        has = await page.js(f"[...{PR}.querySelectorAll('.respec-card')[{i}].querySelectorAll('button')]"
                            ".some(b => b.innerText.includes('show changes'))")
        if not has:
            continue
        await page.js(f"[...{PR}.querySelectorAll('.respec-card')[{i}].querySelectorAll('button')]"
                      ".find(b => b.innerText.includes('show changes')).click()")
        await asyncio.sleep(1.5)
        note = await page.js(f"(() => {{ const e = {PR}.querySelector('.respec-changes'); "
                             "return e && !e.hidden ? e.innerText : ''; })()")
        pixels = await page.js(CHANGE_PIXELS_JS % {"pr": PR})
        results.append((i, pixels, note))
        await page.js(f"[...{PR}.querySelectorAll('.respec-card')[{i}].querySelectorAll('button')]"
                      ".find(b => b.innerText.includes('changes shown'))?.click()")
        await asyncio.sleep(0.5)
    check("show changes shows the change or says none was recorded",
          bool(results) and all(px > 0 or "No change recorded" in note for _, px, note in results),
          "; ".join(f"I{i}: {px} outline px" + (f", says {note[:50]!r}" if note else "") for i, px, note in results))


def check_composer(url: str, chromium: str, python: str, base: Path, tiny: dict | None,
                   shots: str | None = None, vue_nodes: bool = False) -> list[str]:
    """Drive the composer as described in the module text; the problems found ([] = all passed).
    `tiny` = the tiny models of comfyui_harness.build_tiny_models (built into base/models when
    None); `shots`: a folder for the screenshots (frontend-chat.png, frontend-chat-branch.png).
    `vue_nodes`: the same with Nodes 2.0 on (its own session; after the first turn the graph's
    nodes must be drawn as elements and its Save Image node must show the turn's picture)."""
    if vue_nodes:
        set_vue_nodes(url, True)
        try:
            return _check_composer(url, chromium, python, base, tiny, shots, f"{SESSION}-vue",
                                   "frontend/nodes-2.0/composer", vue=True)
        finally:
            set_vue_nodes(url, False)
    return _check_composer(url, chromium, python, base, tiny, shots, SESSION, "frontend/composer")


def _check_composer(url: str, chromium: str, python: str, base: Path, tiny: dict | None, shots: str | None,
                    session: str, label: str, vue: bool = False) -> list[str]:
    shots = Path(shots) if shots else None
    docs = None if vue else shots   # the docs' classic screenshots come from the classic run
    problems: list[str] = []
    check = checker(label, problems)
    if tiny is None:
        t0 = time.monotonic()
        tiny = build_tiny_models(python, base)
        log(f"composer: tiny models built in {time.monotonic() - t0:.1f} s")
    image, why = upload_picture(url)
    if image is None:
        check("upload", False, why)
        return problems
    ui_name = json.loads((ROOT / "workflows" / "api" / "index.json").read_text(encoding="utf-8"))[
        "workflows"]["conversational_provenance_flux2"]["ui"]
    ui = json.loads((ROOT / "workflows" / ui_name).read_text(encoding="utf-8"))

    async def run() -> None:
        async with browser_page(chromium, check, "composer run", shots, "composer-failure.png",
                                viewport=(1400, 1300)) as page:
            http_json("POST", f"{url}/api/settings/Comfy.TutorialCompleted", True)
            await page.send("Page.navigate", {"url": url})
            await page.wait_for(f"!!({APP}?.graph && document.querySelector('canvas') && "
                                f"{APP}.extensionManager?.getSidebarTabs)", 180, "the ComfyUI page")
            await asyncio.sleep(2)
            await page.js("document.querySelectorAll('.p-dialog-close-button, .p-dialog-header-close')"
                          ".forEach(b => b.click())")
            await page.js(SETUP_JS % {"app": APP, "ui": json.dumps(ui), "name": json.dumps(ui_name),
                                      "image": json.dumps(image), "session": json.dumps(session),
                                      "model": json.dumps(Path(tiny["klein"]).name)})
            setup = await page.wait_for("window.__respecSetup", 60, "the graph loaded and set up")
            if "error" in setup:
                raise RuntimeError(f"setting up the graph failed: {setup['error']}")
            n = setup["n"]
            await page.js(f"{APP}.extensionManager.command.execute('Workspace.ToggleSidebarTab.respec-history')")
            await page.wait_for(f"!!{PR}?.querySelector('textarea')", 30, "the composer")
            log(f"composer: graph loaded ({n} nodes), panel open")
            await page.js(FETCH_WATCH_JS)
            page.console.clear()
            # 0. A request while the model file is missing fails in words.
            await check_failed_turn(page, check, Path(tiny["klein"]).name, None)
            # The graph as a new user opens it: the default klein id, listed, not on this machine (issue 45);
            # the docs' picture of a failed turn is this one.
            await check_failed_turn(page, check, Path(tiny["klein"]).name, docs,
                                    missing="black-forest-labs/FLUX.2-klein-base-9B", how=True)
            await page.js(WATCH_JS % {"pr": PR})

            # 1. Three requests typed into the composer.
            stepped = 0
            for k, request in enumerate(REQUESTS, start=1):
                t0 = time.monotonic()
                await _send(page, request)
                if k == len(REQUESTS) and docs is not None:
                    # The pending card while the editor steps (the tiny editor takes ~1 s a step on a CPU).
                    try:
                        await page.wait_for(f"{PR}.querySelector('[data-pending]')?.innerText.includes('step')", 60)
                        docs.mkdir(parents=True, exist_ok=True)
                        await page.screenshot(docs / "frontend-chat-running.png")
                    except TimeoutError:
                        log("composer: no step progress caught for the running screenshot")
                turns, body = await _wait_turns(page, url, session, list(range(k + 1)), 600)
                await _wait_panel(page, f"!{PR}.querySelector('[data-pending]') && "
                                    f"{PR}.querySelectorAll('.respec-card').length === {k + 1}", 30,
                                    f"turn card {k}")
                seen = await page.js("window.__respecSeen.splice(0)")
                msgs = await page.js("window.__respecMsgs.splice(0)")
                if k == 1:
                    check("a new session's first turn says starting…, shows no plan", *first_turn_words(seen, msgs))
                steps = [s for s in seen if "step " in s]
                last = (body.get("turns") or [{}])[-1] if turns else {}
                # A removal that history first answered runs no sampler, so it has no step progress to show.
                undone = (last.get("meta") or {}).get("editor_run") is False
                # A turn can end before the panel learns its prompt's id (from /queue or /history): its
                # events, kept by id, are then replayed at once and the card goes from "sending…" to
                # the turn. That is shown as no step progress; at least one request must show steps.
                quick = bool(seen) and all("sending" in s for s in seen)
                stepped += bool(steps)
                check(f"request {k} typed into the composer", turns == list(range(k + 1))
                      and last.get("instruction") == request and (bool(steps) or undone or quick)
                      and (k < len(REQUESTS) or stepped > 0),
                      f"{time.monotonic() - t0:.1f} s; session turns {turns}; turn {k} {last.get('instruction')!r}; "
                      f"pending card showed {len(seen)} states, {len(steps)} with step progress "
                      f"(e.g. {steps[-1][:90] if steps else seen[:2]!r})"
                      + ("; taken back from history, the editor was not run" if undone else "")
                      + ("; it ended before the panel learnt its id" if quick and not steps else "")
                      + ("" if k < len(REQUESTS) or stepped else "; no request showed step progress"))
                if k == 1 and vue:
                    await asyncio.sleep(1.0)
                    facts = await page.js(NODE_FACTS_JS % {"app": APP})
                    saved = [f for f in facts if f["type"] in ("SaveImage", "PreviewImage")]
                    shown = [f for f in saved if f["images"] and all(f["images"])]
                    found = node_problems(facts)
                    check("the executed graph in Nodes 2.0", not found and len(shown) == len(saved),
                          f"{len(facts)} nodes drawn; {len(shown)} of {len(saved)} Save / Preview Image nodes show "
                          f"their picture; {found[:3] or 'no problem'}")
            await check_plain_words(page, check, session)
            await check_show_changes(page, check)
            if docs is not None:
                docs.mkdir(parents=True, exist_ok=True)
                await page.js(f"{PR}.querySelector('textarea').value = 'bring the red box back'")
                await page.screenshot(docs / "frontend-chat.png")
            # 2. Undo to here on turn 1 (confirmed in the frontend's dialog).
            t0 = time.monotonic()
            await page.js(f"(() => {{ const c = {PR}.querySelectorAll('.respec-card')[1]; "
                          "c.querySelector('.respec-undo').click(); return true; })()")
            # The frontend's confirmation dialog (PrimeVue .p-dialog in 1.35; role=dialog in later ones).
            dialog = ("[...document.querySelectorAll('.p-dialog, [role=dialog], [role=alertdialog]')]"
                      ".find(d => d.innerText.includes('Rewind session'))")
            await page.wait_for(f"!!{dialog}", 15, "the confirmation")
            await page.js(f"[...{dialog}.querySelectorAll('button')].find(b => b.innerText.includes('Confirm')).click()")
            turns, body = await _wait_turns(page, url, session, [0, 1], 30)
            await _wait_panel(page, f"{PR}.querySelectorAll('.respec-card').length === 2", 20, "2 cards after undo")
            check("Undo to here on turn 1", turns == [0, 1], f"{time.monotonic() - t0:.1f} s; session turns {turns}")
            # 3. Branch from here on turn 1.
            t0 = time.monotonic()
            await page.js(f"{PR}.querySelectorAll('.respec-card')[1].querySelector('.respec-branch').click()")
            branch = f"{session}-b1"
            bturns, bbody = await _wait_turns(page, url, branch, [0, 1], 30)
            shown = await _wait_panel(page, f"{PR}.querySelector('select').value === {json.dumps(branch)} && "
                                        f"{PR}.querySelectorAll('.respec-card').length === 2", 20, "the branch shown")
            turns, _ = _session(url, session)
            check("Branch from here on turn 1", bturns == [0, 1] and turns == [0, 1] and bool(shown)
                  and bbody.get("turns", [{}])[1].get("image") == body["turns"][1].get("image"),
                  f"{time.monotonic() - t0:.1f} s; branch {branch} turns {bturns}, source turns {turns}, panel shows it")
            # 4. Regenerate the branch's latest turn: same request, new seed.
            t0 = time.monotonic()
            old, bversion = bbody["turns"][1], bbody.get("version")
            # The panel re-renders the branch's cards once more after showing it: click the new button.
            regenerate = f"{PR}.querySelectorAll('.respec-card')[1]?.querySelector('.respec-regenerate')"
            await _wait_panel(page, f"!!{regenerate} && !{regenerate}.disabled", 20, "the branch's Regenerate button")
            page.phase = "regenerate"
            seeds = await page.js(SEEDS_JS % {"app": APP})
            # Was the button enabled at the click itself (a disabled button ignores click())?
            clicked = await page.js(f"(() => {{ const b = {regenerate}; const d = b?.disabled; b?.click(); "
                                    "return {found: !!b, disabled: d}; })()")
            deadline = time.monotonic() + 600
            moved = False   # anything happened: the branch rewound, or a card is pending
            while time.monotonic() < deadline:
                bturns, bbody = _session(url, branch)
                if bturns == [0, 1] and bbody["turns"][1].get("image") != old.get("image"):
                    break
                moved = moved or bturns != [0, 1] or bool(await page.js(f"!!{PR}.querySelector('[data-pending]')"))
                if not moved and time.monotonic() > t0 + 30:
                    break   # the click did nothing: say what the panel said, not wait 10 minutes
                await asyncio.sleep(0.5)
            await _wait_panel(page, f"!{PR}.querySelector('[data-pending]')", 30, "the regenerated card")
            new = bbody["turns"][1] if bturns == [0, 1] else {}
            turns, _ = _session(url, session)
            check("Regenerate the latest turn of the branch", bturns == [0, 1] and turns == [0, 1]
                  and new.get("instruction") == old.get("instruction") and new.get("image") != old.get("image"),
                  f"{time.monotonic() - t0:.1f} s; branch turns {bturns}, turn 1 {new.get('instruction')!r}, image "
                  f"{str(old.get('image'))[:10]} -> {str(new.get('image'))[:10]}; source turns {turns}"
                  + ("" if moved else f"; nothing happened after the click {clicked}; the page said "
                     f"{[m['text'][:200] for m in page.messages if m['phase'] == 'regenerate'][:5]}; "
                     f"the panel shows {await page.js(PANEL_STATE_JS % PR)}")
                  + ("" if new.get("image") != old.get("image") else
                     f"; branch version {bbody.get('version')} (was {bversion}); seeds {seeds} -> "
                     f"{await page.js(SEEDS_JS % {'app': APP})}"))
            if docs is not None:
                await page.screenshot(docs / "frontend-chat-branch.png")
            errors = [m for m in page.console if "ReSpec" in m or "respec" in m]
            check("no ReSpec error logged by the page", not errors, f"{errors[:3]}")
            if shots is not None:
                shots.mkdir(parents=True, exist_ok=True)
                await page.screenshot(shots / ("composer-nodes2.png" if vue else "composer.png"))

    asyncio.run(run())
    return problems
