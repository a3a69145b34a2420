"""Request handling for the frontend panel's HTTP API under /respec/ (no aiohttp, no ComfyUI).

Every handler takes the raw request values (strings exactly as they came off the URL or the body)
and returns a `Response` (status, content type, body bytes, headers); nodes/routes.py is the thin
aiohttp adapter. Handlers validate everything they are given before touching the store:

- session ids: `store.validate_session_id` ([A-Za-z0-9_-], 1..64);
- turn numbers: decimal digits only, at most 9 of them (no sign, no spaces), then range-checked;
- digests: exactly 64 lowercase hex characters, and only digests that belong to the session;
- sizes: decimal digits, clamped to MIN_SIDE..MAX_SIDE; images are only ever scaled down;
- the rewind body: a JSON object of at most MAX_BODY bytes, nested at most MAX_BODY_DEPTH deep
  (respec/text.py's bounded reader), holding an integer `turn` (a JSON number without a fraction;
  "1", 1.0 and true are refused);
- the clean-up (gc) body: a JSON object with at most `dry_run` (true or false); the store, the age
  limit and the most files one request removes are the server's (GC_MIN_AGE_S, MAX_GC_FILES).

Every refusal is a 4xx whose message is short and shows no server path (`public`: the store
folders are taken out of a damaged store's message, which goes whole to the log).

Nothing but the session store's own image files (looked up by digest, never by a path taken from
the request) and the in-memory region masks published by `publish_region_masks` is ever served.
An image file is decoded and its content hash checked before it is served (once per digest and
size, then kept in the analysis cache): a damaged or replaced file, or a link leading outside the
store, is a JSON error naming the turn, never a 200 or a bare 500; any other failure is a JSON 500 too.

What the server remembers between requests (the stores History nodes announced, the published
region masks, the latest scores) is one `PanelState`, made once (`PANEL`) and taken by the handlers
and the event listener as a parameter.
"""
from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
from dataclasses import dataclass, field
from io import BytesIO
from typing import Any, Callable

import numpy as np
from PIL import Image

from . import comfy, models, paths
from .errors import InputError, ReSpecError, StoreError
from .images import as_mask
from .lru import LRU
from .pixels.analysis_cache import CACHE, AnalysisCache
from .records import json_safe
from .text import message, read_json

MIN_SIDE = 16          # smallest image side a client may ask for
MAX_SIDE = 512         # largest: thumbnails and overlays never need more, and it bounds the work
DEFAULT_SIDE = 512
MAX_BODY = 1024        # bytes accepted in a POST body (the rewind body is ~12 bytes)
MAX_BODY_DEPTH = 4     # nesting levels of a POST body (every body is one flat object)
MAX_MASKS = 32         # region masks kept in memory for the panel (oldest dropped first)
GC_MIN_AGE_S = 3600.0  # a clean-up spares image files changed within the hour (appends in flight)
MAX_GC_FILES = 1000    # image files one clean-up request removes at most (it says when more remain)
IMMUTABLE = {"Cache-Control": "private, max-age=31536000, immutable"}  # digest-named content
NO_CACHE = {"Cache-Control": "no-cache"}

_DIGITS = re.compile(r"[0-9]{1,9}")
_DIGEST = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Response:
    """What an HTTP handler returns: status code, content type, body bytes, extra headers."""

    status: int
    content_type: str
    body: bytes
    headers: dict = field(default_factory=dict)

    def json(self) -> Any:
        """The body parsed as JSON (tests and callers that stay in Python)."""
        return json.loads(self.body.decode("utf-8"))


def json_response(obj: Any, status: int = 200, headers: dict | None = None) -> Response:
    """A JSON response (strict JSON: NaN/inf become null, which browsers can parse)."""
    body = json.dumps(json_safe(obj), ensure_ascii=False, allow_nan=False).encode("utf-8")
    return Response(status, "application/json", body, dict(headers or NO_CACHE))


def error_response(status: int, message: str) -> Response:
    """`{"error": message}` with the given status."""
    return json_response({"error": message}, status)


# --------------------------------------------------------------------------- parameters

def parse_session_id(value: Any) -> str:
    """A valid session id, or InputError (the store's rule)."""
    from .store import validate_session_id
    return validate_session_id(value)


