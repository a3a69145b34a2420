"""A small local HTTP server that speaks the part of ComfyUI's protocol the remote runner uses.

It stands in for an external service (a ComfyUI server somewhere on the network), so the
tests can check queueing, progress, history, validation errors and failures without a real
ComfyUI. It follows ComfyUI 0.8's server.py / execution.py / main.py:

- GET /object_info, GET /object_info/{class}  ({} for an unknown class)
- POST /prompt  -> {"prompt_id", "number", "node_errors"}; an unknown node type is refused with
  HTTP 400 {"error": {"type": "invalid_prompt", "message": "Cannot execute because node X does
  not exist.", ...}, "node_errors": {}}, a missing required input with 400 and per-node errors.
- GET /ws?clientId=X  -> {"type": "status"} on connect, then per prompt: execution_start,
  execution_cached, executing (each node), progress, executed (output nodes),
  execution_success | execution_error, and finally executing {"node": null}.
  As in ComfyUI, the history entry is stored after execution_success and before the final
  executing message.
- GET /history/{prompt_id}  -> {} until done, then {prompt_id: {"prompt", "outputs", "status"}}
- POST /interrupt, POST /queue {"delete": [...]} (recorded)
- POST /upload/image (multipart: image, subfolder, type, overwrite) -> {"name", "subfolder", "type"};
  GET /view?filename=&subfolder=&type= serves what was uploaded or what `execute` stored in
  `srv.files[(type, subfolder, filename)]`
- `routes(table)` adds more routes (e.g. the pack's own /respec/ routes) to an aiohttp RouteTableDef

Prompts are executed one at a time by a worker task (like ComfyUI's queue). What a prompt
"produces" comes from `execute(prompt) -> {node_id: ui_output}` given by the test.
Failure modes: `fail_after` (after that many accepted prompts the server drops every websocket
mid-run and answers 500 from then on), `reject_500` (POST /prompt always answers 500),
`execution_error_for(prompt) -> "ClassType:message" | None` (that node raises), and
`silent_ws` (the websocket stays open but says nothing: only /history tells the result), `hang`
(prompts are accepted but never run: a hung server that still answers HTTP).
"""
from __future__ import annotations

import asyncio
import socket
import threading
import time
import uuid
from typing import Callable

from aiohttp import WSMsgType, web


_GIVEN: set[int] = set()     # the ports free_port has handed out in this process


