"""The ReSpec panel's composer in a real ComfyUI frontend, in headless Chromium (part of
`scripts/comfyui/check_in_comfyui.py --frontend`; not part of the pack).

check_composer(url, chromium, python, base, tiny, shots) loads conversational_provenance_flux2 in the
page (tiny random-weight FLUX.2 [klein], 2 steps, the artist's picture uploaded through
/upload/image), opens the ReSpec sidebar tab and, like an artist:
1. types three requests into the composer and presses Enter after each: each turn must show a
   pending card with step progress (ComfyUI's progress events for the composer's prompt) and then
   appear as a turn card; the session read back through GET /respec/sessions/<id> must have turns
   0..k after request k;
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
import shutil
import tempfile
import time
from pathlib import Path

from check_vue_nodes import NODE_FACTS_JS, node_problems, set_vue_nodes
from comfyui_harness import Page, build_tiny_models, checker, http_json, log, start_chromium, stop, upload_picture

ROOT = Path(__file__).resolve().parents[2]
APP = "window.comfyAPI.app.app"
SESSION = "check-chat"
REQUESTS = ("add a red box on the left", "make the sky purple", "remove the red box")
PR = "(document.querySelector('[data-respec-panel]')?.shadowRoot)"

# Records what the composer's pending card says, as it changes (a step progress shows for a moment).
WATCH_JS = """(() => { window.__respecSeen = []; const root = %(pr)s;
  const obs = new MutationObserver(() => { const p = root.querySelector('[data-pending]');
    if (p) { const t = p.innerText.replace(/\\s+/g, ' '); const s = window.__respecSeen;
      if (s[s.length - 1] !== t) s.push(t); } });
  obs.observe(root, {subtree: true, childList: true, characterData: true}); return true; })()"""

SETUP_JS = """(async () => {
  const app = %(app)s;
  await app.loadGraphData(%(ui)s, true, true, 'conversational_provenance_flux2.json');
  const g = app.rootGraph ?? app.graph; const set = (type, name, value) => {
    for (const n of g._nodes) if (n.type === type) { const w = n.widgets.find(x => x.name === name);
      if (!w) throw new Error(type + ' has no widget ' + name); w.value = value; } };
  set('LoadImage', 'image', %(image)s);
  set('ReSpecHistoryStore', 'session_id', %(session)s);
  set('ReSpecFlux2Loader', 'model', %(model)s);
  set('ReSpecFlux2Loader', 'dtype', 'fp32');
  set('ReSpecFlux2Edit', 'steps', 2);
  return g._nodes.length; })()"""


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
    ui = json.loads((ROOT / "workflows" / "conversational_provenance_flux2.json").read_text(encoding="utf-8"))

    async def run() -> None:
        profile = Path(tempfile.mkdtemp(prefix="respec-chat-chrome-"))
        proc, port = start_chromium(chromium, profile)
        page = None
        try:
            page = await Page.open(port, timeout=120, viewport=(1400, 1300))
            http_json("POST", f"{url}/api/settings/Comfy.TutorialCompleted", True)
            await page.send("Page.navigate", {"url": url})
            await page.wait_for(f"!!({APP}?.graph && document.querySelector('canvas') && "
                                f"{APP}.extensionManager?.getSidebarTabs)", 180, "the ComfyUI page")
            await asyncio.sleep(2)
            await page.js("document.querySelectorAll('.p-dialog-close-button, .p-dialog-header-close')"
                          ".forEach(b => b.click())")
            n = await page.js(SETUP_JS % {"app": APP, "ui": json.dumps(ui), "image": json.dumps(image),
                                          "session": json.dumps(session),
                                          "model": json.dumps(Path(tiny["klein"]).name)})
            await page.js(f"{APP}.extensionManager.command.execute('Workspace.ToggleSidebarTab.respec-history')")
            await page.wait_for(f"!!{PR}?.querySelector('textarea')", 30, "the composer")
            await page.js(WATCH_JS % {"pr": PR})
            log(f"composer: graph loaded ({n} nodes), panel open")
            page.console.clear()

            # 1. Three requests typed into the composer.
            for k, request in enumerate(REQUESTS, start=1):
                t0 = time.monotonic()
                await page.js(f"(() => {{ const t = {PR}.querySelector('textarea'); t.focus(); "
                              f"t.value = {json.dumps(request)}; t.dispatchEvent(new KeyboardEvent('keydown', "
                              "{key: 'Enter', bubbles: true, composed: true})); return true; })()")
                if k == len(REQUESTS) and docs is not None:
                    # The pending card while the editor steps (the tiny editor takes ~1 s a step on a CPU).
                    try:
                        await page.wait_for(f"{PR}.querySelector('[data-pending]')?.innerText.includes('step')", 60)
                        docs.mkdir(parents=True, exist_ok=True)
                        await page.screenshot(docs / "frontend-chat-running.png")
                    except TimeoutError:
                        log("composer: no step progress caught for the running screenshot")
                turns, body = await _wait_turns(page, url, session, list(range(k + 1)), 600)
                await page.wait_for(f"!{PR}.querySelector('[data-pending]') && "
                                    f"{PR}.querySelectorAll('.respec-card').length === {k + 1}", 30,
                                    f"turn card {k}")
                seen = await page.js("window.__respecSeen.splice(0)")
                steps = [s for s in seen if "step " in s]
                last = (body.get("turns") or [{}])[-1] if turns else {}
                check(f"request {k} typed into the composer", turns == list(range(k + 1))
                      and last.get("instruction") == request and bool(steps),
                      f"{time.monotonic() - t0:.1f} s; session turns {turns}; turn {k} {last.get('instruction')!r}; "
                      f"pending card showed {len(seen)} states, {len(steps)} with step progress "
                      f"(e.g. {steps[-1][:90] if steps else seen[:2]!r})")
                if k == 1 and vue:
                    await asyncio.sleep(1.0)
                    facts = await page.js(NODE_FACTS_JS % {"app": APP})
                    saved = [f for f in facts if f["type"] in ("SaveImage", "PreviewImage")]
                    shown = [f for f in saved if f["images"] and all(f["images"])]
                    found = node_problems(facts)
                    check("the executed graph in Nodes 2.0", not found and len(shown) == len(saved),
                          f"{len(facts)} nodes drawn; {len(shown)} of {len(saved)} Save / Preview Image nodes show "
                          f"their picture; {found[:3] or 'no problem'}")
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
            await page.wait_for(f"{PR}.querySelectorAll('.respec-card').length === 2", 20, "2 cards after undo")
            check("Undo to here on turn 1", turns == [0, 1], f"{time.monotonic() - t0:.1f} s; session turns {turns}")
            # 3. Branch from here on turn 1.
            t0 = time.monotonic()
            await page.js(f"{PR}.querySelectorAll('.respec-card')[1].querySelector('.respec-branch').click()")
            branch = f"{session}-b1"
            bturns, bbody = await _wait_turns(page, url, branch, [0, 1], 30)
            shown = await page.wait_for(f"{PR}.querySelector('select').value === {json.dumps(branch)} && "
                                        f"{PR}.querySelectorAll('.respec-card').length === 2", 20, "the branch shown")
            turns, _ = _session(url, session)
            check("Branch from here on turn 1", bturns == [0, 1] and turns == [0, 1] and bool(shown)
                  and bbody.get("turns", [{}])[1].get("image") == body["turns"][1].get("image"),
                  f"{time.monotonic() - t0:.1f} s; branch {branch} turns {bturns}, source turns {turns}, panel shows it")
            # 4. Regenerate the branch's latest turn: same request, new seed.
            t0 = time.monotonic()
            old = bbody["turns"][1]
            # The panel re-renders the branch's cards once more after showing it: click the new button.
            regenerate = f"{PR}.querySelectorAll('.respec-card')[1]?.querySelector('.respec-regenerate')"
            await page.wait_for(f"!!{regenerate} && !{regenerate}.disabled", 20, "the branch's Regenerate button")
            await page.js(f"{regenerate}.click()")
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                bturns, bbody = _session(url, branch)
                if bturns == [0, 1] and bbody["turns"][1].get("image") != old.get("image"):
                    break
                await asyncio.sleep(0.5)
            await page.wait_for(f"!{PR}.querySelector('[data-pending]')", 30, "the regenerated card")
            new = bbody["turns"][1] if bturns == [0, 1] else {}
            turns, _ = _session(url, session)
            check("Regenerate the latest turn of the branch", bturns == [0, 1] and turns == [0, 1]
                  and new.get("instruction") == old.get("instruction") and new.get("image") != old.get("image"),
                  f"{time.monotonic() - t0:.1f} s; branch turns {bturns}, turn 1 {new.get('instruction')!r}, image "
                  f"{str(old.get('image'))[:10]} -> {str(new.get('image'))[:10]}; source turns {turns}")
            if docs is not None:
                await page.screenshot(docs / "frontend-chat-branch.png")
            errors = [m for m in page.console if "ReSpec" in m or "respec" in m]
            check("no ReSpec error logged by the page", not errors, f"{errors[:3]}")
            if shots is not None:
                shots.mkdir(parents=True, exist_ok=True)
                await page.screenshot(shots / ("composer-nodes2.png" if vue else "composer.png"))
        except Exception as e:  # leave evidence
            check("composer run", False, f"{type(e).__name__}: {e}")
            if page is not None and shots is not None:
                shots.mkdir(parents=True, exist_ok=True)
                await page.screenshot(shots / "composer-failure.png")
        finally:
            if page is not None:
                await page.close()
            stop(proc, timeout=10)
            shutil.rmtree(profile, ignore_errors=True)

    asyncio.run(run())
    return problems