def parse_turn(value: Any) -> int:
    """A turn number from a URL or a JSON body: a non-negative integer, at most 9 digits."""
    if isinstance(value, bool):
        raise InputError(f"turn must be a whole number >= 0, got {value!r}")
    if isinstance(value, int):
        if not 0 <= value <= 999_999_999:
            raise InputError(f"turn must be a whole number between 0 and 999999999, got {value}")
        return value
    if not isinstance(value, str) or not _DIGITS.fullmatch(value):
        shown = repr(value)[:40]
        raise InputError(f"turn must be a whole number >= 0 written with digits only, got {shown}")
    return int(value)


def parse_digest(value: Any) -> str:
    """An image digest: exactly 64 lowercase hex characters (sha256, as the store names files)."""
    if not isinstance(value, str) or not _DIGEST.fullmatch(value):
        raise InputError(f"{repr(value)[:80]} is not an image digest (64 lowercase hex characters)")
    return value


def parse_side(value: Any, default: int = DEFAULT_SIDE) -> int:
    """A requested width or height in pixels: ASCII digits only, clamped to MIN_SIDE..MAX_SIDE
    (an absurdly long number is clamped like any other too-large size)."""
    if value is None or value == "":
        return default
    if not isinstance(value, str) or not value.isascii() or not value.isdigit():
        raise InputError(f"image width/height must be a whole number of pixels, got {repr(value)[:40]}")
    if len(value) > 9:
        return MAX_SIDE
    return max(MIN_SIDE, min(MAX_SIDE, int(value)))


def fit_within(size: tuple[int, int], box: tuple[int, int]) -> tuple[int, int]:
    """(w, h) scaled down (never up) to fit inside box (bw, bh), keeping the aspect ratio."""
    w, h = size
    bw, bh = box
    s = min(1.0, bw / w, bh / h)
    return max(1, round(w * s)), max(1, round(h * s))


# --------------------------------------------------------------------------- image encoding

def _encode_png(arr: np.ndarray, box: tuple[int, int]) -> bytes:
    im = Image.fromarray(arr[:, :, 0] if arr.shape[2] == 1 else arr)
    target = fit_within(im.size, box)
    if target != im.size:
        im = im.resize(target, Image.BILINEAR, reducing_gap=2.0)
    buf = BytesIO()
    im.save(buf, format="PNG", compress_level=3)
    return buf.getvalue()


def _png(store, digest: str, box: tuple[int, int], what: str, cache: AnalysisCache) -> bytes:
    """The stored image `digest` as a PNG fitted into `box`. The file is decoded and its content
    hash checked (ImageFiles.get) the first time; the result is kept by digest and box (the
    analysis cache's `pngs`), so a verified image is not decoded again. A damaged, replaced or linked-away
    file is a StoreError naming `what` (e.g. "turn 2's image"), without server paths."""
    key = (digest, box)
    data = cache.pngs.get(key)
    if data is None:
        try:
            arr = store.files.get(digest)
        except StoreError as e:
            text = str(e)
            why = ("is a link to a file outside the store" if "outside the store" in text else
                   "is missing from the store" if "missing" in text else
                   "was replaced by another picture" if "does not hold" in text else "is damaged")
            raise StoreError(f"{what} (image {digest[:12]}...) cannot be served: its file {why}. Restore the "
                             "file from a backup, or rewind the session to before that turn.") from e
        data = _encode_png(arr, box)
        cache.pngs.put(key, data)
    return data


# --------------------------------------------------------------------------- stores

MAX_KNOWN_ROOTS = 16


class PanelState:
    """What this server remembers for the panel between requests (not a cache of the core's
    analysis: the panel's own state, made from the events of this process's nodes). One object,
    `PANEL`, made when the module loads; the handlers and the event listener take it as a
    parameter (a test passes its own).

        known_roots   the session-store directories History nodes announced (newest last): the
                      only stores besides the default one a client may read
        masks         the latest region masks published with the scores (PNG bytes by digest)
        scores        the latest scores per session, and `latest` overall (under `lock`)
        gc_lock       one clean-up of a store at a time in this process
    """

    def __init__(self):
        self.known_roots = LRU(MAX_KNOWN_ROOTS)
        self.masks = LRU(MAX_MASKS)      # read with peek: the latest published are kept
        self.scores = LRU(64)            # per session; read and written under `lock` with `latest`
        self.latest: dict = {}
        self.lock = threading.Lock()     # guards the latest scores (merged into, overall and per session)
        self.gc_lock = threading.Lock()


