"""The panel's HTTP API (/respec/...) through the real aiohttp adapter, with hostile parameters.

A real aiohttp server on 127.0.0.1 serves a real RouteTableDef filled by nodes/routes.add_routes
(the stand-in for PromptServer.instance.routes) over a real SessionStore in a temporary folder.
Requests are written byte for byte on a socket, so no client library normalises `..` or
percent-escapes before the server sees them.
"""
from __future__ import annotations

import asyncio
import hashlib
import importlib
import io
import json

import numpy as np
import pytest
from PIL import Image

from conftest import core
from raw_http import Server

SECRET = b"TOP-SECRET-OUTSIDE-THE-STORE"


def _img(seed: int, w: int = 96, h: int = 64) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


@pytest.fixture(scope="module")
def env(pack, tmp_path_factory):
    """One store and server for the module (the store's images are written once): session 'demo'
    (turns 0..3, a plan on turn 3), session 'other' (one image of its own), secret files beside
    and inside the store. Tests that rewind work on their own branch of 'demo' (see `branch`)."""
    from aiohttp import web as aioweb
    tmp_path = tmp_path_factory.mktemp("web")
    store_mod, plan_mod = core(pack, "store"), core(pack, "plan")
    routes = importlib.import_module(f"{pack.__name__}.nodes.routes")
    store = store_mod.SessionStore(tmp_path / "store")
    store.create("demo", _img(0, 640, 400))
    umbrella = np.zeros((400, 640), bool)
    umbrella[100:300, 200:400] = True
    store.append("demo", _img(1, 640, 400), "add a red umbrella",
                 masks={"change": core(pack, "history").TurnMask.from_mask(umbrella, {"method": "test"})})
    store.append("demo", _img(2, 640, 400), "make it night")
    plan = plan_mod.Plan(turn=3, user_instruction="remove the umbrella",
                         synthesis_instruction="Remove the umbrella; restore the bench from image 0",
                         is_restoration=True, preservation_target="the bench", restoration_source_id=0,
                         identity_anchor_id=2, restoration_region="left half", image_ids=(0, 2))
    store.append("demo", _img(3, 640, 400), "remove the umbrella",
                 sent_instruction=plan.synthesis_instruction, plan=plan)
    store.create("other", _img(9))
    (tmp_path / "secret.txt").write_bytes(SECRET)
    (tmp_path / "store" / "secret.png").write_bytes(SECRET)
    table = aioweb.RouteTableDef()
    routes.add_routes(table, open_store=lambda root=None: store if root is None else store_mod.open_store(root))
    server = Server(table)
    yield {"server": server, "store": store, "web": core(pack, "web"), "tmp": tmp_path}
    server.close()


@pytest.fixture()
def branch(env, request):
    """A fresh copy of 'demo' (4 turns) for a test that rewinds; image files are shared."""
    sid = "rw-" + hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:16]
    env["store"].branch("demo", sid)
    return sid


def _digest(store, sid: str, k: int) -> str:
    return store.load(sid).turns[k].image.digest


def _png_size(body: bytes) -> tuple[int, int]:
    return Image.open(io.BytesIO(body)).size


# ------------------------------------------------------------------------------ what is served

def test_sessions_are_listed_newest_first(env):
    status, headers, body = env["server"].get("/respec/sessions")
    assert status == 200 and headers["content-type"].startswith("application/json")
    sessions = json.loads(body)["sessions"]
    ids = [s["session_id"] for s in sessions]
    assert ids.index("other") < ids.index("demo")
    assert [s["updated"] for s in sessions] == sorted((s["updated"] for s in sessions), reverse=True)


def test_session_turns_carry_both_instructions_and_the_latest_plan(env):
    status, _, body = env["server"].get("/respec/sessions/demo")
    data = json.loads(body)
    assert status == 200 and data["session_id"] == "demo" and len(data["turns"]) == 4
    last = data["turns"][3]
    assert last["instruction"] == "remove the umbrella"
    assert last["sent_instruction"].startswith("Remove the umbrella; restore the bench")
    assert data["latest_plan"]["restoration_source_id"] == 0
    assert data["latest_plan"]["identity_anchor_id"] == 2
    assert data["latest_plan"]["applied_turn"] == 3
    assert last["image"] == _digest(env["store"], "demo", 3)


