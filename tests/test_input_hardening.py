"""Issue 34's sixteen causes, one rule each: the chat routes, the TextGenerate nodes, History
Append / History to Images, the Drift Guard and the store's text refuse hostile input at the one
place its rule lives, with a short message that names the input, and leave nothing behind.

(The ~500 hostile cases that found them are tests/test_hostile_chat.py; the big-image figures
come from scripts/bench/bench_big_inputs.py, never from a timed test.)
"""
from __future__ import annotations

import importlib
import json
import sys
import threading

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import core
from controller_helpers import make_history

REQUEST = "remove the large cardboard box"


def _hidden(node, **values):
    """The node's class for one call, holding that call's hidden values (unique_id, prompt) as ComfyUI
    gives them to a V3 node (which reads them as cls.hidden)."""
    io = sys.modules[node.__module__].io
    return node.PREPARE_CLASS_CLONE({"hidden_inputs": {io.Hidden[k]: v for k, v in values.items()}})


def _tensor(arr: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(arr)[None]).to(torch.float32) / 255.0


def _picture(seed: int, h: int = 32, w: int = 32) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def _nodes(pack):
    return pack.NODE_CLASS_MAPPINGS


def _new_session(pack, session_id="s", store_dir=""):
    Store = _nodes(pack)["ReSpecHistoryStore"]
    return _hidden(Store, unique_id="1").execute("new", session_id, -1, "", store_dir,
                                                 image=_tensor(_picture(0))).result[0]


def _files(root) -> set:
    return {p.relative_to(root) for p in root.rglob("*") if p.is_file() and not p.name.startswith("sessions.sqlite3")}


def _store(pack):
    return core(pack, "store").open_store(None)


# ------------------------------------------------------------------------------ routes and composer

@pytest.fixture
def web_store(pack, tmp_path):
    store = core(pack, "store").SessionStore(tmp_path / "store")
    store.create("demo", _picture(0, 40, 60))
    for k in (1, 2):
        store.append("demo", _picture(k, 40, 60), f"edit {k}")
    return store


@pytest.mark.parametrize("route", ["rewind", "branch"])
@pytest.mark.parametrize("n", [1000, 1010, 1020])
def test_a_deeply_nested_body_under_1_kb_is_a_400_not_a_recursion_error(pack, web_store, route, n):
    web = core(pack, "web")
    before = web_store.list_sessions()
    resp = getattr(web, route)(web_store, "demo", b"[" * n, notify=False)
    assert resp.status == 400 and "nested" in resp.json()["error"] and "RecursionError" not in resp.json()["error"]
    assert web_store.list_sessions() == before


