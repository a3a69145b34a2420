"""What the developer scripts that drive a real ComfyUI share (check_in_comfyui.py, check_frontend.py):
a free port, a JSON HTTP helper, an image upload, starting / stopping ComfyUI on a temporary base directory, a
headless Chromium and one page of it over the DevTools protocol.

Not part of the pack. The scripts run as `python scripts/comfyui/<name>.py`, so their folder is on
sys.path and `from comfyui_harness import ...` finds this file.
"""
from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

# The offline switches every ComfyUI started here gets (callers add their own on top).
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "YOLO_OFFLINE": "1"}

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run",
                  "--no-default-browser-check", "--disable-extensions")


class HarnessError(RuntimeError):
    """ComfyUI or Chromium did not come up."""


ROOT = Path(__file__).resolve().parents[2]   # the pack's folder


def log(msg: str) -> None:
    print(msg, flush=True)


# The third-party modules the check scripts import, by the package that provides them
# (requirements-check.txt lists them; tests/test_check_scripts.py keeps the two in step).
CHECK_MODULES = {"websockets": "websockets", "numpy": "numpy", "PIL": "pillow", "skimage": "scikit-image",
                 "aiohttp": "aiohttp"}


def require_check_packages(modules=tuple(CHECK_MODULES)) -> None:
    """Stop with one message naming what to install when a module the checks need is missing
    from the Python running them (they would otherwise fail midway with ModuleNotFoundError)."""
    import importlib.util
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        packages = ", ".join(CHECK_MODULES.get(m, m) for m in missing)
        raise HarnessError(f"this Python ({os.path.basename(sys.executable)}) lacks {packages}, which the "
                           f"checks need: install them with `python -m pip install -r requirements-check.txt` "
                           f"(from the pack's folder) into the Python you run the check with")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_json(method: str, url: str, body=None, timeout: float = 60):
    """(status, parsed JSON body, or its text when it is not JSON; None when empty).
    An HTTP error status is returned like any other, with its body."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"} if data else {})
    return _send(req, timeout)


def _send(req: urllib.request.Request, timeout: float):
    """(status, parsed body) of one request; HTTP error statuses are answers, not exceptions."""
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw, status = r.read(), r.status
    except urllib.error.HTTPError as e:
        raw, status = e.read(), e.code
    try:
        return status, json.loads(raw or b"null")
    except ValueError:
        return status, raw.decode(errors="replace")


def upload_image(base_url: str, filename: str, data: bytes, timeout: float = 60):
    """POST an image file to ComfyUI's /upload/image (multipart form, as the Load Image node's
    upload button sends it; overwrite on). (status, parsed JSON body) like http_json; the body
    names the file as ComfyUI stored it ({"name", "subfolder", "type"})."""
    boundary = f"----respec{os.urandom(12).hex()}"
    parts = [(f'--{boundary}\r\nContent-Disposition: form-data; name="image"; filename="{filename}"\r\n'
              f"Content-Type: image/png\r\n\r\n").encode() + data + b"\r\n"]
    for name, value in (("type", "input"), ("overwrite", "true")):
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode())
    body = b"".join(parts) + f"--{boundary}--\r\n".encode()
    req = urllib.request.Request(f"{base_url}/upload/image", data=body, method="POST",
                                 headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    return _send(req, timeout)


# --------------------------------------------------------------------------- processes

def stop(proc, sig: int = signal.SIGTERM, timeout: float = 20) -> None:
    """Stop a process started in its own session (and its children): `sig`, then SIGKILL."""
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, sig)
        proc.wait(timeout=timeout)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        except ProcessLookupError:
            pass


def start_comfyui(comfy: Path, python: str, base: Path, port: int, extra=(), env: dict | None = None,
                  log_name: str = "comfyui.log", timeout: float = 180) -> subprocess.Popen:
    """Start ComfyUI from the checkout `comfy` with `python` on CPU, API nodes off, listening on
    127.0.0.1:`port`, with `base` as its --base-directory and an in-memory database; its output goes
    to base/`log_name`. Returns once /object_info answers; raises HarnessError when ComfyUI exits
    or does not answer within `timeout` s (then it is stopped)."""
    cmd = [python, "main.py", "--cpu", "--disable-api-nodes", "--listen", "127.0.0.1", "--port", str(port),
           "--base-directory", str(base), "--database-url", "sqlite:///:memory:", *extra]
    log("starting ComfyUI: " + " ".join(cmd) + f"   (cwd {comfy})")
    log_path = Path(base) / log_name
    with open(log_path, "w") as logf:   # the child keeps its own copy of the descriptor
        proc = subprocess.Popen(cmd, cwd=str(comfy), stdout=logf, stderr=subprocess.STDOUT,
                                env=dict(os.environ, **OFFLINE_ENV, **(env or {})), start_new_session=True)
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise HarnessError(f"ComfyUI exited with {proc.returncode}; log ({log_path}):\n"
                               + log_path.read_text(errors="replace")[-4000:])
        try:
            status, _ = http_json("GET", f"http://127.0.0.1:{port}/object_info/LoadImage", timeout=5)
            if status == 200:
                return proc
        except OSError:
            pass
        if time.monotonic() > deadline:
            stop(proc)
            raise HarnessError(f"ComfyUI did not answer within {timeout:g} s; see {log_path}")
        time.sleep(0.5)


def start_chromium(chromium: str, profile: Path, extra=()) -> tuple[subprocess.Popen, int]:
    """Headless Chromium on the fresh profile folder `profile`, background networking off, a
    1440x1000 window on about:blank; returns (process, DevTools port)."""
    cmd = [chromium, *CHROMIUM_FLAGS, *extra, f"--user-data-dir={profile}", "--remote-debugging-port=0",
           "--window-size=1440,1000", "about:blank"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    port_file = Path(profile) / "DevToolsActivePort"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if port_file.exists() and len(port_file.read_text().splitlines()) >= 2:
            return proc, int(port_file.read_text().splitlines()[0])
        time.sleep(0.2)
    stop(proc)
    raise HarnessError("Chromium did not open its DevTools port")


# --------------------------------------------------------------------------- DevTools protocol

def is_error(m: dict) -> bool:
    """Whether a Page message is error-level (console.error / console.assert, an uncaught
    exception, a browser log error such as a failed resource load)."""
    return m["kind"] in ("console.error", "exception", "log.error") or m["kind"].endswith(".assert")


class Page:
    """One page target over the DevTools protocol; collects console output as it comes.

    `messages`: every console message, uncaught exception and browser log entry, as dicts
    (phase, kind, text, url; `phase` is whatever the caller last set). `console`: the error-level
    ones as one-line strings; a caller may clear it between steps."""

    def __init__(self, ws, timeout: float = 60):
        self.ws = ws
        self.timeout = timeout
        self.next_id = 0
        self.pending: dict[int, asyncio.Future] = {}
        self.messages: list[dict] = []
        self.console: list[str] = []
        self.phase = "start"
        self.reader = asyncio.ensure_future(self._read())

    @classmethod
    async def open(cls, port: int, timeout: float = 60, max_size: int = 64 * 2 ** 20,
                   viewport: tuple[int, int] | None = None) -> "Page":
        """Connect to the first page of the Chromium whose DevTools port is `port` and enable the
        Runtime, Log and Page domains; `viewport` (width, height) overrides the page's size."""
        import websockets
        _, targets = http_json("GET", f"http://127.0.0.1:{port}/json/list", timeout=10)
        target = next(t for t in targets if t["type"] == "page")
        ws = await websockets.connect(target["webSocketDebuggerUrl"], max_size=max_size)
        self = cls(ws, timeout)
        for domain in ("Runtime", "Log", "Page"):
            await self.send(f"{domain}.enable")
        if viewport:
            await self.send("Emulation.setDeviceMetricsOverride", {"width": viewport[0], "height": viewport[1],
                                                                   "deviceScaleFactor": 1, "mobile": False})
        return self

    async def _read(self):
        async for raw in self.ws:
            msg = json.loads(raw)
            if "id" in msg:
                fut = self.pending.pop(msg["id"], None)
                if fut and not fut.done():
                    fut.set_result(msg)
                continue
            method, p = msg.get("method"), msg.get("params", {})
            if method == "Runtime.consoleAPICalled":
                text = " ".join(str(a.get("value", a.get("description", a.get("type")))) for a in p.get("args", []))
                frame = (p.get("stackTrace") or {}).get("callFrames") or [{}]
                self._note("console." + p.get("type", "log"), text, frame[0].get("url", ""))
            elif method == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                text = (d.get("exception") or {}).get("description") or d.get("text", "")
                self._note("exception", text, d.get("url", ""))
            elif method == "Log.entryAdded":
                e = p.get("entry", {})
                self._note("log." + e.get("level", "info"), e.get("text", ""), e.get("url", ""))

    def _note(self, kind: str, text: str, url: str) -> None:
        m = {"phase": self.phase, "kind": kind, "text": text[:2000], "url": url}
        self.messages.append(m)
        if is_error(m):
            line = (f"exception: {text}" if kind == "exception" else
                    f"log: {text} {url}" if kind.startswith("log.") else text)
            self.console.append(line[:500])

    async def send(self, method: str, params: dict | None = None, timeout: float | None = None) -> dict:
        self.next_id += 1
        fut = asyncio.get_running_loop().create_future()
        self.pending[self.next_id] = fut
        await self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params or {}}))
        msg = await asyncio.wait_for(fut, timeout or self.timeout)
        if "error" in msg:
            raise RuntimeError(f"{method}: {msg['error']}")
        return msg.get("result", {})

    async def js(self, expression: str, timeout: float | None = None):
        """Evaluate `expression` in the page (promises awaited); its value, or RuntimeError."""
        res = await self.send("Runtime.evaluate", {"expression": expression, "awaitPromise": True,
                                                   "returnByValue": True}, timeout)
        if "exceptionDetails" in res:
            raise RuntimeError(f"page script failed: {res['exceptionDetails'].get('exception', {}).get('description')}")
        return res.get("result", {}).get("value")

    async def wait_for(self, expression: str, timeout: float = 60, what: str = "") -> object:
        """Poll `expression` until it is truthy; its value, or TimeoutError."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                value = await self.js(expression)
            except RuntimeError:
                value = None
            if value:
                return value
            await asyncio.sleep(0.25)
        raise TimeoutError(f"timed out waiting for {what or expression}")

    async def screenshot(self, path: Path, clip: dict | None = None) -> None:
        params = {"format": "png"}
        if clip:
            params["clip"] = dict(clip, scale=1)
        res = await self.send("Page.captureScreenshot", params)
        Path(path).write_bytes(base64.b64decode(res["data"]))

    async def close(self):
        self.reader.cancel()
        await self.ws.close()

@contextlib.asynccontextmanager
async def browser_page(chromium: str, check, label: str, shots: Path | None = None, failure_shot: str = "failure.png",
                       viewport: tuple[int, int] | None = None, max_size: int = 64 * 2 ** 20):
    """A page of a fresh headless Chromium for one check: an exception inside the block becomes one
    FAIL line (`label`) and, with `shots`, a screenshot shots/`failure_shot`; Chromium and its
    profile go away after."""
    profile = Path(tempfile.mkdtemp(prefix="respec-chrome-"))
    proc, port = start_chromium(chromium, profile)
    page = None
    try:
        page = await Page.open(port, timeout=120, viewport=viewport, max_size=max_size)
        yield page
    except Exception as e:  # leave evidence
        check(label, False, f"{type(e).__name__}: {e}")
        if page is not None and shots is not None:
            shots.mkdir(parents=True, exist_ok=True)
            await page.screenshot(shots / failure_shot)
    finally:
        if page is not None:
            await page.close()
        stop(proc, timeout=10)
        shutil.rmtree(profile, ignore_errors=True)


def build_tiny_models(python: str, base: Path) -> dict:
    """Tiny random-weight Qwen3-VL and FLUX.2 [klein] folders under base/models (with ComfyUI's python)."""
    code = (
        "import importlib.util, json, sys\n"
        f"root = {str(ROOT)!r}\n"
        "spec = importlib.util.spec_from_file_location('respec_pack_tiny', root + '/__init__.py',"
        " submodule_search_locations=[root])\n"
        "m = importlib.util.module_from_spec(spec); sys.modules['respec_pack_tiny'] = m\n"
        "spec.loader.exec_module(m)\n"
        "from respec_pack_tiny.respec.tiny.vlm import build_tiny_qwen3vl\n"
        "from respec_pack_tiny.respec.tiny.klein import save_tiny_klein_diffusers\n"
        f"vlm = build_tiny_qwen3vl({str(base / 'models' / 'LLM' / 'tiny-qwen3vl')!r})\n"
        f"klein = save_tiny_klein_diffusers({str(base / 'models' / 'diffusers' / 'tiny-klein')!r})\n"
        "print(json.dumps({'vlm': str(vlm), 'klein': str(klein)}))\n")
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, cwd=str(base), timeout=900)
    if out.returncode != 0:
        raise SystemExit(f"could not build the tiny models:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])



def checker(prefix: str, problems: list[str]):
    """check(label, ok, detail): logs one PASS/FAIL line under `prefix`; a failure joins `problems`."""
    def check(label: str, ok: bool, detail: str) -> None:
        log(f"{'PASS' if ok else 'FAIL'}  {prefix}: {label}: {detail}")
        if not ok:
            problems.append(f"{label}: {detail}")
    return check



def upload_picture(url: str) -> tuple[str | None, str]:
    """The artist's picture, sent the way Load Image's upload button sends it: (its name for
    Load Image, '') or (None, why not)."""
    from io import BytesIO

    import numpy as np
    from PIL import Image
    yy, xx = np.mgrid[0:64, 0:96]
    pixels = np.stack([xx * 255 // 95, yy * 255 // 63, np.full_like(xx, 128)], -1).astype(np.uint8)
    buf = BytesIO()
    Image.fromarray(pixels, "RGB").save(buf, format="PNG")
    status, uploaded = upload_image(url, "respec-check-conv.png", buf.getvalue())
    if status != 200 or not isinstance(uploaded, dict) or not uploaded.get("name"):
        return None, f"/upload/image answered {status}: {str(uploaded)[:300]}"
    return "/".join(p for p in (uploaded.get("subfolder"), uploaded["name"]) if p), ""