def test_turn_image_is_a_png_no_larger_than_512(env):
    status, headers, body = env["server"].get("/respec/sessions/demo/turns/0/image")
    assert status == 200 and headers["content-type"] == "image/png"
    assert _png_size(body) == (512, 320)   # 640x400 fitted into 512x512, aspect kept


def test_thumbnail_fits_the_requested_box(env):
    status, _, body = env["server"].get("/respec/sessions/demo/turns/1/image?w=100&h=100")
    assert status == 200 and _png_size(body) == (100, 62)


def test_image_by_digest_is_served_for_its_own_session(env):
    d = _digest(env["store"], "demo", 2)
    status, headers, body = env["server"].get(f"/respec/sessions/demo/images/{d}?w=64&h=64")
    assert status == 200 and _png_size(body) == (64, 40)
    assert "immutable" in headers["cache-control"]


def test_a_turns_change_mask_is_listed_and_served_as_a_session_image(env):
    data = json.loads(env["server"].get("/respec/sessions/demo")[2])
    assert data["turns"][0]["masks"] == {} and data["turns"][2]["masks"] == {}
    change = data["turns"][1]["masks"]["change"]
    assert change["size"] == [640, 400] and change["info"] == {"method": "test"}
    status, _, body = env["server"].get(f"/respec/sessions/demo/images/{change['image']}?w=64&h=64")
    mask = np.asarray(Image.open(io.BytesIO(body)))
    assert status == 200 and mask.shape == (40, 64)
    assert mask[20, 32] == 255 and mask[2, 2] == 0          # inside / outside the umbrella
    status, _, _ = env["server"].get(f"/respec/sessions/other/images/{change['image']}")
    assert status == 404                                     # not a mask of that session


def test_small_images_are_never_enlarged(env):
    d = _digest(env["store"], "other", 0)
    status, _, body = env["server"].get(f"/respec/sessions/other/images/{d}?w=512&h=512")
    assert status == 200 and _png_size(body) == (96, 64)


# ------------------------------------------------------------------------------ hostile parameters

@pytest.mark.parametrize("sid", ["..", "%2e%2e", "%2E%2E", "..%2f..%2fsecret.txt", "%2Fetc%2Fpasswd",
                                 "a" * 65, "demo.png", "de%00mo", "s%C3%A9ance", "demo%20", "%20demo"])
def test_bad_session_ids_are_refused_with_400(env, sid):
    for target in (f"/respec/sessions/{sid}", f"/respec/sessions/{sid}/turns/0/image"):
        status, _, body = env["server"].get(target)
        assert status in (400, 404), (target, status)
        assert SECRET not in body
        if status == 400:
            assert "session id" in json.loads(body)["error"]


@pytest.mark.parametrize("target", [
    "/respec/sessions/../secret.txt", "/respec/sessions/demo/../../secret.txt",
    "/respec/sessions/demo/images/../secret.png", "/respec/sessions/demo/images/..%2fsecret.png",
    "/respec/sessions/demo/images/%2e%2e%2fsecret.png", "/respec/../../secret.txt",
    "/respec/sessions//tmp/secret.txt", "/respec/masks/..%2f..%2fsecret.txt",
    "/respec/sessions/demo/images/../../sessions.sqlite3"])
def test_path_traversal_serves_nothing_outside_the_store(env, target):
    status, _, body = env["server"].get(target)
    assert status in (400, 404)
    assert SECRET not in body


def test_absolute_path_as_digest_is_refused(env):
    target = "/respec/sessions/demo/images/" + str(env["tmp"] / "secret.txt").replace("/", "%2F")
    status, _, body = env["server"].get(target)
    assert status == 400 and SECRET not in body


def test_unknown_session_is_404(env):
    for target in ("/respec/sessions/nobody", "/respec/sessions/nobody/turns/0/image",
                   "/respec/sessions/nobody/images/" + "a" * 64):
        status, _, body = env["server"].get(target)
        assert status == 404, target
        assert str(env["tmp"]) not in body.decode()   # no server path in the message


@pytest.mark.parametrize("turn", ["-1", "1.5", "0x1", "1e3", "%2d1", "%201", "one", "99999999999"])
def test_bad_turn_numbers_are_refused_with_400(env, turn):
    status, _, _ = env["server"].get(f"/respec/sessions/demo/turns/{turn}/image")
    assert status == 400


