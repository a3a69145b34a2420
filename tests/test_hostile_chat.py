"""The chat surfaces attacked as a hostile user and a careless script would (issue 34): the panel's
HTTP routes, the composer's request through History Append and Controller Prompt, Plan from Text,
History Store / Append / to Images, the Drift Guard, Reveal Composite, the alignment and the
session store's text. About 500 cases, each asserting the same contract:

- a refused value is a clear 4xx (routes) or an InputError (nodes, core), never another exception
  (no raw traceback) and never a hang (each case has a 30 s alarm);
- its message is at most 300 characters, names the input, and shows no server path (the store's
  folder, the test's temporary folder, the pack's folder);
- a refused call creates or changes nothing: the sessions, their versions and the store's files
  are the same before and after;
- a value that is extreme but valid (a plan's 8192-emoji instruction, a 600×2 turn then a 2×600
  one) is handled, and what it makes is kept.

The per-cause tests are tests/test_input_hardening.py; the big-image figures come from
scripts/bench/bench_big_inputs.py (no timing here).
"""
from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import ROOT, core
from controller_helpers import make_history
from raw_http import Server

pytestmark = pytest.mark.skipif(os.name != "posix", reason="SIGALRM bounds each case")

REQUEST = "remove the large cardboard box"
MAX_MESSAGE = 300


def _hidden(node, **values):
    """The node's class for one call, holding that call's hidden values (unique_id, prompt) as ComfyUI
    gives them to a V3 node (which reads them as cls.hidden)."""
    io = sys.modules[node.__module__].io
    return node.PREPARE_CLASS_CLONE({"hidden_inputs": {io.Hidden[k]: v for k, v in values.items()}})


@contextlib.contextmanager
def deadline(seconds: int = 30):
    """Fail instead of hanging: a case that takes longer than `seconds` raises TimeoutError."""
    def expire(*_):
        raise TimeoutError(f"no answer within {seconds} s")
    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _picture(seed: int, h: int = 32, w: int = 32) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def _tensor(arr: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.array(arr)[None]).to(torch.float32) / 255.0


def _deep(depth: int, inner: str = "") -> str:
    return "[" * depth + inner + "]" * depth


def _server_paths(*extra) -> list[str]:
    out = [str(ROOT), str(Path(os.environ.get("RESPEC_HOME", "/nonexistent")).resolve()), *map(str, extra)]
    return [p for p in out if len(p) > 4]


def check_message(message: str, names: tuple[str, ...], *paths) -> None:
    """The message contract: short, names the input, no server path, no traceback."""
    assert len(message) <= MAX_MESSAGE, f"{len(message)} characters: {message[:120]}..."
    assert "Traceback" not in message and "File \"" not in message
    for p in _server_paths(*paths):
        assert p not in message, f"shows the server path {p}"
    assert any(n.lower() in message.lower() for n in names), f"does not name {names}: {message}"


def _store_state(root: Path):
    """What a refused call must not change: the store's sessions (id, version, turns) and its files."""
    sessions = ()
    db = root / "sessions.sqlite3"
    if db.exists():
        import sqlite3
        with contextlib.closing(sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)) as conn:
            sessions = tuple(conn.execute("SELECT id, version, n_turns, lineage FROM sessions ORDER BY id"))
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*")
                   if p.is_file() and not p.name.startswith("sessions.sqlite3"))
    return sessions, files


def refused(call, names: tuple[str, ...], store_root: Path | None = None, errors=None) -> str:
    """call() raises InputError (nothing else) within the deadline, with a message that keeps the
    contract, and the store under store_root is as it was."""
    before = _store_state(store_root) if store_root is not None else None
    with deadline():
        with pytest.raises(errors.InputError) as got:
            call()
    check_message(str(got.value), names, *([store_root] if store_root is not None else []))
    if store_root is not None:
        assert _store_state(store_root) == before, "a refused call changed the store"
    return str(got.value)


@pytest.fixture
def errors(pack):
    return core(pack, "errors")


@pytest.fixture
def nodes(pack):
    return pack.NODE_CLASS_MAPPINGS


def _default_root(pack) -> Path:
    return core(pack, "store").open_store(None).root


# ======================================================================== 1. the panel's HTTP routes

@pytest.fixture(scope="module")
def http(pack, tmp_path_factory):
    from aiohttp import web as aioweb
    tmp = tmp_path_factory.mktemp("hostile-web")
    store_mod = core(pack, "store")
    routes = importlib.import_module(f"{pack.__name__}.nodes.routes")
    store = store_mod.SessionStore(tmp / "store")
    store.create("demo", _picture(0, 40, 60))
    for k in (1, 2, 3):
        store.append("demo", _picture(k, 40, 60), f"edit {k}")
    table = aioweb.RouteTableDef()
    routes.add_routes(table, open_store=lambda root=None: store if root is None else store_mod.open_store(root))
    server = Server(table)
    yield {"server": server, "store": store, "tmp": tmp}
    server.close()


