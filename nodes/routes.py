"""The frontend panel's HTTP API under /respec/: a thin aiohttp adapter over respec/web.py.

All validation and request handling lives in the core (respec/web.py); this module only reads
the raw request values, runs the handler off the event loop (SQLite and PNG work block) and turns
its Response into an aiohttp one. Routes go onto ComfyUI's route table through
respec.comfy.routes(); outside ComfyUI, register() does nothing.

    GET  /respec/sessions                                  list sessions
    GET  /respec/sessions/{session_id}                     a session's turns, latest plan, scores
    GET  /respec/sessions/{session_id}/turns/{turn}/image  turn image, PNG, ?w=&h= (<= 512)
    GET  /respec/sessions/{session_id}/images/{digest}     session image by digest, PNG, ?w=&h=
    POST /respec/sessions/{session_id}/rewind              {"turn": k}: keep turns 0..k
    GET  /respec/masks/{digest}                            a region mask published with the scores
    GET  /respec/scores/latest                             the latest respec.scores payload
"""
from __future__ import annotations

import asyncio
from typing import Any, Callable

from ..respec import comfy, web

_registered: set[int] = set()


def _default_store():
    from ..respec.store import open_store
    return open_store()


def _reply(resp: web.Response):
    from aiohttp import web as aioweb
    charset = "utf-8" if resp.content_type == "application/json" else None
    return aioweb.Response(status=resp.status, body=resp.body, content_type=resp.content_type,
                           charset=charset, headers=resp.headers)


async def _run(fn: Callable[..., web.Response], *args: Any):
    return _reply(await asyncio.to_thread(fn, *args))


def add_routes(table, store_factory: Callable[[], Any] = _default_store) -> None:
    """Add the /respec/ routes to an aiohttp RouteTableDef (ComfyUI's, or a test's)."""

    def store():
        return store_factory()

    @table.get("/respec/sessions")
    async def sessions(request):
        return await _run(lambda: web.list_sessions(store()))

    @table.get("/respec/sessions/{session_id}")
    async def session(request):
        sid = request.match_info["session_id"]
        return await _run(lambda: web.get_session(store(), sid))

    @table.get("/respec/sessions/{session_id}/turns/{turn}/image")
    async def turn_image(request):
        sid, turn = request.match_info["session_id"], request.match_info["turn"]
        w, h = request.query.get("w"), request.query.get("h")
        return await _run(lambda: web.turn_image(store(), sid, turn, w, h))

    @table.get("/respec/sessions/{session_id}/images/{digest}")
    async def session_image(request):
        sid, digest = request.match_info["session_id"], request.match_info["digest"]
        w, h = request.query.get("w"), request.query.get("h")
        return await _run(lambda: web.session_image(store(), sid, digest, w, h))

    @table.post("/respec/sessions/{session_id}/rewind")
    async def rewind(request):
        sid = request.match_info["session_id"]
        # JSON only: a cross-site form post cannot send it without a CORS preflight.
        if request.content_type != "application/json":
            return _reply(web.error_response(415, "send the body as application/json, e.g. {\"turn\": 2}"))
        body = await request.content.read(web.MAX_BODY + 1)
        return await _run(lambda: web.rewind(store(), sid, body))

    @table.get("/respec/masks/{digest}")
    async def mask(request):
        digest = request.match_info["digest"]
        return await _run(lambda: web.mask_image(digest))

    @table.get("/respec/scores/latest")
    async def scores(request):
        return await _run(web.get_latest_scores)


def register() -> None:
    """Add the pack's routes to ComfyUI's server when one is running (no-op otherwise), and keep
    the latest scores for panels opened after a run. Idempotent."""
    table = comfy.routes()
    if table is None or id(table) in _registered:
        return
    _registered.add(id(table))
    add_routes(table)
    comfy.add_listener(web.remember_scores)