def test_turn_past_the_end_is_404(env):
    status, _, _ = env["server"].get("/respec/sessions/demo/turns/4/image")
    assert status == 404


@pytest.mark.parametrize("digest", ["z" * 64, "A" * 64, "a" * 63, "a" * 65, "g" + "0" * 63,
                                    "..%2f..%2fsessions.sqlite3", "%2e%2e%2fsessions.sqlite3"])
def test_non_hex_digests_are_refused_with_400(env, digest):
    status, _, body = env["server"].get(f"/respec/sessions/demo/images/{digest}")
    assert status == 400 and b"SQLite" not in body


def test_digest_of_another_sessions_image_is_404(env):
    other = _digest(env["store"], "other", 0)
    status, _, _ = env["server"].get(f"/respec/sessions/demo/images/{other}")
    assert status == 404


def test_huge_sizes_are_clamped_to_512(env):
    big = "9" * 400
    status, _, body = env["server"].get(f"/respec/sessions/demo/turns/0/image?w={big}&h=100000000")
    assert status == 200 and max(_png_size(body)) == 512


def test_tiny_sizes_are_clamped_to_16(env):
    status, _, body = env["server"].get("/respec/sessions/demo/turns/0/image?w=0&h=0")
    assert status == 200 and max(_png_size(body)) == 16


@pytest.mark.parametrize("w", ["-5", "abc", "1.5", "%2d5", "%EF%BC%95"])  # last: full-width digit 5
def test_non_numeric_sizes_are_refused_with_400(env, w):
    status, _, _ = env["server"].get(f"/respec/sessions/demo/turns/0/image?w={w}")
    assert status == 400


# ------------------------------------------------------------------------------ rewind (the one write)

def test_rewind_keeps_turns_up_to_k_and_tells_the_panels(env, pack, branch):
    comfy = core(pack, "comfy")
    seen = []
    remove = comfy.add_listener(lambda name, data: seen.append((name, data)))
    try:
        status, _, body = env["server"].request("POST", f"/respec/sessions/{branch}/rewind", b'{"turn": 1}')
    finally:
        remove()
    assert status == 200 and len(json.loads(body)["turns"]) == 2
    assert len(env["store"].load(branch).turns) == 2
    assert [n for n, _ in seen] == ["respec.history"]
    assert seen[0][1]["session_id"] == branch and len(seen[0][1]["turns"]) == 2


@pytest.mark.parametrize("payload", [b'{"turn": -1}', b'{"turn": 1.5}', b'{"turn": true}', b'{"turn": "x"}',
                                     b'{"turn": "-1"}', b'{"turn": null}', b'{}', b'[1]', b'not json',
                                     b'{"turn": 99}', b'{"turn": 1e400}', b'{"turn": "1"}', b'{"turn": 1.0}',
                                     b'{"turn": [1]}'])
def test_rewind_refuses_bad_turns_and_changes_nothing(env, branch, payload):
    status, _, _ = env["server"].request("POST", f"/respec/sessions/{branch}/rewind", payload)
    assert status == 400
    assert len(env["store"].load(branch).turns) == 4


def test_rewind_refuses_oversized_bodies(env, branch):
    payload = b'{"turn": 1, "pad": "' + b"x" * 5000 + b'"}'
    status, _, _ = env["server"].request("POST", f"/respec/sessions/{branch}/rewind", payload)
    assert status == 400 and len(env["store"].load(branch).turns) == 4


def test_rewind_needs_a_json_content_type(env, branch):
    status, _, _ = env["server"].request("POST", f"/respec/sessions/{branch}/rewind", b'{"turn": 1}',
                                         content_type="text/plain")
    assert status == 415 and len(env["store"].load(branch).turns) == 4


def test_rewind_of_unknown_or_bad_session_changes_nothing(env):
    status, _, _ = env["server"].request("POST", "/respec/sessions/nobody/rewind", b'{"turn": 0}')
    assert status == 404
    for sid in ("..", "%2e%2e", "a" * 65, "demo%2f..%2fdemo"):
        status, _, _ = env["server"].request("POST", f"/respec/sessions/{sid}/rewind", b'{"turn": 0}')
        assert status in (400, 404), sid
    assert len(env["store"].load("demo").turns) == 4


