"""Check the ReSpec panel in a real ComfyUI in headless Chromium, offline, on CPU.

    python scripts/comfyui/check_frontend.py --comfyui /path/to/ComfyUI --python /path/to/its/python \\
        [--chromium /usr/bin/chromium] [--out DIR] [--docs]

Needs, in the Python running this script: websockets, numpy, pillow, scikit-image (for the photo).
What it does (nothing inside the ComfyUI checkout is touched):
1. makes a temporary base directory (--base-directory) whose custom_nodes/ holds a link to this
   pack and a small check harness (written by this script, see HARNESS), whose input/ holds a
   photo (scikit-image's "chelsea") and whose user/ holds the session store;
2. starts a fake OpenAI-compatible controller on 127.0.0.1 (one canned restoration answer, sent
   after a short delay) and ComfyUI with `--cpu --disable-api-nodes --listen 127.0.0.1`;
3. starts Chromium headless with a fresh profile and background networking off, and drives it
   through the DevTools protocol, collecting every console message, uncaught exception and
   browser log entry (failed resource loads included);
4. phases: (a) load the page (default graph, no ReSpec node, empty store); (b) open the ReSpec
   sidebar tab; (c) load a ReSpec graph into the canvas (session not created yet); (d) queue it
   from the page and screenshot the panel while it runs and after it ran; (e) undo from the panel:
   cancel once, then confirm a rewind to turn 1, then to turn 0 (a session with no edits);
5. with --baseline, loads the page once more with every custom node disabled, so messages that
   ComfyUI's own frontend prints can be told apart from the pack's;
6. prints every console message per phase and a summary; exit status 0 only when every check
   passed and no error-level message appeared that the baseline does not also have.

The graph: LoadImage -> History Store (new) -> Append "add a red umbrella" (a red box pasted with
ImageCompositeMasked) -> Append "soft-focus look" (ImageBlur) -> OpenAI Controller + Preservation
Target (forced restoration turn; the fake answers restoration_source_id 0, identity_anchor_id 2)
-> Reference Selector -> Instruction Rewriter -> the original pixels pasted back where the box was
(a stand-in for the editor) -> Append (with the plan and the rewritten instruction) -> the pack's
OCCUR Score node (reference turn 0), fed by two harness nodes instead of the loaders that need real
weights: the pack's Scorer built from tiny random-weight LPIPS / CLIP
(respec.eval.metric_models.build_tiny_scorer) and TrajectoryMasks whose occluder is the box on
turns 1-2 (instead of YOLO-World + SAM). The scores
therefore only show that the plumbing works; they are not a measurement of anything.
"""
from __future__ import annotations

import argparse
import asyncio
import http.server
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

from comfyui_harness import (HarnessError, Page, free_port, http_json, is_error, log, require_check_packages,
                             start_chromium, start_comfyui, stop)

ROOT = Path(__file__).resolve().parents[2]
PACK_DIR_NAME = "ReSpec-ComfyUI"
SESSION = "frontend-check"
BOX = dict(x=96, y=64, w=112, h=96)     # where turn 1 pastes the red "umbrella" (on a 384x256 photo)
PHOTO_SIZE = (384, 256)
# Chromium flags on top of the harness's: no default apps, no metrics upload, no translate / hints /
# media-router / autofill-server traffic.
CHROME_FLAGS = ("--disable-default-apps", "--metrics-recording-only",
                "--disable-features=Translate,OptimizationHints,MediaRouter,AutofillServerCommunication")