PANEL = PanelState()


def known_store_roots(panel: PanelState = PANEL) -> list[str]:
    """Session-store directories that History nodes of this process reported (newest last)."""
    return panel.known_roots.keys()


def remember_store(root: Any, panel: PanelState = PANEL) -> None:
    """Allow the panel to read a store a History node used (called from the event listener,
    so only paths the server's own nodes opened become readable, never a client's path)."""
    if not isinstance(root, str) or not root:
        return
    from pathlib import Path
    key = str(Path(root).expanduser().resolve())
    panel.known_roots.put(key, None)


def resolve_store(param: Any, open_store: Callable[[str | None], Any], panel: PanelState = PANEL):
    """The store a request names: the default one when `param` is empty, else a store root that
    is the default's or one a History node announced (compared as text: a client's path is never
    opened). InputError otherwise."""
    if param is None or param == "":
        return open_store(None)
    if isinstance(param, str) and len(param) <= 4096:
        default = open_store(None)
        if param == str(default.root):
            return default
        if param in known_store_roots(panel):
            return open_store(param)
    raise InputError("unknown session store: only the default store and stores used by ReSpec "
                     "History nodes of this server can be read (use the 'store' value that "
                     "/respec/sessions lists)")


def with_store(open_store: Callable[[str | None], Any], store_param: Any,
               handler: Callable[..., Response], *args: Any) -> Response:
    """Resolve the request's store (400 when it is not allowed), then run handler(store, *args)."""
    return _guard(lambda: handler(resolve_store(store_param, open_store), *args))


# --------------------------------------------------------------------------- handlers

def history_event(history, action: str, node: Any = None) -> dict:
    """The payload of the `respec.history` event, in one shape for every sender (History nodes,
    the rewind route): the session summary plus what happened (`action`: new, load, rewind,
    branch, in-graph, append), the sending node, and the store directory the panel may read."""
    return {**history.summary(), "action": action, "node": node, "store": history.store_root}


def send_history(history, action: str, node: Any = None) -> None:
    """Tell every open panel what `history` looks like now (ids, text, digests; no pixels)."""
    comfy.send_event("respec.history", history_event(history, action, node))


class NotFound(ReSpecError):
    """The session, turn or image asked for does not exist (HTTP 404)."""


def public(error: Exception, store: Any = None, panel: PanelState = PANEL) -> str:
    """An error's message as a client may see it: short, and without the folders of the session
    stores (a message about a damaged or busy store file names it for the server's owner, who
    finds it in the log)."""
    text = str(error)
    roots = {str(getattr(store, "root", "") or ""), *known_store_roots(panel)}
    try:
        roots.add(str(paths.sessions_dir().expanduser().resolve()))
    except (OSError, ValueError):
        pass
    for root in sorted(filter(None, roots), key=len, reverse=True):
        text = text.replace(root, "<session store>")
    return message(text)


def _guard(fn: Callable[[], Response], store: Any = None) -> Response:
    """Map errors to HTTP statuses: bad input 400, unknown session/turn/image 404, a damaged
    store 500 (its message says what to do; the store's folder is not shown)."""
    try:
        return fn()
    except InputError as e:
        return error_response(400, public(e, store))
    except NotFound as e:
        return error_response(404, public(e, store))
    except ReSpecError as e:   # a damaged or busy store: the whole message (its folder too) goes to the log
        logging.getLogger(__name__).error("ReSpec route: %s", e)
        return error_response(500, public(e, store))
    except Exception as e:  # a bug or a library error: still JSON, without internals (logged here)
        logging.getLogger(__name__).exception("ReSpec route failed")
        return error_response(500, f"the request failed inside ReSpec ({type(e).__name__}); see the server log")