BODIES = {   # hostile POST bodies: none of them is a valid request to any of the three routes
    "empty": b"", "space": b" ", "null": b"null", "true": b"true", "number": b"1", "string": b'"x"',
    "list": b"[]", "list-1": b"[1]", "open-brace": b"{", "close-brace": b"}", "no-value": b'{"turn": }',
    "prose": b"not json", "bad-utf8": b"\xff\xfe{}", "nul": b"\x00", "trailing-nul": b'{"turn": 1}\x00',
    "bom": b"\xef\xbb\xbf{}", "single-quotes": b"{'turn': 1}", "unquoted-key": b"{turn: 1}",
    "nested-33": ("[" * 33 + "]" * 33).encode(), "open-990": b"[" * 990, "open-1000": b"[" * 1000,
    "open-1020": b"[" * 1020, "objects-200": b'{"a":' * 200, "turn-open-1000": b'{"turn": ' + b"[" * 1000,
    "list-of-dicts": b'[{"a": ' * 150, "closed-500": ("[" * 500 + "]" * 500).encode(),
    "over-1kb": b'{"turn": 1, "x": "' + b"a" * 1100 + b'"}', "one-megabyte": b'{"x": "' + b"a" * (1 << 20) + b'"}',
    "turn-surrogate": b'{"turn": "\\ud800"}', "turn-huge-exponent": b'{"turn": 1e400}', "turn-nan": b'{"turn": NaN}',
    "turn-infinity": b'{"turn": Infinity}', "turn-negative": b'{"turn": -1}', "turn-float": b'{"turn": 1.0}',
    "turn-fraction": b'{"turn": 1.5}', "turn-text": b'{"turn": "1"}', "turn-bool": b'{"turn": true}',
    "turn-null": b'{"turn": null}', "turn-list": b'{"turn": [1]}', "turn-object": b'{"turn": {"a": 1}}',
    "turn-20-digits": b'{"turn": 99999999999999999999}', "turn-out-of-range": b'{"turn": 999}',
    "turn-nested-deep": ('{"turn": ' + "[" * 40 + "1" + "]" * 40 + "}").encode(),
    "key-surrogate": b'{"\\udfff": 1}', "no-turn": b'{"dry": 1}',
}
BRANCH_IDS = {"dots": "../x", "slash": "a/b", "space": " ", "65-chars": "x" * 65, "surrogate": "\ud800", "accent": "é",
              "nul": "a\u0000b", "number": 5, "list": ["a"], "object": {"a": 1}, "true": True, "taken": "demo",
              "same": "demo-dup", "tab": "a\tb", "newline": "a\nb", "percent": "a%2Fb", "emoji": "\U0001f600"}
GC_BODIES = {**{k: v for k, v in BODIES.items() if not k.startswith("turn-") and k != "no-turn"},
             "dry-run-text": b'{"dry_run": "yes"}', "dry-run-number": b'{"dry_run": 1}', "dry-run-null": b'{"dry_run": null}',
             "other-key": b'{"store": "/etc"}', "age": b'{"min_age_s": 0}', "limit": b'{"limit": 100000}'}


def _post_refused(http, route: str, body: bytes, content_type: str = "application/json") -> None:
    store = http["store"]
    before = _store_state(store.root)
    path = f"/respec/sessions/gc" if route == "gc" else f"/respec/sessions/demo/{route}"
    with deadline():
        status, headers, out = http["server"].request("POST", path, body, content_type=content_type)
    assert 400 <= status < 500, (status, out[:200])
    error = json.loads(out)["error"]
    check_message(error, ("body", "turn", "session", "json", "send", "dry_run", "request", "nested", "id"),
                  store.root, http["tmp"])
    assert _store_state(store.root) == before


@pytest.mark.parametrize("name", list(BODIES))
@pytest.mark.parametrize("route", ["rewind", "branch"])
def test_a_hostile_body_is_a_clear_4xx_and_changes_nothing(http, route, name):
    _post_refused(http, route, BODIES[name])


@pytest.mark.parametrize("name", list(GC_BODIES))
def test_a_hostile_clean_up_body_is_a_clear_4xx_and_removes_nothing(http, name):
    _post_refused(http, "gc", GC_BODIES[name])


@pytest.mark.parametrize("name", list(BRANCH_IDS))
def test_a_hostile_branch_id_is_a_clear_4xx_and_makes_nothing(http, name):
    if name == "same":
        http["store"].branch("demo", "demo-dup", 1, exist_ok=True)
    body = json.dumps({"turn": 1, "new_session_id": BRANCH_IDS[name]}).encode()
    _post_refused(http, "branch", body)


@pytest.mark.parametrize("route", ["rewind", "branch", "gc"])
@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data"])
def test_a_body_that_is_not_json_is_refused_before_it_is_read(http, route, content_type):
    _post_refused(http, route, b'{"turn": 1}', content_type=content_type)