def test_read_routes_do_not_accept_writes(env):
    for target in ("/respec/sessions", "/respec/sessions/demo", "/respec/sessions/demo/turns/0/image"):
        status, _, _ = env["server"].request("POST", target, b'{"turn": 0}')
        assert status == 405


# ------------------------------------------------------------------------------ scores and region masks

def test_published_region_masks_are_served_and_bounded(env):
    web = env["web"]
    mask = np.zeros((1000, 800), dtype=bool)
    mask[100:300, 200:600] = True
    regions = web.publish_region_masks({"R_restore": mask})
    info = regions["R_restore"]
    assert (info["width"], info["height"]) == (800, 1000)
    status, headers, body = env["server"].get(info["url"])
    assert status == 200 and headers["content-type"] == "image/png"
    im = Image.open(io.BytesIO(body))
    assert im.size == (410, 512) and im.mode == "L"
    arr = np.asarray(im)
    assert arr[100, 200] == 255 and arr[0, 0] == 0


def test_unknown_mask_is_404(env):
    status, _, _ = env["server"].get("/respec/masks/" + "0" * 64)
    assert status == 404


def test_latest_scores_are_kept_per_session_with_nan_as_null(env):
    web = env["web"]
    web.remember_event("respec.scores", {"session_id": "demo", "S_restore": float("nan"),
                                          "S_preserve": 0.75, "S_TC": float("nan")})
    status, _, body = env["server"].get("/respec/sessions/demo")
    scores = json.loads(body)["scores"]     # strict JSON: json.loads would accept NaN, so check text
    assert status == 200 and b"NaN" not in body
    assert scores["S_restore"] is None and scores["S_preserve"] == 0.75
    status, _, body = env["server"].get("/respec/scores/latest")
    assert json.loads(body)["scores"]["S_preserve"] == 0.75


def test_reading_an_absent_store_creates_nothing(pack, tmp_path):
    web, store_mod = core(pack, "web"), core(pack, "store")
    store = store_mod.SessionStore(tmp_path / "never")
    resp = web.list_sessions(lambda root=None: store)
    assert resp.status == 200 and resp.json() == {"sessions": []}
    assert web.get_session(store, "demo").status == 404
    assert not (tmp_path / "never").exists()


# ------------------------------------------------------------------------------ other stores

def test_another_store_is_readable_only_once_a_history_node_announced_it(env, pack):
    store_mod, web = core(pack, "store"), env["web"]
    root = env["tmp"] / "far-store"
    store_mod.SessionStore(root).create("far", _img(5))
    query = "?store=" + str(root.resolve()).replace("/", "%2F")
    status, _, _ = env["server"].get("/respec/sessions/far" + query)
    assert status == 400
    assert "far" not in [s["session_id"] for s in json.loads(env["server"].get("/respec/sessions")[2])["sessions"]]
    web.remember_event("respec.history", {"session_id": "far", "store": str(root)})
    status, _, body = env["server"].get("/respec/sessions/far" + query)
    assert status == 200 and json.loads(body)["session_id"] == "far"
    listed = {s["session_id"]: s["store"] for s in json.loads(env["server"].get("/respec/sessions")[2])["sessions"]}
    assert listed["far"] == str(root.resolve()) and listed["demo"] == str(env["store"].root)


@pytest.mark.parametrize("store", ["%2Fetc", "..", "%2E%2E%2Fstore", "relative", "x" * 5000])
def test_unknown_store_paths_are_refused(env, store):
    status, _, _ = env["server"].get(f"/respec/sessions/demo?store={store}")
    assert status in (400, 414)   # 414/400: aiohttp refuses request lines over 8 KB itself


def test_the_default_store_may_be_named_explicitly(env):
    query = "?store=" + str(env["store"].root).replace("/", "%2F")
    status, _, _ = env["server"].get("/respec/sessions/demo" + query)
    assert status == 200