def _load(store, session_id: Any):
    """The History of a valid, existing session (InputError / NotFound otherwise)."""
    sid = parse_session_id(session_id)
    # Existence is checked here rather than read out of the store's error text, and the 404
    # message names no server path.
    db = getattr(store, "db_path", None)
    if db is not None and not db.exists():
        raise NotFound(f"there is no session {sid!r}")
    if not store.exists(sid):
        raise NotFound(f"there is no session {sid!r}")
    return store.load(sid)


def _image_of(hist, digest: str) -> str:
    """What `digest` is in this history's session ("turn 2's image", "turn 1's change mask"), or
    NotFound when it is neither an image nor a turn mask of it."""
    for t in hist.turns:
        if t.image.digest == digest:
            return f"turn {t.index}'s image"
        for name, m in t.masks.items():
            if m.image.digest == digest:
                return f"turn {t.index}'s {name} mask"
    raise NotFound(f"image {digest[:12]}... is not part of session {hist.session_id!r}")


def _sessions(store) -> list[dict]:
    # A read must not create the store: with no database yet there are simply no sessions.
    db = getattr(store, "db_path", None)
    if db is not None and not db.exists():
        return []
    return store.list_sessions()


def list_sessions(open_store: Callable[[str | None], Any], store_param: Any = None,
                  panel: PanelState = PANEL) -> Response:
    """GET /respec/sessions: every session of the default store and of the stores History nodes
    of this server used, newest change first; each names its store (pass it back as ?store=).
    With ?store=, only that store's sessions; a store that is not one of those is 400, as on the
    other routes (a client cannot name a directory to read)."""
    def run():
        out, seen = [], set()
        roots = [None, *known_store_roots(panel)]
        if store_param is not None:
            roots = [str(resolve_store(store_param, open_store, panel).root)]
        for root in roots:
            store = open_store(root)
            key = str(store.root)
            if key in seen:
                continue
            seen.add(key)
            out += [dict(s, store=key) for s in _sessions(store)]
        out.sort(key=lambda s: s.get("updated") or 0, reverse=True)
        return json_response({"sessions": out})
    return _guard(run)


def get_session(store, session_id: Any, panel: PanelState = PANEL) -> Response:
    """GET /respec/sessions/{id}: the session's turns (JSON), the latest plan, and the latest
    scores seen for it in this process (or null)."""
    def run():
        hist = _load(store, session_id)
        body = hist.summary()
        body["scores"] = latest_scores(hist.session_id, panel)
        return json_response(body)
    return _guard(run, store)


def turn_image(store, session_id: Any, turn: Any, width: Any = None, height: Any = None,
               cache: AnalysisCache = CACHE) -> Response:
    """GET /respec/sessions/{id}/turns/{k}/image?w=&h=: turn k's image as PNG, fitted into w×h."""
    def run():
        k = parse_turn(turn)
        box = (parse_side(width), parse_side(height))
        hist = _load(store, session_id)
        if k >= len(hist.turns):
            raise NotFound(f"session {hist.session_id!r} has turns 0..{len(hist.turns) - 1}, not {k}")
        digest = hist.turns[k].image.digest
        # Turn k's content changes after a rewind and a new append: not cacheable.
        return Response(200, "image/png", _png(store, digest, box, f"turn {k}'s image", cache), dict(NO_CACHE))
    return _guard(run, store)


def session_image(store, session_id: Any, digest: Any, width: Any = None, height: Any = None,
                  cache: AnalysisCache = CACHE) -> Response:
    """GET /respec/sessions/{id}/images/{digest}?w=&h=: an image of this session by digest."""
    def run():
        d = parse_digest(digest)
        box = (parse_side(width), parse_side(height))
        hist = _load(store, session_id)
        return Response(200, "image/png", _png(store, d, box, _image_of(hist, d), cache), dict(IMMUTABLE))
    return _guard(run, store)