GET_TARGETS = {
    "id-dots": "/respec/sessions/..", "id-encoded-dots": "/respec/sessions/%2e%2e",
    "id-etc": "/respec/sessions/%2Fetc%2Fpasswd", "id-65": "/respec/sessions/" + "a" * 65,
    "id-nul": "/respec/sessions/a%00b", "id-emoji": "/respec/sessions/%F0%9F%98%80",
    "id-surrogate-bytes": "/respec/sessions/%ED%A0%80", "id-space": "/respec/sessions/demo%20x",
    "id-dot": "/respec/sessions/demo.", "id-unknown": "/respec/sessions/nobody",
    "id-bad-utf8": "/respec/sessions/%FF%FE", "id-backslash": "/respec/sessions/a%5Cb",
    "turn-negative": "/respec/sessions/demo/turns/-1/image", "turn-float": "/respec/sessions/demo/turns/1.0/image",
    "turn-range": "/respec/sessions/demo/turns/4/image", "turn-11-digits": "/respec/sessions/demo/turns/99999999999/image",
    "turn-exponent": "/respec/sessions/demo/turns/1e3/image", "turn-space": "/respec/sessions/demo/turns/%201/image",
    "turn-hex": "/respec/sessions/demo/turns/0x1/image", "turn-arabic": "/respec/sessions/demo/turns/%D9%A1/image",
    "turn-empty-session": "/respec/sessions/nobody/turns/0/image", "turn-nul": "/respec/sessions/demo/turns/1%00/image",
    "w-negative": "/respec/sessions/demo/turns/1/image?w=-1", "w-exponent": "/respec/sessions/demo/turns/1/image?w=1e9",
    "w-text": "/respec/sessions/demo/turns/1/image?w=abc", "h-arabic": "/respec/sessions/demo/turns/1/image?h=%D9%A1%D9%A2",
    "h-nul": "/respec/sessions/demo/turns/1/image?h=%00", "w-float": "/respec/sessions/demo/turns/1/image?w=1.5",
    "digest-short": "/respec/sessions/demo/images/abc", "digest-upper": "/respec/sessions/demo/images/" + "A" * 64,
    "digest-foreign": "/respec/sessions/demo/images/" + "0" * 64, "digest-g": "/respec/sessions/demo/images/" + "g" * 64,
    "digest-63": "/respec/sessions/demo/images/" + "0" * 63, "digest-65": "/respec/sessions/demo/images/" + "0" * 65,
    "digest-dots": "/respec/sessions/demo/images/..%2F..%2Fsecret", "mask-short": "/respec/masks/abc",
    "mask-unknown": "/respec/masks/" + "1" * 64, "mask-dots": "/respec/masks/..%2Fx",
    "store-etc": "/respec/sessions?store=%2Fetc", "store-dots": "/respec/sessions?store=..",
    "store-tmp": "/respec/sessions?store=%2Ftmp", "store-long": "/respec/sessions?store=" + "x" * 5000,
    "store-nul": "/respec/sessions?store=%00", "store-surrogate": "/respec/sessions?store=%ED%A0%80",
    "session-store-etc": "/respec/sessions/demo?store=%2Fetc", "image-store-dots": "/respec/sessions/demo/turns/0/image?store=..",
}


@pytest.mark.parametrize("name", list(GET_TARGETS))
def test_a_hostile_read_is_a_clear_4xx(http, name):
    before = _store_state(http["store"].root)
    with deadline():
        status, _, out = http["server"].get(GET_TARGETS[name])
    assert 400 <= status < 500, (status, out[:200])
    if out[:1] == b"{":      # aiohttp's own 404 for a path no route matches is plain text
        check_message(json.loads(out)["error"], ("session", "turn", "image", "digest", "width", "height", "store",
                                                 "mask", "there is no", "id"), http["store"].root, http["tmp"])
    assert _store_state(http["store"].root) == before


# ======================================================================== 2. History Append (the composer's request)

TEXTS = {
    "surrogate-start": "\ud800 add a hat", "surrogate-mid": "add a \udbff hat", "surrogate-end": "add a hat \udfff",
    "low-surrogate": "\udc00", "reversed-pair": "add \udc00\ud800", "nul-start": "\x00add a hat",
    "nul-mid": "add a\x00hat", "ascii-16385": "x" * (16 * 1024 + 1), "accents-16386": "é" * 8193,
    "emoji-16388": "\U0001f600" * 4097, "cjk-16386": "\u6587" * 5462, "megabyte": "m" * (1 << 20),
    "number": 5, "list": ["add a hat"], "bytes": b"add a hat", "dict": {"text": "x"},
}
META = {
    "deep-34": '{"a": ' + _deep(33) + "}", "deep-600": '{"a": ' + _deep(600) + "}", "deep-900": '{"a": ' + _deep(900) + "}",
    "deep-5000": '{"a": ' + _deep(5000) + "}", "deep-100000": '{"a": ' + _deep(100_000) + "}",
    "open-5000": "[" * 5000, "objects-2000": '{"a": ' * 2000 + "1" + "}" * 2000, "list": "[1, 2]",
    "string": '"text"', "number": "5", "null": "null", "true": "true", "not-json": "{not json",
    "key-surrogate-escape": '{"\\ud800": 1}', "value-surrogate-escape": '{"k": "\\udfff"}',
    "key-surrogate": '{"\ud800": 1}', "reserved-key": '{"_respec_run": {"prompt": "x", "node": "1"}}',
    "300-kb": '{"x": "' + "a" * (300 * 1024) + '"}', "nul": '{"a": 1}\x00', "trailing": '{"a": 1} {"b": 2}',
}
IDS = {
    "number": "0", "text-entry": '[0, "1"]', "bool": "[true]", "not-json": "{not json", "float": "[1.5]",
    "nested": "[[0]]", "open-5000": "[" * 5000, "deep-100000": _deep(100_000), "object": '{"a": 1}',
    "quoted": '"[0]"', "null": "null", "8-kb": "[" + ", ".join(["0"] * 3000) + "]", "surrogate": "[\ud800]",
    "nul": "[0]\x00", "deep-40": _deep(40, "0"),
}
IMAGES = {
    "nan": ("value", float("nan")), "inf": ("value", float("inf")), "-inf": ("value", -float("inf")),
    "empty-batch": ("shape", (0, 32, 32, 3)), "one-row": ("shape", (1, 1, 32, 3)), "one-column": ("shape", (1, 32, 1, 3)),
    "one-pixel": ("shape", (1, 1, 1, 3)), "batch-of-2": ("shape", (2, 32, 32, 3)), "two-channels": ("shape", (1, 32, 32, 2)),
    "five-channels": ("shape", (1, 32, 32, 5)), "2-d": ("shape", (32, 32)), "5-d": ("shape", (1, 1, 32, 32, 3)),
    "int64": ("dtype", torch.int64), "bool": ("dtype", torch.bool), "text": ("object", "an image"),
    "none": ("object", None),
}