def test_a_judge_score_is_added_to_the_occur_scores(env):
    web = env["web"]
    web.remember_event("respec.scores", {"session_id": "judge-demo", "S_restore": 0.5, "S_preserve": 0.7, "S_TC": 0.6})
    web.remember_event("respec.judge", {"node": "5", "S_IF": 2 / 3, "score": 2, "session_id": "judge-demo"})
    got = web.latest_scores("judge-demo")
    assert got["S_TC"] == 0.6 and got["S_IF"] == pytest.approx(2 / 3)
    web.remember_event("respec.scores", {"session_id": "judge-demo", "S_restore": 0.1, "S_preserve": 0.2, "S_TC": 0.15})
    assert web.latest_scores("judge-demo")["S_TC"] == 0.15 and "S_IF" in web.latest_scores("judge-demo")


# ------------------------------------------------------------------------------ damaged store files

@pytest.fixture()
def damaged(tmp_path):
    """A store (own images, nothing cached) with session 's' of 3 turns; the test damages a file."""
    from respec.store import SessionStore
    store = SessionStore(tmp_path / "store")
    seed = int.from_bytes(hashlib.sha256(str(tmp_path).encode()).digest()[:4], "little")
    store.create("s", _img(seed))
    store.append("s", _img(seed + 1), "add a hat")
    store.append("s", _img(seed + 2), "remove the hat")
    return store


def _serve_both(store, k: int):
    from respec import web
    digest = store.load("s").turns[k].image.digest
    return web.turn_image(store, "s", str(k)), web.session_image(store, "s", digest), digest


def test_a_truncated_png_is_a_json_error_naming_the_turn(damaged):
    path = damaged.files.path(damaged.load("s").turns[1].image.digest)
    path.write_bytes(path.read_bytes()[:60])
    for resp in _serve_both(damaged, 1)[:2]:
        assert resp.status == 500 and resp.content_type == "application/json"
        err = resp.json()["error"]
        assert "turn 1" in err and "damaged" in err and str(damaged.root) not in err


def test_a_png_replaced_by_another_valid_png_is_not_served(damaged):
    hist = damaged.load("s")
    target = damaged.files.path(hist.turns[2].image.digest)
    Image.fromarray(_img(4242)).save(target, format="PNG")       # a valid PNG, the wrong picture
    for resp in _serve_both(damaged, 2)[:2]:
        assert resp.status == 500 and "turn 2" in resp.json()["error"]
        assert "replaced" in resp.json()["error"]


def test_a_symlink_leaving_the_store_is_refused(damaged, tmp_path):
    hist = damaged.load("s")
    inside = damaged.files.path(hist.turns[1].image.digest)
    outside = tmp_path / "outside.png"
    outside.write_bytes(inside.read_bytes())                     # even the right picture
    inside.unlink()
    inside.symlink_to(outside)
    for resp in _serve_both(damaged, 1)[:2]:
        assert resp.status == 500 and "turn 1" in resp.json()["error"]
        assert "outside the store" in resp.json()["error"]
    with pytest.raises(core_errors().StoreError, match="outside the store"):
        damaged.files.get(hist.turns[1].image.digest)


def test_intact_images_are_still_served_and_verified_once(damaged, monkeypatch):
    from respec import web
    calls = []
    real = damaged.files.get
    monkeypatch.setattr(damaged.files, "get", lambda d: calls.append(d) or real(d))
    a, b, digest = _serve_both(damaged, 0)
    assert a.status == b.status == 200 and a.content_type == "image/png"
    web.turn_image(damaged, "s", "0")
    assert calls == [digest]            # decoded and hash-checked once, then served from the cache


def core_errors():
    from respec import errors
    return errors


@pytest.mark.parametrize("store", ["%2Fetc", "..", "relative", "%2Ftmp"])
def test_the_session_list_refuses_an_unknown_store_like_the_other_routes(env, store):
    status, _, body = env["server"].get(f"/respec/sessions?store={store}")
    assert status == 400 and "unknown session store" in json.loads(body)["error"]


def test_the_session_list_of_a_named_store_lists_only_that_store(env):
    query = "?store=" + str(env["store"].root).replace("/", "%2F")
    status, _, body = env["server"].get("/respec/sessions" + query)
    listed = json.loads(body)["sessions"]
    assert status == 200 and listed and {s["store"] for s in listed} == {str(env["store"].root)}


# ------------------------------------------------------------------------------ branch (the panel's)