# A tall viewport so the whole panel (4 turn cards) fits in one screenshot.
VIEWPORT = (1400, 1350)
# ComfyUI's environment on top of the harness's offline switches.
COMFY_ENV = {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost", "DO_NOT_TRACK": "1"}

HARNESS = r'''
"""Check harness written by scripts/comfyui/check_frontend.py (not part of the pack): a tiny scorer and
box masks for the pack's real OCCUR Score node, so it can run without YOLO-World, SAM, LPIPS or
CLIP weights."""
import sys, time


def _mod(sub):
    import importlib
    for name, mod in list(sys.modules.items()):
        maps = getattr(mod, "NODE_CLASS_MAPPINGS", None)
        if name.endswith("ReSpec-ComfyUI") and isinstance(maps, dict) and "ReSpecHistoryStore" in maps:
            return importlib.import_module(name + "." + sub)
    raise RuntimeError("the ReSpec pack is not loaded")


class ReSpecCheckTinyScorer:
    """The pack's Scorer with tiny random-weight LPIPS / CLIP (respec.eval.metric_models.build_tiny_scorer)."""
    CATEGORY = "ReSpec/check"
    FUNCTION = "run"
    RETURN_TYPES = ("RESPEC_SCORER",)
    DESCRIPTION = "Check harness only."

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {}}

    def run(self):
        return (_mod("respec.eval.metric_models").build_tiny_scorer(0),)


class ReSpecCheckBoxMasks:
    """TrajectoryMasks whose occluder is a box on the given turns (no new objects)."""
    CATEGORY = "ReSpec/check"
    FUNCTION = "run"
    RETURN_TYPES = ("RESPEC_MASKS",)
    DESCRIPTION = "Check harness only."

    @classmethod
    def INPUT_TYPES(cls):
        i = lambda: ("INT", {"default": 0, "min": 0, "max": 4096, "tooltip": "box"})
        return {"required": {"history": ("RESPEC_HISTORY", {"tooltip": "history"}),
                             "x": i(), "y": i(), "w": i(), "h": i(),
                             "occluder_turns": ("STRING", {"default": "1", "tooltip": "turns with the box"}),
                             "delay": ("FLOAT", {"default": 0.0, "min": 0.0, "max": 30.0, "tooltip": "s"})}}

    def run(self, history, x, y, w, h, occluder_turns, delay):
        import numpy as np
        time.sleep(delay)   # leaves time for a screenshot of the panel during the run
        H, W = history.current.image.array.shape[:2]
        box = np.zeros((H, W), dtype=bool)
        box[y:y + h, x:x + w] = True
        on = {int(t) for t in occluder_turns.split(",") if t.strip()}
        n = len(history.turns) - 1
        tm = _mod("respec.eval.masks").TrajectoryMasks(
            occ=[box.copy() if t in on else np.zeros_like(box) for t in range(1, n + 1)],
            new=[np.zeros_like(box) for _ in range(n)], occluder_label="red box", turns=list(range(1, n + 1)))
        return (tm,)


NODE_CLASS_MAPPINGS = {"ReSpecCheckTinyScorer": ReSpecCheckTinyScorer, "ReSpecCheckBoxMasks": ReSpecCheckBoxMasks}
NODE_DISPLAY_NAME_MAPPINGS = {"ReSpecCheckTinyScorer": "ReSpec check: tiny scorer",
                              "ReSpecCheckBoxMasks": "ReSpec check: box masks"}
'''

PLAN_ANSWER = {
    "reasoning": {"occluder": "the red umbrella", "uncovered_region": "the cat's face and the rug behind it",
                  "target_evidence": "image 0 shows the region before the umbrella was added",
                  "add_into_region_turn": 1, "per_turn_classification": {"T1": "ADD-INTO-REGION", "T2": "UNRELATED"},
                  "notes": "canned answer of the check's fake controller"},
    "identity_anchor_id": 2,
    "restoration_source_id": 0,
    "restoration_region": "the box the red umbrella covered, left of centre",
    "image_ids": [0, 2],
    "synthesis_instruction": "Remove the red umbrella and restore the cat and rug it hid exactly as in the "
                             "first image, keeping the soft-focus look of the second image.",
}


# --------------------------------------------------------------------------- fake controller

def start_fake_controller(delay: float) -> tuple[http.server.ThreadingHTTPServer, int]:
    """An OpenAI-compatible /v1/chat/completions on 127.0.0.1 that answers PLAN_ANSWER."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            time.sleep(delay)
            body = json.dumps({"id": "check", "object": "chat.completion", "model": "fake",
                               "choices": [{"index": 0, "finish_reason": "stop", "message":
                                            {"role": "assistant", "content": json.dumps(PLAN_ANSWER)}}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


# --------------------------------------------------------------------------- the graph

def build_prompt(controller_port: int, session: str) -> dict:
    b = BOX
    return {
        "1": {"class_type": "LoadImage", "inputs": {"image": "respec_check.png"}},
        "2": {"class_type": "ReSpecHistoryStore", "inputs": {"mode": "new", "session_id": session, "turn": -1,
                                                              "new_session_id": "", "store_dir": "", "image": ["1", 0]}},
        "3": {"class_type": "EmptyImage", "inputs": {"width": b["w"], "height": b["h"], "batch_size": 1,
                                                      "color": 0xD0302A}},
        "4": {"class_type": "ImageCompositeMasked", "inputs": {"destination": ["2", 1], "source": ["3", 0],
                                                                "x": b["x"], "y": b["y"], "resize_source": False}},
        "5": {"class_type": "ReSpecHistoryAppend", "inputs": {"history": ["2", 0], "image": ["4", 0],
                                                               "instruction": "add a red umbrella in front of the cat",
                                                               "sent_instruction": "", "meta": ""}},
        "6": {"class_type": "ImageBlur", "inputs": {"image": ["5", 1], "blur_radius": 4, "sigma": 2.0}},
        "7": {"class_type": "ReSpecHistoryAppend", "inputs": {"history": ["5", 0], "image": ["6", 0],
                                                               "instruction": "give the photo a soft-focus look",
                                                               "sent_instruction": "", "meta": ""}},
        "8": {"class_type": "ReSpecOpenAIController", "inputs": {
            "base_url": f"http://127.0.0.1:{controller_port}/v1", "model": "fake-vlm", "api_key_env": "",
            "timeout": 60, "retries": 0, "max_pixels": 262144, "max_new_tokens": 768, "response_format": "none"}},
        "9": {"class_type": "ReSpecPreservationTarget", "inputs": {
            "history": ["7", 0], "instruction": "remove the umbrella", "vlm": ["8", 0],
            "restoration_mode": "restoration", "skip_non_restoration": False,
            "restoration_template": "(built-in)", "midturn_template": "(built-in)"}},
        "10": {"class_type": "ReSpecReferenceSelector", "inputs": {"history": ["7", 0], "plan": ["9", 0],
                                                                   "use_history_reference": True}},
        "11": {"class_type": "ReSpecInstructionRewriter", "inputs": {"plan": ["9", 0], "use_pti": True}},
        "12": {"class_type": "ImageFromBatch", "inputs": {"image": ["10", 0], "batch_index": 0, "length": 1}},
        "13": {"class_type": "ImageCrop", "inputs": {"image": ["12", 0], "width": b["w"], "height": b["h"],
                                                     "x": b["x"], "y": b["y"]}},
        "14": {"class_type": "ImageCompositeMasked", "inputs": {"destination": ["10", 1], "source": ["13", 0],
                                                                 "x": b["x"], "y": b["y"], "resize_source": False}},
        "15": {"class_type": "ReSpecHistoryAppend", "inputs": {"history": ["7", 0], "image": ["14", 0],
                                                                "instruction": "remove the umbrella",
                                                                "sent_instruction": ["11", 0], "plan": ["9", 0],
                                                                "meta": ""}},
        "16": {"class_type": "ReSpecCheckTinyScorer", "inputs": {}},
        "17": {"class_type": "ReSpecCheckBoxMasks", "inputs": {"history": ["15", 0], "x": b["x"], "y": b["y"],
                                                                "w": b["w"], "h": b["h"], "occluder_turns": "1,2",
                                                                "delay": 4.0}},
        "18": {"class_type": "ReSpecOccurScore", "inputs": {"scorer": ["16", 0], "masks": ["17", 0],
                                                             "psnr_cap": 50.0, "reference_turn": 0,
                                                             "history": ["15", 0]}},
    }


# --------------------------------------------------------------------------- the base directory

def make_base(base: Path, with_harness: bool) -> None:
    from PIL import Image
    from skimage import data as skdata
    (base / "custom_nodes").mkdir(parents=True)
    (base / "input").mkdir()
    # A fresh user would get the template browser over the canvas: mark the tutorial as seen.
    (base / "user" / "default").mkdir(parents=True)
    (base / "user" / "default" / "comfy.settings.json").write_text(json.dumps({"Comfy.TutorialCompleted": True}))
    os.symlink(ROOT, base / "custom_nodes" / PACK_DIR_NAME)
    if with_harness:
        (base / "custom_nodes" / "respec_check_harness.py").write_text(HARNESS)
    Image.fromarray(skdata.chelsea()).resize(PHOTO_SIZE, Image.BICUBIC).save(base / "input" / "respec_check.png")


# --------------------------------------------------------------------------- the page

APP = "window.comfyAPI.app.app"
# The panel lives in a shadow root on the sidebar's element (data-respec-panel).
PANEL_ROOT = "(document.querySelector('[data-respec-panel]')?.shadowRoot ?? document)"
PANEL_TEXT = "(document.querySelector('[data-respec-panel]')?.shadowRoot?.querySelector('.respec-panel')?.innerText ?? '')"
PANEL_CLIP = """(() => { const p = document.querySelector('[data-respec-panel]')?.shadowRoot?.querySelector('.respec-panel');
  if (!p) return null; const r0 = p.getBoundingClientRect();
  const bottom = Math.max(...[...p.children].filter(c => !c.hidden).map(c => c.getBoundingClientRect().bottom));
  return {x: 0, y: 0, width: Math.ceil(r0.right + 4), height: Math.ceil(Math.min(window.innerHeight, bottom + 12))}; })()"""


async def click_button(page: Page, scope: str, label: str) -> bool:
    """Click the first button under `scope` (CSS) whose text contains `label`."""
    root = PANEL_ROOT if scope.startswith(".respec") else "document"
    return await page.js(f"""(() => {{ const b = [...{root}.querySelectorAll({json.dumps(scope + ' button')})]
        .find(x => x.innerText.includes({json.dumps(label)})); if (!b) return false; b.click(); return true; }})()""")


async def card_turns(page: Page) -> int:
    return await page.js("(document.querySelector('[data-respec-panel]')?.shadowRoot ?? document).querySelectorAll('.respec-card').length")


async def drive(args, url: str, out: Path, prompt: dict, report: dict) -> None:
    chrome, port = start_chromium(args.chromium, Path(tempfile.mkdtemp(prefix="respec-chrome-")), CHROME_FLAGS)
    page = None
    checks = report["checks"]

    def check(name: str, ok: bool, detail: str = "") -> None:
        checks.append({"check": name, "ok": bool(ok), "detail": detail})
        log(f"  [{'ok' if ok else 'FAIL'}] {name}{(': ' + detail) if detail else ''}")

    try:
        page = await Page.open(port, viewport=VIEWPORT)
        # (a) the page with ComfyUI's default graph (no ReSpec node) and an empty session store
        page.phase = "a-load"
        await page.send("Page.navigate", {"url": url})
        await page.wait_for(f"!!({APP}?.extensionManager?.getSidebarTabs && document.querySelector('canvas'))", 120,
                            "the ComfyUI page")
        tabs = await page.wait_for(f"{APP}.extensionManager.getSidebarTabs().map(t => t.id).includes('respec-history')",
                                   30, "the ReSpec sidebar tab")
        check("sidebar tab 'respec-history' registered", tabs)
        respec_nodes = await page.js(f"({APP}.rootGraph ?? {APP}.graph)._nodes.filter(n => (n.type||'').startsWith('ReSpec')).length")
        check("default graph has no ReSpec node", respec_nodes == 0, f"{respec_nodes} ReSpec nodes")
        await asyncio.sleep(3)

        # (b) open the panel: empty store
        page.phase = "b-open-panel-empty-store"
        await page.js(f"{APP}.extensionManager.command.execute('Workspace.ToggleSidebarTab.respec-history')")
        text = await page.wait_for(f"{PANEL_TEXT}.includes('No ReSpec session yet') && {PANEL_TEXT}", 20, "empty-store message")
        check("panel opens and says there is no session yet", bool(text))
        await page.screenshot(out / "panel-empty.png", await page.js(PANEL_CLIP))
        await asyncio.sleep(1)

        # (c) a ReSpec graph in the canvas; its session does not exist yet
        page.phase = "c-graph-loaded"
        await page.js(f"{APP}.loadApiJson({json.dumps(prompt)}, 'respec-frontend-check.json')")
        text = await page.wait_for(f"{PANEL_TEXT}.includes('does not exist yet') && {PANEL_TEXT}", 20,
                                   "the 'session does not exist yet' message")
        check("panel follows the graph's History Store session (not created yet)", SESSION in text)
        await asyncio.sleep(1)

        # (d) queue from the page; screenshots during and after the run
        page.phase = "d-run"
        await page.js(f"{APP}.queuePrompt(0, 1)")
        await page.wait_for("(document.querySelector('[data-respec-panel]')?.shadowRoot ?? document).querySelectorAll('.respec-card').length >= 4 && "
                            "!!(document.querySelector('[data-respec-panel]')?.shadowRoot ?? document).querySelector('.respec-status.running')", 120, "4 turns while running")
        await page.wait_for("(document.querySelector('[data-respec-panel]')?.shadowRoot ?? document).querySelectorAll('.respec-card.restoration-source').length === 1", 20,
                            "the restoration-source highlight")
        await asyncio.sleep(0.8)   # thumbnails and the latest image load
        await page.screenshot(out / "panel-running.png", await page.js(PANEL_CLIP))
        check("during the run: 4 turns, running badge, plan highlights",
              await page.js("!!(document.querySelector('[data-respec-panel]')?.shadowRoot ?? document).querySelector('.respec-status.running')"))
        await page.wait_for(f"{PANEL_TEXT}.includes('S_restore') && !{PANEL_TEXT}.includes('No scores yet') && "
                            "!(document.querySelector('[data-respec-panel]')?.shadowRoot ?? document).querySelector('.respec-status.running')", 180, "scores after the run")
        await asyncio.sleep(1.5)   # the overlays are drawn after the masks load
        await page.screenshot(out / "frontend-panel.png", await page.js(PANEL_CLIP))
        roles = await page.js("[...(document.querySelector('[data-respec-panel]')?.shadowRoot ?? document).querySelectorAll('.respec-card')].map(c => [...c.classList].filter(x => x !== 'respec-card').join('+'))")
        check("restoration source = I0 and identity anchor = I2 highlighted",
              roles[:4] == ["restoration-source", "", "identity-anchor", ""], json.dumps(roles))
        sent = await page.js("[...(document.querySelector('[data-respec-panel]')?.shadowRoot ?? document).querySelectorAll('.respec-card .s')].map(e => e.innerText)")
        check("the rewritten (sent) instruction is shown for turn 3", any("first image" in s for s in sent), json.dumps(sent))
        legend = await page.js("[...(document.querySelector('[data-respec-panel]')?.shadowRoot ?? document).querySelectorAll('.respec-legend label')].map(l => l.innerText)")
        check("R_restore / R_preserve overlay toggles shown", len(legend) == 2, json.dumps(legend))
        pixels = await page.js("""(() => { const c = (document.querySelector('[data-respec-panel]')?.shadowRoot ?? document).querySelector('.respec-latest canvas');
            const x = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; let green = 0;
            for (let i = 0; i < x.length; i += 4) if (x[i+1] > x[i] + 40 && x[i+1] > x[i+2]) green++;
            return {w: c.width, h: c.height, greenish: green}; })()""")
        check("overlay drawn on the latest image (greenish R_restore pixels present)", pixels["greenish"] > 500,
              json.dumps(pixels))
        rows = await page.js("[...(document.querySelector('[data-respec-panel]')?.shadowRoot ?? document).querySelectorAll('.respec-scores tr')].map(r => r.innerText.replace(/\\s+/g, ' '))")
        check("OCCUR scores listed", len(rows) >= 3, json.dumps(rows))
        report["scores_rows"] = rows

        # (e) undo from the panel
        page.phase = "e-undo"
        await click_button(page, ".respec-card:nth-child(2)", "Undo")
        await page.wait_for("document.querySelector('.p-dialog')?.innerText.includes('Rewind session')", 10, "dialog")
        dialog_text = await page.js("document.querySelector('.p-dialog').innerText")
        await click_button(page, ".p-dialog", "Cancel")
        await asyncio.sleep(1)
        _, body = http_json("GET", f"{url}/respec/sessions/{SESSION}")
        check("cancelling the confirmation keeps every turn", len(body["turns"]) == 4, dialog_text.replace("\n", " ")[:200])
        await click_button(page, ".respec-card:nth-child(2)", "Undo")
        await page.wait_for("document.querySelector('.p-dialog')?.innerText.includes('Rewind session')", 10, "dialog")
        await click_button(page, ".p-dialog", "Confirm")
        await page.wait_for("(document.querySelector('[data-respec-panel]')?.shadowRoot ?? document).querySelectorAll('.respec-card').length === 2", 20, "2 turns after the rewind")
        _, body = http_json("GET", f"{url}/respec/sessions/{SESSION}")
        check("confirming rewinds the session to turn 1 (store and panel agree)", len(body["turns"]) == 2)
        await click_button(page, ".respec-card:nth-child(1)", "Undo")
        await page.wait_for("document.querySelector('.p-dialog')?.innerText.includes('Rewind session')", 10, "dialog")
        await click_button(page, ".p-dialog", "Confirm")
        text = await page.wait_for(f"{PANEL_TEXT}.includes('only its original image') && {PANEL_TEXT}", 20,
                                   "the no-edits message")
        check("a session with no edits shows its message", bool(text))
        await asyncio.sleep(2)
        page.phase = "end"
    except Exception:
        if page is not None:   # leave evidence of where it stopped
            report["panel_text_at_failure"] = await page.js(PANEL_TEXT)
            await page.screenshot(out / "failure.png")
        raise
    finally:
        if page is not None:
            report["messages"] += page.messages
            await page.close()
        stop(chrome)


async def baseline(args, url: str, report: dict) -> None:
    chrome, port = start_chromium(args.chromium, Path(tempfile.mkdtemp(prefix="respec-chrome-")), CHROME_FLAGS)
    page = None
    try:
        page = await Page.open(port, viewport=VIEWPORT)
        page.phase = "baseline-load"
        await page.send("Page.navigate", {"url": url})
        await page.wait_for(f"!!({APP}?.extensionManager?.getSidebarTabs && document.querySelector('canvas'))", 120, "page")
        await asyncio.sleep(4)
    finally:
        if page is not None:
            report["baseline"] += page.messages
            await page.close()
        stop(chrome)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--comfyui", required=True, help="ComfyUI source checkout")
    ap.add_argument("--python", default=sys.executable, help="the Python that runs ComfyUI")
    ap.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    ap.add_argument("--out", default=None, help="folder for screenshots and report (default: a temp folder)")
    ap.add_argument("--docs", action="store_true", help="also copy frontend-panel.png and panel-running.png to docs/")
    ap.add_argument("--baseline", action="store_true", help="also load the page with all custom nodes disabled")
    ap.add_argument("--keep", action="store_true", help="keep the temporary base directory")
    args = ap.parse_args(argv)
    try:
        require_check_packages()
    except HarnessError as e:
        raise SystemExit(str(e))

    out = Path(args.out or tempfile.mkdtemp(prefix="respec-frontend-check-")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix="respec-frontend-base-"))
    report = {"checks": [], "messages": [], "baseline": []}
    controller, cport = start_fake_controller(delay=2.0)
    proc = None
    try:
        make_base(base, with_harness=True)
        port = free_port()
        proc = start_comfyui(Path(args.comfyui), args.python, base, port, env=COMFY_ENV)
        url = f"http://127.0.0.1:{port}"
        comfy_log = (base / "comfyui.log").read_text()
        report["pack_import_failed"] = "IMPORT FAILED" in comfy_log and PACK_DIR_NAME in comfy_log
        log(f"ComfyUI up at {url}; pack import failed: {report['pack_import_failed']}")
        asyncio.run(drive(args, url, out, build_prompt(cport, SESSION), report))
        if args.baseline:
            stop(proc)
            proc = start_comfyui(Path(args.comfyui), args.python, base, port, ["--disable-all-custom-nodes"],
                                 env=COMFY_ENV, log_name="comfyui-baseline.log")
            asyncio.run(baseline(args, url, report))
    except Exception as e:   # report what happened so far, then fail
        report["checks"].append({"check": "the run completed", "ok": False, "detail": repr(e)})
        log(f"FAILED: {e!r}")
    finally:
        stop(proc)
        controller.shutdown()
        shutil.copy(base / "comfyui.log", out / "comfyui.log") if (base / "comfyui.log").exists() else None
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)

    log("\nBrowser console, per phase (kind | text | source):")
    for m in report["messages"]:
        log(f"  [{m['phase']}] {m['kind']} | {m['text'][:300]} | {m['url']}")
    if not report["messages"]:
        log("  (nothing)")
    base_texts = {(m["text"], m["url"]) for m in report["baseline"] if is_error(m)}
    if args.baseline:
        log("\nBaseline (all custom nodes disabled), error-level messages:")
        for text, url in sorted(base_texts) or [("(none)", "")]:
            log(f"  {text[:300]} | {url}")
    own_errors = [m for m in report["messages"] if is_error(m) and (m["text"], m["url"]) not in base_texts]
    report["own_errors"] = own_errors
    (out / "report.json").write_text(json.dumps(report, indent=1))
    failed = [c for c in report["checks"] if not c["ok"]]
    log(f"\n{len(report['checks']) - len(failed)}/{len(report['checks'])} checks passed; "
        f"{len(own_errors)} error-level console message(s) not in the baseline; output in {out}")
    if args.docs and (out / "frontend-panel.png").exists():
        for name in ("frontend-panel.png", "panel-running.png"):
            target = ROOT / "docs" / ("frontend-panel-running.png" if name == "panel-running.png" else name)
            from PIL import Image   # 256 colours: a third of the size, still readable
            Image.open(out / name).convert("RGB").quantize(256).save(target, optimize=True)
            log(f"copied {name} -> {target}")
    return 0 if not failed and not own_errors else 1


if __name__ == "__main__":
    sys.exit(main())