def _hostile_image(kind: str, value):
    if kind == "value":
        t = _tensor(_picture(1))
        t[0, 5:9, 5:9, :] = value
        return t
    if kind == "shape":
        return torch.rand(value)
    if kind == "dtype":
        return (torch.rand(1, 32, 32, 3) * 255).to(value)
    return value


@pytest.fixture(params=["first turn", "later turn"])
def session(request, pack, nodes):
    """A History Store 'new' history whose session is not stored yet (the first turn creates it),
    or a stored session with one turn."""
    hist = _hidden(nodes["ReSpecHistoryStore"], unique_id="1").execute("new", "s", -1, "", "",
                                                                       image=_tensor(_picture(0))).result[0]
    if request.param == "later turn":
        hist = nodes["ReSpecHistoryAppend"].execute(hist, _tensor(_picture(1)), "add a hat").result[0]
    return hist


def _append(nodes, hist, **kw):
    args = {"image": _tensor(_picture(7)), "instruction": "add a scarf", **kw}
    return lambda: nodes["ReSpecHistoryAppend"].execute(hist, **args).result


@pytest.mark.parametrize("name", list(TEXTS))
@pytest.mark.parametrize("field", ["instruction", "sent_instruction"])
def test_history_append_refuses_a_hostile_request_and_stores_nothing(pack, nodes, errors, session, field, name):
    refused(_append(nodes, session, **{field: TEXTS[name]}), ("instruction",), _default_root(pack), errors)


@pytest.mark.parametrize("name", list(META))
def test_history_append_refuses_a_hostile_meta_and_stores_nothing(pack, nodes, errors, session, name):
    refused(_append(nodes, session, meta=META[name]), ("meta",), _default_root(pack), errors)


@pytest.mark.parametrize("name", list(IDS))
def test_history_append_refuses_hostile_image_ids_and_stores_nothing(pack, nodes, errors, session, name):
    refused(_append(nodes, session, editor_image_ids=IDS[name]), ("editor_image_ids",), _default_root(pack), errors)


@pytest.mark.parametrize("name", list(IMAGES))
def test_history_append_refuses_a_hostile_image_and_stores_nothing(pack, nodes, errors, session, name):
    refused(_append(nodes, session, image=_hostile_image(*IMAGES[name])), ("image",), _default_root(pack), errors)


@pytest.mark.parametrize("name", ["dict", "text", "number", "turn-7", "turn-0", "another-history"])
def test_history_append_refuses_a_plan_it_cannot_keep(pack, nodes, errors, session, name):
    Plan = core(pack, "plan").Plan
    plans = {"dict": {"turn": session.next_turn}, "text": "plan", "number": 5,
             "turn-7": Plan(turn=7, user_instruction="x", synthesis_instruction="x"),
             "turn-0": Plan(turn=0, user_instruction="x", synthesis_instruction="x"),
             "another-history": Plan(turn=session.next_turn + 2, user_instruction="add a scarf",
                                     synthesis_instruction="add a scarf")}
    refused(_append(nodes, session, plan=plans[name]), ("plan",), _default_root(pack), errors)


@pytest.mark.parametrize("name", ["none", "dict", "text", "number"])
def test_history_append_refuses_what_is_no_history(pack, nodes, errors, name):
    value = {"none": None, "dict": {"turns": []}, "text": "s", "number": 5}[name]
    refused(_append(nodes, value), ("history",), None, errors)


@pytest.mark.parametrize("name", ["reveal-text", "reveal-number", "reveal-list", "guard-text", "guard-dict",
                                  "guard-other-step"])
def test_history_append_refuses_post_edit_values_from_elsewhere(pack, nodes, errors, session, name):
    kw = {"reveal-text": {"reveal": "x"}, "reveal-number": {"reveal": 5}, "reveal-list": {"reveal": [1]},
          "guard-text": {"guard": "x"}, "guard-dict": {"guard": {}}, "guard-other-step": {"guard": {"step": "reveal"}}}[name]
    refused(_append(nodes, session, **kw), ("reveal", "guard"), _default_root(pack), errors)


# ======================================================================== 3. History Store

STORE_DIRS = {"surrogate": "mine\ud800", "nul": "a\x00b", "megabyte": "d" * (1 << 20), "parent": "..",
              "escape": "../x", "etc": "/etc", "tmp": "/tmp/respec-hostile", "images": "images",
              "images-sub": "images/sub", "home": "~root", "deep-escape": "a/../../b"}
SESSION_IDS = {"empty": "", "space": " ", "dots": "../x", "slash": "a/b", "65-chars": "a" * 65, "accent": "é",
               "surrogate": "\ud800", "nul": "a\x00", "dot": "con.txt", "number": 5, "none": None}


@pytest.mark.parametrize("name", list(STORE_DIRS))
@pytest.mark.parametrize("mode", ["new", "load"])
def test_history_store_refuses_a_hostile_store_dir(pack, nodes, errors, mode, name):
    run = lambda: nodes["ReSpecHistoryStore"].execute(mode, "s", -1, "", STORE_DIRS[name],
                                                      image=_tensor(_picture(0))).result
    refused(run, ("store_dir",), _default_root(pack), errors)