def test_branches_made_at_the_same_time_each_get_their_own_id(pack, web_store):
    web = core(pack, "web")
    barrier = threading.Barrier(6)
    answers: list = []

    def client():
        barrier.wait()
        for _ in range(3):
            answers.append(web.branch(web_store, "demo", b'{"turn": 1}', notify=False))
    threads = [threading.Thread(target=client) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(r.status for r in answers) == [200] * 18
    made = {r.json()["session_id"] for r in answers}
    assert made == {"demo-b1"} | {f"demo-b1-{n}" for n in range(2, 19)}
    assert not any(str(web_store.root) in r.body.decode() for r in answers)


def test_a_branch_id_taken_meanwhile_is_a_400_without_the_store_path(pack, web_store, monkeypatch):
    web = core(pack, "web")
    web_store.branch("demo", "mine", 1)
    # Another client made "mine" between any check of this request and its branch: the store's
    # transaction is where the id is found taken.
    monkeypatch.setattr(web_store, "exists", lambda sid: sid == "demo")
    resp = web.branch(web_store, "demo", b'{"turn": 1, "new_session_id": "mine"}', notify=False)
    assert resp.status == 400 and "already exists" in resp.json()["error"]
    assert str(web_store.root) not in resp.body.decode()


@pytest.mark.parametrize("where", ["instruction", "sent_instruction", "meta key", "meta value", "reserved meta key"])
def test_a_first_turn_refused_for_its_text_leaves_no_session_behind(pack, where):
    hist = _new_session(pack)
    args = {"instruction": "add a hat", "sent_instruction": "", "meta": ""}
    if where == "instruction":
        args["instruction"] = "add a \ud83d hat"
    elif where == "sent_instruction":
        args["sent_instruction"] = "add a hat \udfff"
    elif where == "meta key":
        args["meta"] = '{"\\ud800": 1}'
    elif where == "meta value":
        args["meta"] = '{"note": "\\udc00"}'
    else:
        args["meta"] = '{"_respec_run": {"prompt": "x", "node": "1"}}'
    store = _store(pack)
    with pytest.raises(core(pack, "errors").InputError):
        _nodes(pack)["ReSpecHistoryAppend"].execute(hist, _tensor(_picture(1)), **args).result
    assert not store.exists("s") and store.list_sessions() == []
    assert not (store.root / "images").exists() or _files(store.root) == set()


def test_history_to_images_is_sized_from_its_output(pack, monkeypatch):
    """fit=crop on a wide turn then a tall one: every picture PIL is asked to make is at most the
    frame's size (before: the tall turn was first scaled to 4000×160000)."""
    History = core(pack, "history").History
    hist = History.start(_picture(0, 10, 4000)).append(_picture(1, 400, 10), "make it tall")
    made: list = []
    real = Image.Image.resize

    def spy(self, size, *a, **kw):
        made.append(tuple(size))
        return real(self, size, *a, **kw)
    monkeypatch.setattr(Image.Image, "resize", spy)
    for fit in ("crop", "pad", "stretch"):
        images, _, count = _nodes(pack)["ReSpecHistoryToImages"].execute(hist, 0, -1, fit).result
        assert tuple(images.shape) == (2, 10, 4000, 3) and count == 2
    assert made and max(w * h for w, h in made) <= 4000 * 10


# ------------------------------------------------------------------------------ Controller Prompt / Plan from Text

def _call(pack, history, instruction=REQUEST, **kw):
    inputs = dict(history=history, instruction=instruction, restoration_mode="restoration",
                  skip_non_restoration=False, max_pixels=262144, restoration_template="(built-in)",
                  midturn_template="(built-in)", **kw)
    return _nodes(pack)["ReSpecControllerPrompt"].execute(**inputs).result[2]


@pytest.mark.parametrize("text", ["\U0001f600" * 8192, "\u6587" * 6000, "é" * 8192 + "x"])
def test_plan_from_text_sends_an_instruction_history_append_keeps(pack, text):
    history = make_history(2, core(pack, "history").History)
    call = _call(pack, history)
    answer = json.dumps({"synthesis_instruction": text, "image_ids": [0, 1]}, ensure_ascii=False)
    plan, _, instruction = _nodes(pack)["ReSpecPlanFromText"].execute(call, answer, "request").result
    assert len(instruction.encode("utf-8")) <= 16 * 1024 and "synthesis_instruction" in plan.meta["truncated"]
    new, _ = _nodes(pack)["ReSpecHistoryAppend"].execute(history, _tensor(_picture(9, 48, 64)), REQUEST,
                                                         sent_instruction=instruction, plan=plan).result
    assert new.current.sent_instruction == instruction


@pytest.mark.parametrize("bad", [5, "a call", {"needed": True}, True, "plan"])
def test_plan_from_text_refuses_anything_but_a_controller_call_without_a_raw_error(pack, bad):
    if bad == "plan":
        bad = core(pack, "plan").Plan(turn=2, user_instruction="x", synthesis_instruction="x")
    node = _nodes(pack)["ReSpecPlanFromText"]
    assert node.check_lazy_status(bad, None, "request") == []
    with pytest.raises(core(pack, "errors").InputError, match="controller_call|Controller Prompt"):
        node.execute(bad, None, "request")


@pytest.mark.parametrize("text", ["x" * (16 * 1024 + 1), "y" * (1 << 20), "add a \ud800 hat", "add\x00 a hat"])
def test_controller_prompt_applies_the_request_rule(pack, text):
    history = make_history(3, core(pack, "history").History)
    with pytest.raises(core(pack, "errors").InputError, match="request") as got:
        _call(pack, history, instruction=text)
    assert len(str(got.value)) <= 300


def test_history_append_refuses_a_plan_made_for_another_turn(pack):
    History = core(pack, "history").History
    other = make_history(4, History)
    plan = _nodes(pack)["ReSpecPlanFromText"].execute(_call(pack, other), '{"synthesis_instruction": "x"}', "request").result[0]
    assert plan.turn == 4
    history = make_history(2, History)
    with pytest.raises(core(pack, "errors").InputError, match="turn 4.*next turn is 2"):
        _nodes(pack)["ReSpecHistoryAppend"].execute(history, _tensor(_picture(5, 48, 64)), REQUEST, plan=plan).result


# ------------------------------------------------------------------------------ Drift Guard / Reveal / alignment

def _guard(pack, previous, edited, **kw):
    return _nodes(pack)["ReSpecDriftGuard"].execute(previous, edited, True, **kw).result


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("which", ["previous", "edited"])
def test_non_finite_pixels_are_refused_naming_the_input(pack, value, which):
    good = _tensor(_picture(0))
    bad = good.clone()
    bad[0, 3:9, 4:12, :] = value
    args = {"previous": good, "edited": good.clone(), which: bad}
    with pytest.raises(core(pack, "errors").InputError, match=f"{which} holds NaN or infinite"):
        _guard(pack, args["previous"], args["edited"])


def test_history_append_refuses_non_finite_pixels(pack):
    bad = _tensor(_picture(1))
    bad[0, 0, 0, 0] = float("nan")
    hist = _new_session(pack)
    with pytest.raises(core(pack, "errors").InputError, match="image holds NaN"):
        _nodes(pack)["ReSpecHistoryAppend"].execute(hist, bad, "add a hat").result
    assert not _store(pack).exists("s")


@pytest.mark.parametrize("shape", [(1, 512), (512, 1), (1, 1)])
def test_one_row_or_one_column_pictures_are_refused_clearly(pack, shape):
    errors = core(pack, "errors")
    pic = _picture(0, *shape)
    with pytest.raises(errors.InputError, match="at least 2×2"):
        _guard(pack, _tensor(pic), _tensor(pic))
    with pytest.raises(errors.InputError, match="at least 2×2"):
        core(pack, "post_edit.guard_step").guard_images(pic, pic)
    with pytest.raises(errors.InputError, match="at least 2×2"):
        core(pack, "pixels.alignment").estimate_alignment(pic, pic)
    with pytest.raises(errors.InputError, match="at least 2×2"):
        core(pack, "pixels.reveal").reveal_composite(pic, pic, pic, np.ones(shape, bool), source_id=0)
    history = make_history(3, core(pack, "history").History)
    with pytest.raises(errors.InputError, match="at least 2×2"):
        _nodes(pack)["ReSpecRevealComposite"].execute(history, _tensor(pic), REQUEST, True, "restoration")


def _edit_pair(size=96):
    """A textured picture and an edit of it (a red square added)."""
    prev = np.asarray(Image.fromarray(_picture(3, 24, 24)).resize((size, size), Image.BICUBIC))
    cur = prev.copy()
    cur[30:60, 30:60] = (230, 20, 20)
    return prev, cur


def test_a_mask_with_a_channel_axis_is_used_and_an_empty_batch_is_refused(pack):
    prev, cur = _edit_pair()
    m = np.zeros((96, 96), np.float32)
    m[20:70, 20:70] = 1.0
    as_batch = _guard(pack, _tensor(prev), _tensor(cur), mask=torch.from_numpy(m[None]))
    with_channel = _guard(pack, _tensor(prev), _tensor(cur), mask=torch.from_numpy(m[:, :, None]))
    assert json.loads(with_channel[2].split("\n", 1)[1])["region_from"] == "the user's mask"
    assert torch.equal(as_batch[1], with_channel[1]) and torch.equal(as_batch[0], with_channel[0])
    with pytest.raises(core(pack, "errors").InputError, match="mask: the MASK batch is empty"):
        _guard(pack, _tensor(prev), _tensor(cur), mask=torch.zeros((0, 96, 96)))


def test_the_edit_mask_has_the_size_of_the_image_returned(pack):
    prev, _ = _edit_pair()
    edited = np.asarray(Image.fromarray(prev).resize((96, 80)))
    image, mask, report, _ = _guard(pack, _tensor(prev), _tensor(edited), instruction="make it night")
    assert report.startswith("Drift Guard stepped aside")
    assert tuple(image.shape[1:3]) == (80, 96) and tuple(mask.shape[1:]) == (80, 96)


def test_a_large_picture_is_guarded_at_the_working_resolution(pack):
    """Above the working size the guard analyses a scaled copy and composes at full size: I_{t-1}'s
    own pixels wherever the weight is 0, the editor's full-size pixels where it is 1."""
    guard = core(pack, "post_edit.guard_step")
    prev = np.asarray(Image.fromarray(_picture(3, 64, 64)).resize((512, 512), Image.BICUBIC))
    cur = prev.copy()
    cur[200:300, 180:330] = (230, 25, 25)
    res = guard.guard_images(prev, cur, work_pixels=128 * 128)
    assert res.applied and res.record["working_size"] == [128, 128] and res.weight.shape == (512, 512)
    assert np.array_equal(res.image[res.weight == 0], prev[res.weight == 0])
    assert np.array_equal(res.image[230:270, 210:300], cur[230:270, 210:300])   # deep inside: the edit itself
    full = guard.guard_images(prev, cur, work_pixels=1 << 40)                    # the guard at full size
    assert "working_size" not in full.record
    diff = np.abs(res.image.astype(int) - full.image.astype(int))
    assert np.mean(diff) < 0.5 and np.percentile(diff, 99.9) <= 8
    kept, kept_full = res.weight >= 0.5, full.weight >= 0.5
    assert kept[200:300, 180:330].all()                                           # the edit is kept whole
    assert (kept & kept_full).sum() / (kept | kept_full).sum() > 0.85


# ------------------------------------------------------------------------------ the store's text through the nodes

def test_a_store_dir_that_is_no_text_or_a_megabyte_long_is_a_short_input_error(pack):
    errors = core(pack, "errors")
    Store = _nodes(pack)["ReSpecHistoryStore"]
    with pytest.raises(errors.InputError, match="store_dir.*lone surrogate"):
        Store.execute("new", "s", -1, "", "mine\ud800", image=_tensor(_picture(0))).result
    with pytest.raises(errors.InputError, match="store_dir") as got:
        Store.execute("new", "s", -1, "", "d" * (1 << 20), image=_tensor(_picture(0))).result
    sessions = str(core(pack, "paths").sessions_dir().resolve())
    assert len(str(got.value)) <= 300 and sessions not in str(got.value)


@pytest.mark.parametrize("depth", [5000, 100_000])
@pytest.mark.parametrize("field", ["meta", "editor_image_ids"])
def test_json_nested_thousands_deep_is_an_input_error(pack, depth, field):
    hist = _new_session(pack)
    text = "[" * depth + "]" * depth if field == "editor_image_ids" else '{"a": ' + "[" * depth + "]" * depth + "}"
    with pytest.raises(core(pack, "errors").InputError, match=f"{field} is (nested more than|[0-9,]+ bytes long)"):
        _nodes(pack)["ReSpecHistoryAppend"].execute(hist, _tensor(_picture(1)), "add a hat", **{field: text}).result
    assert not _store(pack).exists("s")


@pytest.mark.parametrize("depth", [600, 900])
def test_a_meta_too_deep_to_serve_is_refused_so_the_session_stays_readable(pack, depth):
    hist = _new_session(pack)
    Append = _nodes(pack)["ReSpecHistoryAppend"]
    hist, _ = Append.execute(hist, _tensor(_picture(1)), "add a hat").result
    with pytest.raises(core(pack, "errors").InputError, match="meta is nested more than"):
        Append.execute(hist, _tensor(_picture(2)), "add a scarf",
                       meta='{"a": ' + "[" * depth + "]" * depth + "}").result
    web = core(pack, "web")
    resp = web.get_session(_store(pack), "s")
    assert resp.status == 200 and len(resp.json()["turns"]) == 2


def test_the_store_refuses_a_meta_nested_deeper_than_it_can_serve(pack, tmp_path):
    store = core(pack, "store").SessionStore(tmp_path / "store")
    deep: dict = {}
    node = deep
    for _ in range(700):
        node["a"] = {}
        node = node["a"]
    with pytest.raises(core(pack, "errors").InputError, match="nested more than"):
        store.create("s", _picture(0), meta=deep)
    assert not store.exists("s")


def test_json_routes_and_meta_share_one_bounded_reader(pack):
    """The bound lives in one place: a route body, History Append's meta and ids, and the store
    all go through respec/text.py's read_json / check_json."""
    text = importlib.import_module(f"{pack.__name__}.respec.text")
    with pytest.raises(core(pack, "errors").InputError, match="nested more than 4"):
        text.read_json("[[[[[1]]]]]", "the request body", max_bytes=1024, example="{}", max_depth=4)
    assert text.read_json("[[[[1]]]]", "x", max_bytes=1024, example="{}", max_depth=4) == [[[[1]]]]