def rewind(store, session_id: Any, body: bytes | str | None, notify: bool = True) -> Response:
    """POST /respec/sessions/{id}/rewind with {"turn": k}: keep turns 0..k (the History Store
    node's rewind). Sends `respec.history` so every open panel follows."""
    def run():
        sid = parse_session_id(session_id)
        data = _json_body(body, 'a JSON object like {"turn": 2}')
        if "turn" not in data:
            raise InputError('the body must be a JSON object like {"turn": 2}')
        if not isinstance(data["turn"], int) or isinstance(data["turn"], bool):
            raise InputError(f'"turn" must be a whole number like {{"turn": 2}}, got {json.dumps(data["turn"])[:40]}')
        k = parse_turn(data["turn"])
        _load(store, sid)               # 404 for an unknown session; the store checks k's range
        hist = store.rewind(sid, k)
        if notify:
            send_history(hist, "rewind")
        return json_response(hist.summary())
    return _guard(run, store)


def _json_body(body: bytes | str | None, example: str) -> dict:
    """A POST body: a JSON object of at most MAX_BODY bytes nested at most MAX_BODY_DEPTH deep
    (respec.text.read_json, the pack's one bounded reader); InputError otherwise."""
    raw = body if body else b""
    data = read_json(raw, "the request body", max_bytes=MAX_BODY, example=example, max_depth=MAX_BODY_DEPTH) \
        if raw else None
    if not isinstance(data, dict):
        raise InputError(f"the body must be {example}")
    return data


def branch(store, session_id: Any, body: bytes | str | None, notify: bool = True) -> Response:
    """POST /respec/sessions/{id}/branch with {"turn": k} (and optionally "new_session_id"): a new
    session holding turns 0..k of this one (the History Store node's branch; the source is not
    changed). Answers like GET /respec/sessions/{new id} and sends `respec.history`."""
    def run():
        sid = parse_session_id(session_id)
        data = _json_body(body, 'a JSON object like {"turn": 2}')
        if "turn" not in data or not isinstance(data["turn"], int) or isinstance(data["turn"], bool):
            raise InputError(f'"turn" must be a whole number like {{"turn": 2}}, got {json.dumps(data.get("turn"))[:40]}')
        k = parse_turn(data["turn"])
        hist = _load(store, sid)
        if k >= len(hist.turns):
            raise InputError(f"cannot branch session {sid!r} at turn {k}: it has turns 0..{len(hist.turns) - 1}")
        new_id = data.get("new_session_id")
        # No id: the store picks the first free "<id>-b<k>[-n]" in the transaction that makes the
        # branch (branches made at the same time each get their own); a taken id is a 400.
        new = store.branch(sid, None if new_id in (None, "") else parse_session_id(new_id), k)
        if notify:
            send_history(new, "branch")
        return json_response(new.summary())
    return _guard(run, store)


def collect_garbage(store, body: bytes | str | None, panel: PanelState = PANEL) -> Response:
    """POST /respec/sessions/gc with {} (or {"dry_run": true}): delete the store's image files that
    no turn refers to any more (after rewinds, deleted sessions, interrupted appends) and that are
    older than GC_MIN_AGE_S. Bounded: the request names no path and no age, one clean-up runs at
    a time (409 meanwhile), and one request removes at most MAX_GC_FILES files ("more": true when
    it stopped there: call again). Answers {"store", "dry_run", "removed", "bytes", "files" (their names),
    "more", "min_age_s"}; a folder without a store file has nothing to remove (none is created)."""
    def run():
        data = _json_body(body, 'a JSON object like {"dry_run": true}')
        if set(data) - {"dry_run"} or not isinstance(data.get("dry_run", False), bool):
            raise InputError('the body must be {} or {"dry_run": true} (nothing else is read)')
        dry = data.get("dry_run", False)
        if not panel.gc_lock.acquire(blocking=False):
            return error_response(409, "a clean-up of the session store is already running; try again when it has finished")
        try:
            files: list[tuple[str, int]] = []
            n = store.gc(GC_MIN_AGE_S, dry_run=dry, limit=MAX_GC_FILES,
                         seen=lambda path, size: files.append((path.name, size)))
        finally:
            panel.gc_lock.release()
        return json_response({"store": str(store.root), "dry_run": dry, "removed": n,
                              "bytes": sum(size for _, size in files), "files": [name for name, _ in files],
                              "more": n >= MAX_GC_FILES, "min_age_s": GC_MIN_AGE_S})
    return _guard(run, store)


# --------------------------------------------------------------------------- scores and region masks