@pytest.mark.parametrize("name", list(SESSION_IDS))
@pytest.mark.parametrize("mode", ["new", "load", "rewind", "branch"])
def test_history_store_refuses_a_hostile_session_id(pack, nodes, errors, mode, name):
    run = lambda: nodes["ReSpecHistoryStore"].execute(mode, SESSION_IDS[name], 0, "b", "",
                                                      image=_tensor(_picture(0))).result
    refused(run, ("session id",), _default_root(pack), errors)


@pytest.mark.parametrize("case", ["rewind-negative", "rewind-range", "branch-range", "branch-same-id", "branch-dots",
                                  "branch-surrogate", "branch-65", "mode-unknown", "mode-number", "new-without-image",
                                  "in-graph-without-image"])
def test_history_store_refuses_hostile_turns_ids_and_modes(pack, nodes, errors, case):
    Store, Append = nodes["ReSpecHistoryStore"], nodes["ReSpecHistoryAppend"]
    hist = Store.execute("new", "s", -1, "", "", image=_tensor(_picture(0))).result[0]
    Append.execute(hist, _tensor(_picture(1)), "add a hat").result
    args = {"rewind-negative": ("rewind", "s", -1, ""), "rewind-range": ("rewind", "s", 5, ""),
            "branch-range": ("branch", "s", 5, "b"), "branch-same-id": ("branch", "s", 0, "s"),
            "branch-dots": ("branch", "s", 0, "../b"), "branch-surrogate": ("branch", "s", 0, "\udfff"),
            "branch-65": ("branch", "s", 0, "b" * 65), "mode-unknown": ("delete", "s", -1, ""),
            "mode-number": (5, "s", -1, ""), "new-without-image": ("new", "t", -1, ""),
            "in-graph-without-image": ("in-graph", "t", -1, "")}[case]
    image = None if case.endswith("without-image") else _tensor(_picture(0))
    refused(lambda: Store.execute(*args, "", image=image).result, ("turn", "session", "branch", "mode", "image"),
            _default_root(pack), errors)


# ======================================================================== 4. History to Images

@pytest.mark.parametrize("case", ["first-negative", "first-range", "last-range", "last-before-first", "first-text",
                                  "first-float", "last-text", "fit-zoom", "fit-number", "fit-none", "history-none",
                                  "history-text"])
def test_history_to_images_refuses_a_hostile_range_or_fit(pack, nodes, errors, case):
    hist = make_history(3, core(pack, "history").History, size=(24, 32))
    args = {"first-negative": (hist, -1, -1, "pad"), "first-range": (hist, 3, -1, "pad"),
            "last-range": (hist, 0, 3, "pad"), "last-before-first": (hist, 2, 1, "pad"),
            "first-text": (hist, "0", -1, "pad"), "first-float": (hist, 0.5, -1, "pad"),
            "last-text": (hist, 0, "x", "pad"), "fit-zoom": (hist, 0, -1, "zoom"), "fit-number": (hist, 0, -1, 5),
            "fit-none": (hist, 0, -1, None), "history-none": (None, 0, -1, "pad"),
            "history-text": ("h", 0, -1, "pad")}[case]
    refused(lambda: nodes["ReSpecHistoryToImages"].execute(*args).result, ("turn", "fit", "history"), None, errors)


@pytest.mark.parametrize("sizes", [((600, 2), (2, 600)), ((2, 600), (600, 2)), ((1000, 3), (3, 1000)),
                                   ((3, 1000), (1000, 3), (2, 2))], ids=lambda s: " then ".join(f"{w}x{h}" for w, h in s))
@pytest.mark.parametrize("fit", ["crop", "pad", "stretch"])
def test_history_to_images_handles_extreme_aspect_ratios(pack, nodes, sizes, fit):
    History = core(pack, "history").History
    hist = History.start(_picture(0, sizes[0][1], sizes[0][0]))
    for k, (w, h) in enumerate(sizes[1:], 1):
        hist = hist.append(_picture(k, h, w), "resize it")
    with deadline():
        images, log, count = nodes["ReSpecHistoryToImages"].execute(hist, 0, -1, fit).result
    assert tuple(images.shape) == (len(sizes), sizes[0][1], sizes[0][0], 3) and count == len(sizes)
    assert f"({fit})" in log


# ======================================================================== 5. Controller Prompt and Plan from Text

def _prompt_inputs(hist, **over):
    inputs = {"history": hist, "instruction": REQUEST, "restoration_mode": "restoration",
              "skip_non_restoration": False, "max_pixels": 262144, "restoration_template": "(built-in)",
              "midturn_template": "(built-in)"}
    return {**inputs, **over}


@pytest.fixture
def chat(pack):
    return make_history(3, core(pack, "history").History)


@pytest.mark.parametrize("name", list(TEXTS) + ["empty", "blank"])
def test_controller_prompt_refuses_a_hostile_request(pack, nodes, errors, chat, name):
    text = {"empty": "", "blank": " \n\t "}.get(name, TEXTS.get(name))
    refused(lambda: nodes["ReSpecControllerPrompt"].execute(**_prompt_inputs(chat, instruction=text)),
            ("request", "instruction"), None, errors)