def test_branch_makes_a_new_session_of_turns_up_to_k_and_tells_the_panels(env, pack, branch):
    comfy = core(pack, "comfy")
    seen = []
    remove = comfy.add_listener(lambda name, data: seen.append((name, data)))
    try:
        status, _, body = env["server"].request("POST", f"/respec/sessions/{branch}/branch", b'{"turn": 1}')
        again, _, body2 = env["server"].request("POST", f"/respec/sessions/{branch}/branch", b'{"turn": 1}')
    finally:
        remove()
    made = json.loads(body)
    assert status == 200 and made["session_id"] == f"{branch}-b1" and len(made["turns"]) == 2
    assert again == 200 and json.loads(body2)["session_id"] == f"{branch}-b1-2"   # a second branch, new id
    assert len(env["store"].load(branch).turns) == 4                              # the source is unchanged
    assert [t.image.digest for t in env["store"].load(made["session_id"]).turns] == \
        [_digest(env["store"], branch, k) for k in (0, 1)]
    assert [n for n, _ in seen] == ["respec.history"] * 2 and seen[0][1]["action"] == "branch"


def test_branch_takes_a_chosen_id_and_refuses_an_existing_one(env, branch):
    body = json.dumps({"turn": 2, "new_session_id": f"{branch}-mine"}).encode()
    status, _, out = env["server"].request("POST", f"/respec/sessions/{branch}/branch", body)
    assert status == 200 and json.loads(out)["session_id"] == f"{branch}-mine"
    status, _, out = env["server"].request("POST", f"/respec/sessions/{branch}/branch", body)
    assert status == 400 and "already exists" in json.loads(out)["error"]


@pytest.mark.parametrize("payload", [b'{"turn": -1}', b'{"turn": true}', b'{"turn": "1"}', b'{}', b'[1]',
                                     b'not json', b'{"turn": 99}', b'{"turn": 1, "new_session_id": "../x"}'])
def test_branch_refuses_bad_bodies_and_makes_nothing(env, branch, payload):
    before = len(env["store"].list_sessions())
    status, _, _ = env["server"].request("POST", f"/respec/sessions/{branch}/branch", payload)
    assert status == 400 and len(env["store"].list_sessions()) == before


def test_branch_needs_json_and_an_existing_session(env, branch):
    status, _, _ = env["server"].request("POST", f"/respec/sessions/{branch}/branch", b'{"turn": 1}',
                                         content_type="text/plain")
    assert status == 415
    status, _, _ = env["server"].request("POST", "/respec/sessions/nobody/branch", b'{"turn": 0}')
    assert status == 404


# ------------------------------------------------------------------------------ clean-up (gc)

def _orphaned(store, n: int, age_s: float = 7200.0) -> list:
    """Session 'g' of n + 1 turns rewound to turn 0: n image files no turn uses, last changed age_s ago."""
    import os
    import time
    store.create("g", _img(100))
    for i in range(1, n + 1):
        store.append("g", _img(100 + i), f"edit {i}")
    store.rewind("g", 0)
    paths = [store.files.path(store.files.put(_img(100 + i)).digest) for i in range(1, n + 1)]
    for p in paths:
        os.utime(p, (time.time() - age_s,) * 2)
    return paths


def test_gc_removes_only_unused_images_older_than_an_hour_and_says_how_much(pack, tmp_path):
    web, store = core(pack, "web"), core(pack, "store").SessionStore(tmp_path / "store")
    old = _orphaned(store, 2)
    young = store.files.path(store.files.put(_img(7)).digest)       # unused, but just written
    dry = web.collect_garbage(store, b'{"dry_run": true}')
    assert dry.status == 200 and dry.json()["removed"] == 2 and all(p.exists() for p in old)
    resp = web.collect_garbage(store, b"{}")
    body = resp.json()
    assert resp.status == 200 and body["removed"] == 2 and body["dry_run"] is False and body["more"] is False
    assert sorted(body["files"]) == sorted(p.name for p in old) and not any(p.exists() for p in old)
    assert body["bytes"] == dry.json()["bytes"] > 0 and body["min_age_s"] == web.GC_MIN_AGE_S == 3600
    assert young.exists() and len(core(pack, "store").SessionStore(store.root).load("g")) == 1


