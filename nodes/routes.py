"""The frontend panel's HTTP API under /respec/: a thin aiohttp adapter over respec/web.py.

All validation and request handling lives in the core (respec/web.py); this module only reads
the raw request values, runs the handler off the event loop (SQLite and PNG work block) and turns
its Response into an aiohttp one. Routes go onto ComfyUI's route table through
respec.comfy.routes(); outside ComfyUI, register() does nothing.

    GET  /respec/sessions                                  list sessions (each with its store)
    GET  /respec/sessions/{session_id}                     a session's turns, latest plan, scores
    GET  /respec/sessions/{session_id}/turns/{turn}/image  turn image, PNG, ?w=&h= (<= 512)
    GET  /respec/sessions/{session_id}/images/{digest}     session image by digest, PNG, ?w=&h=
    POST /respec/sessions/{session_id}/rewind              {"turn": k}: keep turns 0..k
    POST /respec/sessions/{session_id}/branch              {"turn": k}: a new session of turns 0..k
    POST /respec/sessions/gc                               {} or {"dry_run": true}: delete unused image files
    GET  /respec/masks/{digest}                            a region mask published with the scores
    GET  /respec/scores/latest                             the latest respec.scores payload
    GET  /respec/models                                    the pack's loaded models
    POST /respec/models/unload                             unload them and drop the pack's caches

The pack also watches ComfyUI's own POST /free: unloading models there releases the pack's too.

Session routes take an optional ?store=<dir> naming one of the stores /respec/sessions lists
(the default store, or one a History node of this server announced); absent = the default.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

from ..respec import comfy, web

log = logging.getLogger("respec")

_registered: set[int] = set()


def _open_store(root: str | None = None):
    from ..respec.store import open_store
    return open_store(root)


def _reply(resp: web.Response):
    from aiohttp import web as aioweb
    charset = "utf-8" if resp.content_type == "application/json" else None
    return aioweb.Response(status=resp.status, body=resp.body, content_type=resp.content_type,
                           charset=charset, headers=resp.headers)


async def _run(fn: Callable[..., web.Response], *args: Any):
    return _reply(await asyncio.to_thread(fn, *args))


def add_routes(table, open_store: Callable[[str | None], Any] = _open_store) -> None:
    """Add the /respec/ routes to an aiohttp RouteTableDef (ComfyUI's, or a test's).
    `open_store(root or None)` gives the SessionStore of a directory (None: the default one)."""

    def on_store(request, handler, *args):
        # ?store= names a store directory listed by /respec/sessions; absent = the default store.
        return _run(web.with_store, open_store, request.query.get("store"), handler, *args)

    @table.get("/respec/sessions")
    async def sessions(request):
        return await _run(web.list_sessions, open_store, request.query.get("store"))

    @table.get("/respec/sessions/{session_id}")
    async def session(request):
        return await on_store(request, web.get_session, request.match_info["session_id"])

    @table.get("/respec/sessions/{session_id}/turns/{turn}/image")
    async def turn_image(request):
        return await on_store(request, web.turn_image, request.match_info["session_id"],
                              request.match_info["turn"], request.query.get("w"), request.query.get("h"))

    @table.get("/respec/sessions/{session_id}/images/{digest}")
    async def session_image(request):
        return await on_store(request, web.session_image, request.match_info["session_id"],
                              request.match_info["digest"], request.query.get("w"), request.query.get("h"))

    @table.post("/respec/sessions/{session_id}/rewind")
    async def rewind(request):
        # JSON only: a cross-site form post cannot send it without a CORS preflight.
        if request.content_type != "application/json":
            return _reply(web.error_response(415, "send the body as application/json, e.g. {\"turn\": 2}"))
        body = await request.content.read(web.MAX_BODY + 1)
        return await on_store(request, web.rewind, request.match_info["session_id"], body)

    @table.post("/respec/sessions/{session_id}/branch")
    async def branch(request):
        if request.content_type != "application/json":
            return _reply(web.error_response(415, "send the body as application/json, e.g. {\"turn\": 2}"))
        body = await request.content.read(web.MAX_BODY + 1)
        return await on_store(request, web.branch, request.match_info["session_id"], body)

    @table.post("/respec/sessions/gc")
    async def collect_garbage(request):
        if request.content_type != "application/json":
            return _reply(web.error_response(415, "send the body as application/json, e.g. {} or {\"dry_run\": true}"))
        body = await request.content.read(web.MAX_BODY + 1)
        return await on_store(request, web.collect_garbage, body)

    @table.get("/respec/masks/{digest}")
    async def mask(request):
        return await _run(web.mask_image, request.match_info["digest"])

    @table.get("/respec/scores/latest")
    async def scores(request):
        return await _run(web.get_latest_scores)

    @table.get("/respec/models")
    async def loaded_models(request):
        return await _run(web.models_status)

    @table.post("/respec/models/unload")
    async def unload_models(request):
        if request.content_type != "application/json":
            return _reply(web.error_response(415, "send the request as application/json (an empty {} will do)"))
        return await _run(web.unload_models)


def listen_to_free(app) -> bool:
    """Release the pack's models whenever ComfyUI's POST /free asks to unload models or free memory.

    ComfyUI's /free only sets flags for its prompt worker, which then unloads the models it manages
    and clears its node cache; the pack's own cache must let go too, or the weights stay referenced.
    The worker does the unloading: this handler only drops the pack's references
    (respec.comfy.release_models). An aiohttp middleware watches the request (added before the
    server starts; False if too late).
    """
    from aiohttp import web as aioweb

    @aioweb.middleware
    async def respec_free_listener(request, handler):
        response = await handler(request)
        if request.method == "POST" and request.path in ("/free", "/api/free") and response.status == 200:
            try:
                body = await request.json()
            except Exception:
                body = {}
            if isinstance(body, dict) and (body.get("unload_models") or body.get("free_memory")):
                try:
                    await asyncio.to_thread(comfy.release_models)
                except Exception:   # ComfyUI's own /free must answer whatever happens to ours
                    log.exception("ReSpec: releasing the pack's models on /free failed")
        return response

    try:
        app.middlewares.append(respec_free_listener)
        return True
    except RuntimeError:  # the app is already frozen (server started)
        log.warning("ReSpec: could not watch /free; use the 'Unload ReSpec models' node to free the pack's models")
        return False


def register() -> None:
    """Add the pack's routes to ComfyUI's server when one is running (no-op otherwise), and
    listen to the pack's events (stores in use, latest scores). Idempotent."""
    table = comfy.routes()
    if table is None or id(table) in _registered:
        return
    _registered.add(id(table))
    add_routes(table)
    comfy.add_listener(web.remember_event)
    app = comfy.server_app()
    if app is not None:
        listen_to_free(app)