@pytest.mark.parametrize("case", ["history-none", "history-dict", "history-text", "mode-maybe", "mode-number",
                                  "mode-list", "pixels-negative", "pixels-text", "pixels-huge", "pixels-bool",
                                  "pixels-float", "template-escape", "template-etc", "template-surrogate",
                                  "template-nul", "template-long", "midturn-escape", "midturn-etc",
                                  "midturn-surrogate", "midturn-nul", "midturn-long"])
def test_controller_prompt_refuses_hostile_settings(pack, nodes, errors, chat, case):
    over = {"history-none": {"history": None}, "history-dict": {"history": {"turns": []}},
            "history-text": {"history": "h"}, "mode-maybe": {"restoration_mode": "maybe"},
            "mode-number": {"restoration_mode": 5}, "mode-list": {"restoration_mode": ["auto"]},
            "pixels-negative": {"max_pixels": -1}, "pixels-text": {"max_pixels": "x"},
            "pixels-huge": {"max_pixels": 2 ** 40}, "pixels-bool": {"max_pixels": True},
            "pixels-float": {"max_pixels": 1.5}}
    for kind in ("template", "midturn"):
        key = "restoration_template" if kind == "template" else "midturn_template"
        over.update({f"{kind}-escape": {key: "../secret.txt"}, f"{kind}-etc": {key: "/etc/hostname"},
                     f"{kind}-surrogate": {key: "t\ud800.txt"}, f"{kind}-nul": {key: "t\x00.txt"},
                     f"{kind}-long": {key: "t" * 5000 + ".txt"}})
    refused(lambda: nodes["ReSpecControllerPrompt"].execute(**_prompt_inputs(chat, **over[case])),
            ("history", "restoration mode", "max_pixels", "template"), None, errors)


CALLS = {"number": 5, "text": "a call", "dict": {"needed": True}, "true": True, "none": None, "list": [],
         "float": 1.5, "plan": "plan"}


@pytest.mark.parametrize("name", list(CALLS))
def test_plan_from_text_asks_nothing_of_what_is_no_controller_call(pack, nodes, name):
    value = CALLS[name] if name != "plan" else core(pack, "plan").Plan(turn=2, user_instruction="x", synthesis_instruction="x")
    with deadline():
        assert nodes["ReSpecPlanFromText"].check_lazy_status(value, None, "request") == []


@pytest.mark.parametrize("name", list(CALLS))
def test_plan_from_text_refuses_what_is_no_controller_call(pack, nodes, errors, name):
    value = CALLS[name] if name != "plan" else core(pack, "plan").Plan(turn=2, user_instruction="x", synthesis_instruction="x")
    refused(lambda: nodes["ReSpecPlanFromText"].execute(value, "{}", "request"), ("controller_call", "Controller Prompt"),
            None, errors)


@pytest.mark.parametrize("value", ["maybe", 5, None, ""])
def test_plan_from_text_refuses_a_hostile_parse_failure_choice(pack, nodes, errors, chat, value):
    call = nodes["ReSpecControllerPrompt"].execute(**_prompt_inputs(chat)).result[2]
    refused(lambda: nodes["ReSpecPlanFromText"].execute(call, "{}", value), ("on_parse_failure",), None, errors)


def test_plan_from_text_refuses_a_missing_answer_on_a_turn_that_needs_one(pack, nodes, errors, chat):
    call = nodes["ReSpecControllerPrompt"].execute(**_prompt_inputs(chat)).result[2]
    refused(lambda: nodes["ReSpecPlanFromText"].execute(call, None, "request"), ("generated_text",), None, errors)


ANSWERS = {
    "emoji-8192": json.dumps({"synthesis_instruction": "\U0001f600" * 8192}), "cjk-6000": json.dumps({"synthesis_instruction": "\u6587" * 6000}),
    "ascii-20000": json.dumps({"synthesis_instruction": "a" * 20000}), "raw-emoji": "\U0001f600" * 9000,
    "surrogate-escape": '{"synthesis_instruction": "add \\ud800 a hat"}', "surrogate-raw": "add a \udfff hat",
    "nul-escape": '{"synthesis_instruction": "add\\u0000 a hat"}', "nul-raw": "add\x00 a hat",
    "deep-100000": _deep(100_000), "deep-object": '{"synthesis_instruction": "x", "reasoning": ' + _deep(5000) + "}",
    "megabyte": "z" * (1 << 20), "huge-ids": '{"synthesis_instruction": "x", "image_ids": [1e400, -1e400, 99999999999999999999]}',
    "number": 5, "empty": "", "fence-open": "```json\n{" * 5000,
}


@pytest.mark.parametrize("name", list(ANSWERS))
@pytest.mark.parametrize("on_parse_failure", ["request", "paper"])
def test_a_hostile_answer_makes_a_plan_history_append_keeps(pack, nodes, chat, name, on_parse_failure):
    call = nodes["ReSpecControllerPrompt"].execute(**_prompt_inputs(chat)).result[2]
    with deadline():
        plan, plan_json, instruction = nodes["ReSpecPlanFromText"].execute(call, ANSWERS[name], on_parse_failure).result
        json.loads(plan_json)
        new, _ = nodes["ReSpecHistoryAppend"].execute(chat, _tensor(_picture(9, 48, 64)), REQUEST,
                                                      sent_instruction=instruction, plan=plan).result
    assert new.current.sent_instruction == instruction and len(instruction.encode("utf-8")) <= 16 * 1024


# ======================================================================== 6. Drift Guard