def free_port() -> int:
    """A TCP port with nothing listening on it (right now), never one it handed out before: a
    FakeComfyUI binds its port only when it starts, so a second one made before that (a server
    that comes up late) could otherwise be given the same port."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _GIVEN:
            _GIVEN.add(port)
            return port


class FakeComfyUI:
    """Run with `with FakeComfyUI(...) as srv:`; `srv.url` is its base URL."""

    def __init__(self, node_info: dict[str, dict], execute: Callable[[dict], dict], *,
                 output_nodes: set[str] = frozenset(), fail_after: int | None = None,
                 reject_500: bool = False, step_delay: float = 0.0,
                 execution_error_for: Callable[[dict], str | None] | None = None,
                 silent_ws: bool = False, hang: bool = False,
                 routes: Callable[[web.RouteTableDef], None] | None = None):
        self.node_info = node_info
        self.execute = execute
        self.output_nodes = set(output_nodes)
        self.fail_after = fail_after
        self.reject_500 = reject_500
        self.step_delay = step_delay
        self.execution_error_for = execution_error_for
        self.silent_ws = silent_ws             # accept websockets but never send on them
        self.routes = routes
        self.files: dict[tuple[str, str, str], bytes] = {}   # (type, subfolder, filename) -> bytes
        self.hang = hang                       # accept prompts but never run them
        self.accepted: list[str] = []          # prompt ids accepted, in order
        self.completed: list[str] = []         # prompt ids that finished successfully
        self.prompts: dict[str, dict] = {}
        self.history: dict[str, dict] = {}
        self.sockets: dict[str, web.WebSocketResponse] = {}
        self.broken = False
        self.interrupted: list[str | None] = []   # POST /interrupt prompt ids
        self.deleted: list[str] = []              # POST /queue {"delete": [...]}
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None

    # ------------------------------------------------------------------ handlers
    async def _object_info(self, request):
        return web.json_response(self.node_info)

    async def _object_info_one(self, request):
        name = request.match_info["node_class"]
        return web.json_response({name: self.node_info[name]} if name in self.node_info else {})

    async def _post_prompt(self, request):
        if self.reject_500 or self.broken:
            return web.Response(status=500, text="500 Internal Server Error")
        body = await request.json()
        prompt = body.get("prompt")
        if not isinstance(prompt, dict):
            return web.json_response({"error": {"type": "no_prompt", "message": "No prompt provided",
                                                "details": "No prompt provided", "extra_info": {}},
                                      "node_errors": {}}, status=400)
        for node_id, node in prompt.items():
            if node.get("class_type") not in self.node_info:
                return web.json_response({"error": {
                    "type": "invalid_prompt",
                    "message": f"Cannot execute because node {node.get('class_type')} does not exist.",
                    "details": f"Node ID '#{node_id}'", "extra_info": {}}, "node_errors": {}}, status=400)
        node_errors = {}
        for node_id, node in prompt.items():
            required = self.node_info[node["class_type"]].get("input", {}).get("required", {})
            missing = [k for k in required if k not in node.get("inputs", {})]
            if missing:
                node_errors[node_id] = {"errors": [{
                    "type": "required_input_missing", "message": "Required input is missing",
                    "details": name, "extra_info": {"input_name": name}} for name in missing],
                    "dependent_outputs": [], "class_type": node["class_type"]}
        if node_errors:
            return web.json_response({"error": {
                "type": "prompt_outputs_failed_validation", "message": "Prompt outputs failed validation",
                "details": "", "extra_info": {}}, "node_errors": node_errors}, status=400)
        prompt_id = str(body.get("prompt_id") or uuid.uuid4())
        self.prompts[prompt_id] = prompt
        self.accepted.append(prompt_id)
        number = len(self.accepted)
        await self._queue.put((prompt_id, prompt, body.get("client_id")))
        return web.json_response({"prompt_id": prompt_id, "number": number, "node_errors": {}})

    async def _get_history(self, request):
        if self.broken:
            return web.Response(status=500, text="500 Internal Server Error")
        pid = request.match_info["prompt_id"]
        return web.json_response({pid: self.history[pid]} if pid in self.history else {})

    async def _interrupt(self, request):
        body = await request.json() if request.can_read_body else {}
        self.interrupted.append(body.get("prompt_id"))
        return web.Response(status=200)

    async def _post_queue(self, request):
        body = await request.json()
        self.deleted.extend(body.get("delete") or [])
        return web.Response(status=200)

    async def _upload_image(self, request):
        form = await request.post()
        image = form.get("image")
        if image is None or not getattr(image, "filename", None):
            return web.Response(status=400)
        kind, sub = str(form.get("type") or "input"), str(form.get("subfolder") or "")
        self.files[(kind, sub, image.filename)] = image.file.read()
        return web.json_response({"name": image.filename, "subfolder": sub, "type": kind})

    async def _view(self, request):
        q = request.query
        key = (q.get("type", "output"), q.get("subfolder", ""), q.get("filename", ""))
        if key not in self.files:
            return web.Response(status=404)
        return web.Response(body=self.files[key], content_type="image/png")

    async def _ws(self, request):
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        sid = request.rel_url.query.get("clientId") or uuid.uuid4().hex
        self.sockets[sid] = ws
        if not self.silent_ws:
            await ws.send_json({"type": "status", "data": {
                "status": {"exec_info": {"queue_remaining": self._queue.qsize()}}, "sid": sid}})
        try:
            async for msg in ws:
                if msg.type == WSMsgType.ERROR:
                    break
        finally:
            if self.sockets.get(sid) is ws:
                del self.sockets[sid]
        return ws

    async def _send(self, sid, kind, data):
        if self.silent_ws:
            return
        ws = self.sockets.get(sid)
        if ws is not None and not ws.closed:
            try:
                await ws.send_json({"type": kind, "data": data})
            except ConnectionError:
                pass

    # ------------------------------------------------------------------ the queue worker
    async def _worker(self):
        while True:
            prompt_id, prompt, sid = await self._queue.get()
            if self.hang:
                continue
            if self.fail_after is not None and len(self.accepted) > self.fail_after:
                # Crash mid-run: the websockets drop and every later request answers 500.
                self.broken = True
                await self._send(sid, "execution_start", {"prompt_id": prompt_id, "timestamp": _ms()})
                for ws in list(self.sockets.values()):
                    await ws.close()
                continue
            await self._send(sid, "execution_start", {"prompt_id": prompt_id, "timestamp": _ms()})
            await self._send(sid, "execution_cached", {"nodes": [], "prompt_id": prompt_id, "timestamp": _ms()})
            messages = [["execution_start", {"prompt_id": prompt_id}]]
            error = self.execution_error_for(prompt) if self.execution_error_for else None
            outputs = {}
            executed = []
            for node_id, node in prompt.items():
                await self._send(sid, "executing", {"node": node_id, "display_node": node_id, "prompt_id": prompt_id})
                if error and node["class_type"] == error.split(":", 1)[0]:
                    data = {"prompt_id": prompt_id, "node_id": node_id, "node_type": node["class_type"],
                            "executed": executed, "exception_message": error.split(":", 1)[1],
                            "exception_type": "RuntimeError", "traceback": [], "current_inputs": {},
                            "current_outputs": []}
                    await self._send(sid, "execution_error", data)
                    messages.append(["execution_error", data])
                    break
                await self._send(sid, "progress", {"value": 1, "max": 1, "prompt_id": prompt_id, "node": node_id})
                if self.step_delay:
                    await asyncio.sleep(self.step_delay)
                executed.append(node_id)
            else:
                outputs = self.execute(prompt)
                for node_id, ui in outputs.items():
                    await self._send(sid, "executed", {"node": node_id, "display_node": node_id,
                                                       "output": ui, "prompt_id": prompt_id})
                await self._send(sid, "execution_success", {"prompt_id": prompt_id, "timestamp": _ms()})
                messages.append(["execution_success", {"prompt_id": prompt_id}])
                self.completed.append(prompt_id)
            ok = error is None
            self.history[prompt_id] = {"prompt": [len(self.history), prompt_id, prompt, {}, []],
                                       "outputs": outputs,
                                       "status": {"status_str": "success" if ok else "error",
                                                  "completed": ok, "messages": messages},
                                       "meta": {}}
            await self._send(sid, "executing", {"node": None, "prompt_id": prompt_id})

    # ------------------------------------------------------------------ lifecycle
    def _run(self):
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)

        async def main():
            self._queue = asyncio.Queue()
            self._stop = asyncio.Event()
            app = web.Application()
            app.router.add_get("/object_info", self._object_info)
            app.router.add_get("/object_info/{node_class}", self._object_info_one)
            app.router.add_post("/prompt", self._post_prompt)
            app.router.add_get("/history/{prompt_id}", self._get_history)
            app.router.add_post("/interrupt", self._interrupt)
            app.router.add_post("/queue", self._post_queue)
            app.router.add_get("/ws", self._ws)
            app.router.add_post("/upload/image", self._upload_image)
            app.router.add_get("/view", self._view)
            if self.routes is not None:
                table = web.RouteTableDef()
                self.routes(table)
                app.add_routes(table)
            runner = web.AppRunner(app, handle_signals=False)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", self.port)
            await site.start()
            worker = asyncio.create_task(self._worker())
            self._ready.set()
            await self._stop.wait()
            worker.cancel()
            for ws in list(self.sockets.values()):
                await ws.close()
            await runner.cleanup()

        loop.run_until_complete(main())
        loop.close()

    def __enter__(self) -> "FakeComfyUI":
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("fake ComfyUI server did not start")
        return self

    def __exit__(self, *exc):
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)


def _ms() -> int:
    return int(time.time() * 1000)