def _mask_png(mask: Any) -> tuple[bytes, tuple[int, int]]:
    inside = as_mask(mask, "region mask")
    if inside.size == 0:
        raise InputError("a region mask must not be empty (0 pixels)")
    im = Image.fromarray(inside.astype(np.uint8) * 255, "L")
    size = im.size
    target = fit_within(size, (MAX_SIDE, MAX_SIDE))
    if target != size:
        im = im.resize(target, Image.NEAREST)
    buf = BytesIO()
    im.save(buf, format="PNG", optimize=False, compress_level=6)
    return buf.getvalue(), size


def publish_region_masks(masks: dict[str, Any], panel: PanelState = PANEL) -> dict[str, dict]:
    """Keep region masks (e.g. {"R_restore": bool H×W, "R_preserve": ...}) for the panel's
    overlays and return, per name, {"digest", "url", "width", "height"} (the mask's own size
    before the <=512 px downscale) to put into a `respec.scores` event as `regions`.

    Masks live in this process's memory only (the latest MAX_MASKS), named by content hash.
    """
    out = {}
    for name, mask in masks.items():
        if mask is None:
            continue
        data, (w, h) = _mask_png(mask)
        digest = hashlib.sha256(data).hexdigest()
        panel.masks.put(digest, data)
        out[str(name)] = {"digest": digest, "url": f"/respec/masks/{digest}", "width": w, "height": h}
    return out


def mask_image(digest: Any, panel: PanelState = PANEL) -> Response:
    """GET /respec/masks/{digest}: a published region mask (L PNG, 255 inside)."""
    def run():
        d = parse_digest(digest)
        data = panel.masks.peek(d)
        if data is None:
            return error_response(404, "no such region mask (masks are kept in memory for the "
                                       "latest scores only; run the OCCUR Score node again)")
        return Response(200, "image/png", data, dict(IMMUTABLE))
    return _guard(run)


def merge_scores(previous: dict | None, data: dict) -> dict:
    """The scores to show after a `respec.scores` event: an OCCUR record replaces the previous
    one (keeping a judge's S_IF); a judge-only event (S_IF) is added to the previous record."""
    payload = json_safe(data)
    has_occur = any(k in payload for k in ("S_restore", "S_preserve", "S_TC"))
    if has_occur:
        if previous and "S_IF" in previous and "S_IF" not in payload:
            payload["S_IF"] = previous["S_IF"]
        return payload
    return {**(previous or {}), **payload}


def remember_event(event: str, data: Any, panel: PanelState = PANEL) -> None:
    """Event listener (respec.comfy.add_listener): note the stores History nodes use and keep the
    latest `respec.scores` (with the judge's S_IF from `respec.judge`), overall and per session,
    for panels opened after the run."""
    if not isinstance(data, dict):
        return
    if event == "respec.history":
        remember_store(data.get("store"), panel)
        return
    if event == "respec.judge" and "S_IF" in data:
        data = {"S_IF": data["S_IF"], **({"session_id": data["session_id"]} if "session_id" in data else {})}
    elif event != "respec.scores":
        return
    sid = data.get("session_id")
    with panel.lock:
        panel.latest = merge_scores(dict(panel.latest) or None, data)
        if isinstance(sid, str):
            panel.scores.put(sid, merge_scores(panel.scores.peek(sid), data))


def latest_scores(session_id: str | None = None, panel: PanelState = PANEL) -> dict | None:
    """The latest scores payload for `session_id` (or overall when None), or None."""
    with panel.lock:
        if session_id is None:
            return dict(panel.latest) or None
        got = panel.scores.peek(session_id)
        return dict(got) if got is not None else None


def get_latest_scores(panel: PanelState = PANEL) -> Response:
    """GET /respec/scores/latest: the latest `respec.scores` payload seen by this server."""
    return json_response({"scores": latest_scores(None, panel)})


def models_status() -> Response:
    """GET /respec/models: the pack's loaded models (cache entries, managed, on ComfyUI's device)."""
    return _guard(lambda: json_response(models.loaded_models()))


def unload_models() -> Response:
    """POST /respec/models/unload: drop the pack's caches (like /free, but other nodes' models stay
    loaded); models the last prompt's node outputs still hold are listed as still referenced."""
    return _guard(lambda: json_response(models.unload_all()))