def test_gc_is_bounded_per_request_and_one_at_a_time(pack, tmp_path, monkeypatch):
    web, store = core(pack, "web"), core(pack, "store").SessionStore(tmp_path / "store")
    old = _orphaned(store, 3)
    monkeypatch.setattr(web, "MAX_GC_FILES", 2)
    first = web.collect_garbage(store, b"{}").json()
    assert first["removed"] == 2 and first["more"] is True and sum(p.exists() for p in old) == 1
    with web.PANEL.gc_lock:                                          # another clean-up is running
        busy = web.collect_garbage(store, b"{}")
    assert busy.status == 409 and "already running" in busy.json()["error"] and sum(p.exists() for p in old) == 1
    second = web.collect_garbage(store, b"{}").json()
    assert second["removed"] == 1 and second["more"] is False and not any(p.exists() for p in old)


@pytest.mark.parametrize("payload", [b"", b"[1]", b'{"dry_run": "yes"}', b'{"dry_run": 1}', b'{"min_age_s": 0}',
                                     b'{"path": "/etc"}', b'{"dry_run": false, "limit": 1e9}', b"{" * 2000])
def test_gc_reads_nothing_but_dry_run_from_the_request(pack, tmp_path, payload):
    web, store = core(pack, "web"), core(pack, "store").SessionStore(tmp_path / "store")
    old = _orphaned(store, 1)
    resp = web.collect_garbage(store, payload)
    assert resp.status == 400 and old[0].exists()


def test_gc_of_an_absent_store_creates_nothing(pack, tmp_path):
    web, store = core(pack, "web"), core(pack, "store").SessionStore(tmp_path / "never")
    resp = web.collect_garbage(store, b"{}")
    assert resp.status == 200 and resp.json()["removed"] == 0 and not (tmp_path / "never").exists()


def test_the_gc_route_needs_json_and_a_known_store(env):
    status, _, _ = env["server"].request("POST", "/respec/sessions/gc", b"{}", content_type="text/plain")
    assert status == 415
    status, _, _ = env["server"].request("POST", "/respec/sessions/gc?store=%2Fetc", b"{}")
    assert status == 400
    status, _, body = env["server"].request("POST", "/respec/sessions/gc", b'{"dry_run": true}')
    got = json.loads(body)
    assert status == 200 and got["dry_run"] is True and got["store"] == str(env["store"].root)
    assert {"removed", "bytes", "files", "more", "min_age_s"} <= set(got)
    assert len(env["store"].load("demo")) == 4


def test_comfyuis_free_request_releases_the_packs_models(pack):
    """ComfyUI's POST /free (unload_models or free_memory) lets go of the pack's models too."""
    routes = importlib.import_module(f"{pack.__name__}.nodes.routes")
    released = []
    remove = core(pack, "comfy").on_free(lambda: released.append(True))
    app = type("App", (), {"middlewares": []})()
    assert routes.listen_to_free(app)
    middleware = app.middlewares[0]

    class Request:
        def __init__(self, path, body):
            self.method, self.path, self._body = "POST", path, body

        async def json(self):
            return self._body

    async def ok(request):
        return type("Resp", (), {"status": 200})()

    try:
        asyncio.run(middleware(Request("/api/free", {"free_memory": False}), ok))
        assert released == []
        asyncio.run(middleware(Request("/free", {"unload_models": True, "free_memory": True}), ok))
        assert released == [True]
    finally:
        remove()


def test_the_panel_state_passed_in_keeps_its_own_scores_stores_and_masks(pack, tmp_path):
    web = core(pack, "web")
    panel, other = web.PanelState(), web.PanelState()
    web.remember_event("respec.scores", {"session_id": "mine", "S_TC": 0.5}, panel)
    web.remember_event("respec.history", {"session_id": "mine", "store": str(tmp_path)}, panel)
    regions = web.publish_region_masks({"R_restore": np.ones((8, 8), bool)}, panel)
    assert web.latest_scores("mine", panel)["S_TC"] == 0.5 and web.latest_scores("mine", other) is None
    assert web.known_store_roots(panel) == [str(tmp_path.resolve())] and web.known_store_roots(other) == []
    digest = regions["R_restore"]["digest"]
    assert web.mask_image(digest, panel).status == 200 and web.mask_image(digest, other).status == 404