def _textured(seed: int = 3, size: int = 48) -> np.ndarray:
    from PIL import Image
    return np.asarray(Image.fromarray(_picture(seed, size // 4, size // 4)).resize((size, size), Image.BICUBIC))


def _guard_inputs(**over):
    prev = _textured()
    cur = prev.copy()
    cur[10:30, 12:34] = (230, 20, 20)
    return {"previous": _tensor(prev), "edited": _tensor(cur), "enabled": True, **over}


@pytest.mark.parametrize("name", list(IMAGES))
@pytest.mark.parametrize("which", ["previous", "edited"])
def test_the_drift_guard_refuses_a_hostile_picture_naming_it(pack, nodes, errors, which, name):
    args = _guard_inputs(**{which: _hostile_image(*IMAGES[name])})
    refused(lambda: nodes["ReSpecDriftGuard"].execute(**args).result, (which,), None, errors)


MASKS = {"empty-batch": torch.zeros((0, 48, 48)), "nan": torch.full((1, 48, 48), float("nan")),
         "batch-of-2": torch.zeros((2, 48, 48)), "image-like": torch.zeros((48, 48, 3)),
         "image-batch": torch.zeros((1, 48, 48, 3)), "one-row": torch.zeros((1, 1, 48)),
         "one-column": torch.zeros((48, 1)), "int64": torch.zeros((1, 48, 48), dtype=torch.int64),
         "text": "a mask", "5-d": torch.zeros((1, 1, 1, 48, 48))}


@pytest.mark.parametrize("name", list(MASKS))
def test_the_drift_guard_refuses_a_hostile_mask(pack, nodes, errors, name):
    args = _guard_inputs(mask=MASKS[name])
    refused(lambda: nodes["ReSpecDriftGuard"].execute(**args).result, ("mask",), None, errors)


@pytest.mark.parametrize("case", ["instruction-surrogate", "instruction-nul", "instruction-megabyte",
                                  "instruction-number", "instruction-list", "plan-text", "plan-dict", "plan-number"])
def test_the_drift_guard_refuses_a_hostile_request_or_plan(pack, nodes, errors, case):
    over = {"instruction-surrogate": {"instruction": "\ud800"}, "instruction-nul": {"instruction": "a\x00"},
            "instruction-megabyte": {"instruction": "m" * (1 << 20)}, "instruction-number": {"instruction": 5},
            "instruction-list": {"instruction": ["x"]}, "plan-text": {"plan": "plan"}, "plan-dict": {"plan": {}},
            "plan-number": {"plan": 5}}[case]
    args = _guard_inputs(**over)
    refused(lambda: nodes["ReSpecDriftGuard"].execute(**args).result, ("instruction", "plan"), None, errors)


@pytest.mark.parametrize("size", [(40, 48), (64, 80), (48, 2), (2, 48)], ids=lambda s: f"{s[1]}x{s[0]}")
@pytest.mark.parametrize("request_text", ["", "make it night"])
def test_the_drift_guard_outputs_match_the_image_it_returns(pack, nodes, size, request_text):
    from PIL import Image
    edited = np.asarray(Image.fromarray(_textured()).resize((size[1], size[0])))
    with deadline():
        image, mask, report, value = nodes["ReSpecDriftGuard"].execute(
            _tensor(_textured()), _tensor(edited), True, instruction=request_text).result
    assert tuple(mask.shape[1:]) == tuple(image.shape[1:3])
    json.loads(report.split("\n", 1)[1])


@pytest.mark.parametrize("layout", ["H,W", "1,H,W", "H,W,1", "1,H,W,1"])
def test_the_drift_guard_uses_a_mask_in_every_known_layout(pack, nodes, layout):
    m = np.zeros((48, 48), np.float32)
    m[8:40, 8:40] = 1.0
    shaped = {"H,W": m, "1,H,W": m[None], "H,W,1": m[..., None], "1,H,W,1": m[None, ..., None]}[layout]
    with deadline():
        _, _, report, _ = nodes["ReSpecDriftGuard"].execute(**_guard_inputs(mask=torch.from_numpy(shaped))).result
    rec = json.loads(report.split("\n", 1)[1])
    assert rec.get("region_from") == "the user's mask" or rec.get("applied") is False


# ======================================================================== 7. Reveal Composite and the alignment

@pytest.mark.parametrize("name", list(IMAGES))
def test_reveal_composite_refuses_a_hostile_picture(pack, nodes, errors, chat, name):
    image = _hostile_image(*IMAGES[name])
    refused(lambda: nodes["ReSpecRevealComposite"].execute(chat, image, REQUEST, True, "restoration"),
            ("image",), None, errors)


@pytest.mark.parametrize("case", ["history-none", "history-text", "history-dict", "instruction-surrogate",
                                  "instruction-megabyte", "instruction-number", "mode-maybe", "mode-number",
                                  "plan-text"])
def test_reveal_composite_refuses_hostile_inputs(pack, nodes, errors, chat, case):
    args = {"history": chat, "image": _tensor(_picture(4, 48, 64)), "instruction": REQUEST, "enabled": True,
            "restoration_mode": "restoration"}
    args.update({"history-none": {"history": None}, "history-text": {"history": "h"},
                 "history-dict": {"history": {}}, "instruction-surrogate": {"instruction": "remove \ud800"},
                 "instruction-megabyte": {"instruction": "m" * (1 << 20)}, "instruction-number": {"instruction": 5},
                 "mode-maybe": {"restoration_mode": "maybe"}, "mode-number": {"restoration_mode": 5},
                 "plan-text": {"plan": "plan"}}[case])
    refused(lambda: nodes["ReSpecRevealComposite"].execute(**args),
            ("history", "instruction", "request", "restoration mode", "plan"), None, errors)


ALIGN = {"one-row": ((1, 64), (1, 64)), "one-column": ((64, 1), (64, 1)), "one-pixel": ((1, 1), (1, 1)),
         "empty": ((0, 0), (0, 0)), "mismatch": ((32, 32), (32, 40)), "nan": "nan", "inf": "inf"}


@pytest.mark.parametrize("name", list(ALIGN))
def test_estimate_alignment_refuses_what_it_cannot_align(pack, errors, name):
    align = core(pack, "pixels.alignment").estimate_alignment
    if ALIGN[name] in ("nan", "inf"):
        a = np.random.default_rng(0).random((32, 32, 3)).astype(np.float32)
        b = a.copy()
        b[3, 3, 0] = float(ALIGN[name])
    else:
        (h0, w0), (h1, w1) = ALIGN[name]
        a, b = _picture(0, h0, w0) if h0 else np.zeros((0, 0, 3), np.uint8), _picture(1, h1, w1) if h1 else np.zeros((0, 0, 3), np.uint8)
    refused(lambda: align(a, b), ("I_t", "I_(t-1)", "alignment"), None, errors)


# ======================================================================== 8. the session store's text

@pytest.fixture
def store(pack, tmp_path):
    s = core(pack, "store").SessionStore(tmp_path / "store")
    s.create("s", _picture(0))
    s.append("s", _picture(1), "add a hat")
    return s


def _deep_dict(depth: int) -> dict:
    out: dict = {}
    node = out
    for _ in range(depth):
        node["a"] = {}
        node = node["a"]
    return out


STORE_META = {"deep-33": _deep_dict(33), "deep-600": _deep_dict(600), "deep-900": _deep_dict(900),
              "deep-5000": _deep_dict(5000), "surrogate-key": {"\ud800": 1}, "surrogate-value": {"k": ["\udfff"]},
              "a-set": {"k": {1, 2}}, "an-object": {"k": object()}, "300-kb": {"x": "a" * (300 * 1024)},
              "list": [1, 2], "text": "meta", "number-key": {1: {2: "\ud800"}}}


@pytest.mark.parametrize("name", list(STORE_META))
@pytest.mark.parametrize("call", ["append", "create"])
def test_the_store_refuses_a_hostile_meta_and_keeps_nothing(pack, errors, store, call, name):
    meta = STORE_META[name]
    run = (lambda: store.append("s", _picture(5), "add a scarf", meta=meta)) if call == "append" else \
        (lambda: store.create("t", _picture(5), meta=meta))
    refused(run, ("meta",), store.root, errors)


# (The store does not cap a turn's text itself: History Append and the controller do, at 16 KiB.)
@pytest.mark.parametrize("name", [n for n, v in TEXTS.items() if isinstance(v, str) and len(v) < 1000])
@pytest.mark.parametrize("field", ["instruction", "sent_instruction"])
def test_the_store_refuses_a_hostile_text_and_keeps_nothing(pack, errors, store, field, name):
    kw = {"instruction": "add a scarf", field: TEXTS[name]}
    refused(lambda: store.append("s", _picture(5), **kw), ("instruction",), store.root, errors)


@pytest.mark.parametrize("case", ["rewind-text", "rewind-float", "rewind-bool", "rewind-negative", "rewind-range",
                                  "branch-same", "branch-dots", "branch-surrogate", "branch-taken", "branch-range",
                                  "append-missing-image", "append-plan-dict", "append-masks-list", "append-key-long",
                                  "create-taken-other-image"])
def test_the_store_refuses_hostile_calls_and_keeps_nothing(pack, errors, store, case):
    store.branch("s", "taken", 0)
    calls = {"rewind-text": lambda: store.rewind("s", "1"), "rewind-float": lambda: store.rewind("s", 1.5),
             "rewind-bool": lambda: store.rewind("s", True), "rewind-negative": lambda: store.rewind("s", -1),
             "rewind-range": lambda: store.rewind("s", 9), "branch-same": lambda: store.branch("s", "s", 0),
             "branch-dots": lambda: store.branch("s", "../b", 0), "branch-surrogate": lambda: store.branch("s", "\ud800", 0),
             "branch-taken": lambda: store.branch("s", "taken", 1), "branch-range": lambda: store.branch("s", "b", 9),
             "append-missing-image": lambda: store.append("s", None, "add a scarf"),
             "append-plan-dict": lambda: store.append("s", _picture(5), "x", plan={"turn": 2}),
             "append-masks-list": lambda: store.append("s", _picture(5), "x", masks=[1]),
             "append-key-long": lambda: store.append("s", _picture(5), "x", idempotency_key="k" * 300),
             "create-taken-other-image": lambda: store.create("s", _picture(9), exist_ok=True)}
    refused(calls[case], ("turn", "session", "branch", "image", "plan", "masks", "idempotency_key", "id"),
            store.root, errors)


@pytest.mark.parametrize("name", ["surrogate", "nul", "megabyte", "escape", "etc", "images"])
def test_workflow_store_roots_are_refused_clearly(pack, errors, name):
    value = {"surrogate": "a\udfff", "nul": "a\x00", "megabyte": "q" * (1 << 20), "escape": "../..", "etc": "/etc",
             "images": "images/x"}[name]
    refused(lambda: core(pack, "store").workflow_store_root(value), ("store_dir", "store folder"), None, errors)
