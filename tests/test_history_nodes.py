"""History Store / History Append nodes: modes, ComfyUI caching (fingerprint_inputs, V1's IS_CHANGED), no
duplicate turns."""
from __future__ import annotations

import json
import math
import sys

import numpy as np
import pytest
import torch

from conftest import core


def _hidden(node, **values):
    """The node's class for one call, holding that call's hidden values (unique_id, prompt) as ComfyUI
    gives them to a V3 node (which reads them as cls.hidden)."""
    io = sys.modules[node.__module__].io
    return node.PREPARE_CLASS_CLONE({"hidden_inputs": {io.Hidden[k]: v for k, v in values.items()}})


@pytest.fixture
def nodes(pack):
    m = pack.NODE_CLASS_MAPPINGS
    return m["ReSpecHistoryStore"], m["ReSpecHistoryAppend"]


def _image(seed: int, h: int = 8, w: int = 6, c: int = 3) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(0, 256, (1, h, w, c), generator=g).float() / 255.0)


def _uint8(t: torch.Tensor) -> np.ndarray:
    return np.round(t[0].numpy() * 255).astype(np.uint8)


def _store(pack, root=None):
    return core(pack, "store").SessionStore(root)


def _run(Store, mode, session_id="s", turn=-1, new_session_id="", store_dir="", image=None):
    return _hidden(Store, unique_id="1").execute(mode, session_id, turn, new_session_id, store_dir,
                                                 image=image).result


def _changed(Store, mode="load", session_id="s", turn=-1, new_session_id="", store_dir=""):
    return Store.fingerprint_inputs(mode=mode, session_id=session_id, turn=turn, new_session_id=new_session_id,
                                    store_dir=store_dir)


def _edit(current: torch.Tensor, instruction: str) -> torch.Tensor:
    """A deterministic stand-in for an editor node: the output depends on its inputs only."""
    shift = 1 + len(instruction) % 3
    return torch.roll(current, shifts=shift, dims=2)


class Queue:
    """Queues Store(load) -> edit -> Append the way ComfyUI's cache runs it: nothing re-runs when
    the prompt and every fingerprint_inputs value are the same as last time; otherwise the Store node and
    everything after it run again."""

    def __init__(self, Store, Append, session="s"):
        self.Store, self.Append, self.session = Store, Append, session
        self.last = None

    def prompt(self, instructions):
        p = {"1": {"class_type": "ReSpecHistoryStore", "inputs": {"mode": "load", "session_id": self.session}}}
        for i, text in enumerate(instructions):
            p[str(10 + i)] = {"class_type": "ReSpecHistoryAppend", "inputs": {"instruction": text}}
        return p

    def __call__(self, *instructions, fail_after=None):
        prompt = self.prompt(instructions)
        key = (json.dumps(prompt, sort_keys=True), _changed(self.Store, session_id=self.session))
        if key == self.last:
            return "cached"
        hist, current, _, _ = _run(self.Store, "load", self.session)
        for i, text in enumerate(instructions):
            if fail_after is not None and i == fail_after:
                raise RuntimeError("editor crashed")
            hist, current = _hidden(self.Append, prompt=prompt, unique_id=str(10 + i)).execute(
                hist, _edit(current, text), text).result
        self.last = key
        return hist


# ----------------------------------------------------------------------------- modes

def test_in_graph_mode_keeps_the_history_in_memory_and_saves_nothing(pack, nodes, tmp_path):
    Store, Append = nodes
    hist, current, count, info = _run(Store, "in-graph", image=_image(0), store_dir=str(tmp_path / "st"))
    h2, cur2 = Append.execute(hist, _image(1), "add a hat").result
    assert hist.session_id is None and count == 0 and len(h2) == 2 and len(hist) == 1
    assert np.array_equal(h2.current.image.array, _uint8(_image(1)))
    assert torch.equal(cur2, _image(1)) and not (tmp_path / "st").exists()


def test_new_mode_starts_a_session_and_continues_it_with_the_same_image(pack, nodes):
    Store, Append = nodes
    hist, current, count, info = _run(Store, "new", image=_image(0))
    assert json.loads(info)["session_id"] == "s" and count == 0 and torch.equal(current, _image(0))
    Append.execute(hist, _image(1), "add a hat").result
    hist, current, count, info = _run(Store, "new", image=_image(0))
    assert count == 1 and torch.equal(current, _image(1)) and json.loads(info)["turns"] == 2
    assert len(_store(pack).load("s")) == 2


def test_new_mode_refuses_a_different_original_for_an_existing_session(pack, nodes):
    Store, Append = nodes
    hist, *_ = _run(Store, "new", image=_image(0))
    Append.execute(hist, _image(1), "add a hat").result
    with pytest.raises(core(pack, "errors").StoreError, match="different original image"):
        _run(Store, "new", image=_image(5))


def test_modes_that_start_from_an_image_need_one(pack, nodes):
    Store, _ = nodes
    for mode in ("new", "in-graph"):
        with pytest.raises(core(pack, "errors").InputError, match="connect 'image'"):
            _run(Store, mode)


def test_store_dir_chooses_a_store_inside_the_sessions_folder(pack, nodes):
    Store, Append = nodes
    hist, *_ = _run(Store, "new", image=_image(0), store_dir="mine")
    Append.execute(hist, _image(1), "edit").result
    sessions = core(pack, "paths").sessions_dir()
    assert len(_store(pack, sessions / "mine").load("s")) == 2
    assert not _store(pack).exists("s")
    # the same folder given as an absolute path inside the sessions folder is the same store
    assert len(_run(Store, "load", store_dir=str(sessions / "mine"))[0]) == 2


@pytest.mark.parametrize("outside", ["../elsewhere", "/tmp/respec-store", "mine/../../x", "images", "images/sub"])
def test_store_dir_outside_the_sessions_folder_is_refused(pack, nodes, outside, tmp_path):
    Store, _ = nodes
    with pytest.raises(core(pack, "errors").InputError, match="store_dir|outside"):
        _run(Store, "new", image=_image(0), store_dir=outside)
    assert not (tmp_path / "elsewhere").exists()


def test_store_dir_symlink_leaving_the_sessions_folder_is_refused(pack, nodes, tmp_path):
    Store, _ = nodes
    sessions = core(pack, "paths").sessions_dir()
    sessions.mkdir(parents=True)
    (tmp_path / "target").mkdir()
    (sessions / "link").symlink_to(tmp_path / "target")
    with pytest.raises(core(pack, "errors").InputError, match="outside"):
        _run(Store, "new", image=_image(0), store_dir="link")
    assert list((tmp_path / "target").iterdir()) == []


def test_load_mode_outputs_the_latest_turn(pack, nodes):
    Store, _ = nodes
    s = _store(pack)
    s.create("s", _uint8(_image(0)))
    s.append("s", _uint8(_image(1)), "one")
    hist, current, count, _ = _run(Store, "load")
    assert count == 1 and len(hist) == 2 and torch.equal(current, _image(1))


def test_rewind_mode_keeps_turns_up_to_k(pack, nodes):
    Store, Append = nodes
    hist, *_ = _run(Store, "new", image=_image(0))
    for i in range(1, 4):
        hist, _ = Append.execute(hist, _image(i), f"edit {i}").result
    outputs = _run(Store, "rewind", turn=1)
    # An undo, not a turn: every output is ComfyUI's silent blocker, so nothing downstream runs.
    blocker = pack.nodes.history_nodes.Blocked
    assert len(outputs) == 4 and all(type(o).__name__ in ("ExecutionBlocker", blocker.__name__) for o in outputs)
    assert all(o.message is None for o in outputs)
    assert _store(pack).load("s").instructions == ["edit 1"]
    _run(Store, "rewind", turn=1)    # queued again: still turns 0..1, nothing re-added
    assert _store(pack).load("s").instructions == ["edit 1"]
    with pytest.raises(core(pack, "errors").InputError, match="turn' >= 0"):
        _run(Store, "rewind", turn=-1)


def test_branch_mode_creates_the_branch_then_reuses_it(pack, nodes):
    Store, Append = nodes
    hist, *_ = _run(Store, "new", image=_image(0))
    for i in range(1, 3):
        hist, _ = Append.execute(hist, _image(i), f"edit {i}").result
    b, current, count, info = _run(Store, "branch", turn=1, new_session_id="alt")
    assert b.session_id == "alt" and count == 1 and torch.equal(current, _image(1))
    again, *_ = _run(Store, "branch", turn=1, new_session_id="alt")    # queued again: same branch
    assert again.fingerprint == b.fingerprint and len(_store(pack).list_sessions()) == 2
    with pytest.raises(core(pack, "errors").StoreError, match="not the branch"):
        _run(Store, "branch", turn=0, new_session_id="alt")


@pytest.mark.parametrize("bad", ["../../etc", "a/b", "", "x" * 65])
def test_a_hostile_session_id_is_refused_by_the_node(pack, nodes, bad):
    Store, _ = nodes
    with pytest.raises(core(pack, "errors").InputError, match="not allowed"):
        _run(Store, "new", session_id=bad, image=_image(0))


# ----------------------------------------------------------------------------- caching

def test_load_is_changed_only_when_the_session_changed(pack, nodes):
    Store, _ = nodes
    s = _store(pack)
    s.create("s", _uint8(_image(0)))
    first = _changed(Store)
    assert _changed(Store) == first
    other = _store(pack, s.root)    # another process / another store object
    other.append("s", _uint8(_image(1)), "edit")
    second = _changed(Store)
    assert second != first and _changed(Store) == second
    other.rewind("s", 0)
    assert _changed(Store) not in (first, second)


def test_is_changed_never_raises(pack, nodes):
    Store, _ = nodes
    assert math.isnan(_changed(Store, session_id="../../etc"))
    assert _changed(Store, mode="in-graph") == _changed(Store, mode="in-graph")


def test_queueing_the_same_prompt_twice_appends_the_turn_once(pack, nodes):
    Store, Append = nodes
    _store(pack).create("s", _uint8(_image(0)))
    q = Queue(Store, Append)
    first = q("add a hat")
    q.last = None            # as if the cache were cleared: the Store re-runs anyway (version changed)
    second = q("add a hat")
    assert len(first) == len(second) == 2
    assert _store(pack).load("s").instructions == ["add a hat"]
    assert q("add a hat") == "cached"


def test_a_new_instruction_appends_a_new_turn(pack, nodes):
    Store, Append = nodes
    _store(pack).create("s", _uint8(_image(0)))
    q = Queue(Store, Append)
    q("add a hat")
    h = q("make the hat red")
    assert h.instructions == ["add a hat", "make the hat red"]
    assert np.array_equal(h.current.image.array, _uint8(_edit(_edit(_image(0), "add a hat"), "make the hat red")))


def test_a_prompt_with_two_appends_queued_twice_adds_each_turn_once(pack, nodes):
    Store, Append = nodes
    _store(pack).create("s", _uint8(_image(0)))
    q = Queue(Store, Append)
    q("add a hat", "make the hat red")
    q.last = None
    h = q("add a hat", "make the hat red")
    assert h.instructions == ["add a hat", "make the hat red"]
    assert _store(pack).load("s").instructions == ["add a hat", "make the hat red"]


def test_a_prompt_that_failed_midway_resumes_without_duplicating(pack, nodes):
    Store, Append = nodes
    _store(pack).create("s", _uint8(_image(0)))
    q = Queue(Store, Append)
    with pytest.raises(RuntimeError):
        q("add a hat", "make the hat red", fail_after=1)
    h = q("add a hat", "make the hat red")
    assert h.instructions == ["add a hat", "make the hat red"]
    want = _edit(_edit(_image(0), "add a hat"), "make the hat red")
    assert np.array_equal(h.current.image.array, _uint8(want))


def test_re_running_append_on_the_same_inputs_adds_nothing(pack, nodes):
    Store, Append = nodes
    hist, *_ = _run(Store, "new", image=_image(0))
    a, _ = Append.execute(hist, _image(1), "add a hat").result
    b, cur = Append.execute(hist, _image(1), "add a hat").result    # no PROMPT: the idempotency key decides
    assert len(a) == len(b) == 2 and b.version == a.version and torch.equal(cur, _image(1))
    assert len(_store(pack).load("s")) == 2


def test_append_on_a_stale_history_is_refused(pack, nodes):
    Store, Append = nodes
    hist, *_ = _run(Store, "new", image=_image(0))
    hist, _ = Append.execute(hist, _image(3), "first").result
    _store(pack, hist.store_root).append("s", _uint8(_image(7)), "someone else's turn")
    with pytest.raises(core(pack, "errors").StoreError, match="changed since"):
        Append.execute(hist, _image(1), "add a hat").result
    assert _store(pack).load("s").instructions == ["first", "someone else's turn"]


# ----------------------------------------------------------------------------- append inputs, events

def test_append_keeps_sent_instruction_plan_and_meta(pack, nodes):
    Store, Append = nodes
    Plan = core(pack, "plan").Plan
    plan = Plan(turn=1, user_instruction="add a hat", synthesis_instruction="add a hat; keep the face",
                image_ids=(0,))
    hist, *_ = _run(Store, "new", image=_image(0))
    Append.execute(hist, _image(1), "add a hat", "add a hat; keep the face", plan, '{"seed": 7}').result
    t = _store(pack, hist.store_root).load("s").current   # fresh object: read back from disk
    meta = dict(t.meta)
    assert meta.pop("alignment")["method"].startswith("identity")   # every turn keeps its alignment (issue 20)
    assert (t.sent_instruction, t.plan, meta) == ("add a hat; keep the face", plan, {"seed": 7})


def test_append_records_the_editors_image_ids_and_refuses_anything_else(pack, nodes):
    Store, Append = nodes
    hist, *_ = _run(Store, "in-graph", image=_image(0))
    h, _ = Append.execute(hist, _image(1), "add a hat", meta='{"seed": 3}', editor_image_ids="[0]").result
    assert {k: v for k, v in h.current.meta.items() if k != "alignment"} == {"seed": 3, "editor_image_ids": [0]}
    for bad in ("0", "[0, \"1\"]", "[true]", "{not json"):
        with pytest.raises(core(pack, "errors").InputError, match="image ids"):
            Append.execute(hist, _image(1), "add a hat", editor_image_ids=bad).result


def test_an_empty_sent_instruction_means_the_user_instruction(pack, nodes):
    Store, Append = nodes
    hist, *_ = _run(Store, "in-graph", image=_image(0))
    h, _ = Append.execute(hist, _image(1), "add a hat", "  ").result
    assert h.current.sent_instruction == "add a hat"


@pytest.mark.parametrize("meta", ["[1, 2]", "{not json", "\"text\""])
def test_meta_must_be_a_json_object(pack, nodes, meta):
    Store, Append = nodes
    hist, *_ = _run(Store, "in-graph", image=_image(0))
    with pytest.raises(core(pack, "errors").InputError, match="JSON object"):
        Append.execute(hist, _image(1), "x", meta=meta).result


def test_append_takes_exactly_one_image(pack, nodes):
    Store, Append = nodes
    hist, *_ = _run(Store, "in-graph", image=_image(0))
    with pytest.raises(core(pack, "errors").InputError, match="batch of 2"):
        Append.execute(hist, torch.cat([_image(1), _image(2)]), "x").result


def test_history_events_carry_ids_text_and_digests_but_no_pixels(pack, nodes):
    Store, Append = nodes
    comfy = core(pack, "comfy")
    got = []
    remove = comfy.add_listener(lambda name, data: got.append((name, data)))
    try:
        hist, *_ = _run(Store, "new", image=_image(0, 64, 64))
        _hidden(Append, unique_id="9").execute(hist, _image(1, 64, 64), "add a hat").result
    finally:
        remove()
    # The Store sends nothing for a session it has not stored yet; the Append that creates it does.
    assert [n for n, _ in got] == ["respec.history"]
    data = got[-1][1]
    assert data["session_id"] == "s" and data["node"] == "9" and data["version"] == 2
    assert [t["instruction"] for t in data["turns"]] == ["", "add a hat"]
    assert data["turns"][1]["image"] == _store(pack).load("s").current.image.digest
    assert len(json.dumps(data)) < 2000      # text and digests only, no pixels


def test_the_history_event_has_the_shape_the_session_route_returns(pack, nodes):
    """One payload shape for every panel: the event is the session's summary (width and height,
    plan summaries, latest plan) plus what happened, the node and the store."""
    Store, Append = nodes
    comfy, Plan = core(pack, "comfy"), core(pack, "plan").Plan
    got = []
    remove = comfy.add_listener(lambda name, data: got.append(data))
    try:
        hist, *_ = _run(Store, "new", image=_image(0, 8, 6))
        plan = Plan(turn=1, user_instruction="add a hat", synthesis_instruction="add a hat", image_ids=(0,))
        _hidden(Append, unique_id="9").execute(hist, _image(1, 8, 6), "add a hat", plan=plan).result
    finally:
        remove()
    data = got[-1]
    summary = _store(pack).load("s").summary()
    assert {k: data[k] for k in summary} == summary
    assert (data["action"], data["node"], data["store"]) == ("append", "9", hist.store_root)
    assert (data["turns"][1]["width"], data["turns"][1]["height"]) == (6, 8)
    assert data["latest_plan"]["applied_turn"] == 1 and data["latest_plan"]["image_ids"] == [0]


# ----------------------------------------------------------------------------- change masks

def _scene_pair():
    from synthetic_scenes import background, draw_rect, drift, u8
    scene = background(0, (48, 64))
    edited = drift(draw_rect(scene, (10, 20, 30, 44), (0.9, 0.1, 0.1)))
    as_t = lambda a: torch.from_numpy(u8(a)).float()[None] / 255.0
    return as_t(scene), as_t(edited), (10, 20, 30, 44)


@pytest.mark.parametrize("mode", ["in-graph", "new"])
def test_history_append_records_the_turns_change_mask(pack, nodes, mode):
    Store, Append = nodes
    before, after, (y0, x0, y1, x1) = _scene_pair()
    hist, *_ = _run(Store, mode, session_id="cm", image=before)
    h2, _ = Append.execute(hist, after, "add a red box").result
    change = h2.turns[1].change
    assert change is not None and change.info["method"]
    box = np.zeros((48, 64), bool)
    box[y0:y1, x0:x1] = True
    assert (change.mask == box).mean() > 0.98
    if mode == "new":   # stored with the turn, and back after a reload
        again = _store(pack).load("cm")
        assert np.array_equal(again.turns[1].change.mask, change.mask)


@pytest.mark.parametrize("mode", ["in-graph", "new"])
def test_history_append_keeps_a_turn_as_run_turn_does(pack, nodes, mode):
    """What a turn keeps has one home (respec.turn.keep_turn): the same turn kept by run_turn and by
    History Append (given the record's meta and image ids, as a graph's nodes give them) has the
    same meta, image and masks."""
    Store, Append = nodes
    turn = core(pack, "turn")
    before, after, _ = _scene_pair()
    edited = pack.nodes.common.image_from_comfy(after)

    class Edited:
        name, last_run = "fixed", {}

        def edit(self, images, instruction, **kwargs):
            return edited

    start, *_ = _run(Store, "in-graph", image=before)
    record, by_turn = turn.run_turn(start, "add a red box", turn.TurnParts(editor=Edited()),
                                    turn.TurnSwitches(use_controller=False), seed=5)
    hist, *_ = _run(Store, mode, session_id="same", image=before)
    by_node, _ = Append.execute(hist, after, "add a red box", meta=json.dumps(record.meta()),
                                editor_image_ids=json.dumps(record.editor_image_ids)).result
    kept = _store(pack).load("same").current if mode == "new" else by_node.current
    expected = by_turn.current
    assert kept.meta == expected.meta and {"editor_image_ids", "alignment"} <= set(kept.meta)
    assert kept.image.digest == expected.image.digest and set(kept.masks) == set(expected.masks)
    assert np.array_equal(kept.change.mask, expected.change.mask)


# ----------------------------------------------------------------------------- rough edges (issue 25)

def test_a_prompt_failing_before_history_append_leaves_no_session(pack, nodes):
    Store, Append = nodes
    hist, current, count, info = _run(Store, "new", image=_image(0))
    # The editor fails here (a missing model): History Append never runs.
    assert count == 0 and torch.equal(current, _image(0)) and json.loads(info)["turns"] == 1
    store = _store(pack)
    assert not store.exists("s") and store.list_sessions() == []
    # The next prompt succeeds: the session is created with turn 0 and turn 1 together.
    hist, *_ = _run(Store, "new", image=_image(0))
    new, _ = Append.execute(hist, _image(1), "add a hat").result
    loaded = store.load("s")
    assert loaded.instructions == ["add a hat"] and loaded.version == new.version == 2
    assert np.array_equal(loaded.turns[0].image.array, _uint8(_image(0)))


def test_the_pending_session_is_created_once_by_a_rerun_append(pack, nodes):
    Store, Append = nodes
    hist, *_ = _run(Store, "new", image=_image(0))
    a, _ = Append.execute(hist, _image(1), "add a hat").result
    b, _ = Append.execute(hist, _image(1), "add a hat").result     # the same Append re-run on the same inputs
    assert len(a) == len(b) == 2 and _store(pack).load("s").instructions == ["add a hat"]
    with pytest.raises(core(pack, "errors").StoreError, match="changed since"):
        Append.execute(hist, _image(2), "another request on the stale pending history").result


def test_a_requeued_first_turn_of_a_new_session_is_kept_once(pack, nodes):
    """The session and its first turn are made in one transaction, with the queued prompt's mark:
    the same prompt queued again (History Store 'new' now loads the session) adds nothing."""
    Store, Append = nodes
    prompt = {"1": {"class_type": "ReSpecHistoryStore", "inputs": {"mode": "new", "session_id": "s"}},
              "2": {"class_type": "ReSpecHistoryAppend", "inputs": {"instruction": "add a hat"}}}
    for _ in range(2):
        hist, current, *_ = _run(Store, "new", image=_image(0))
        new, _ = _hidden(Append, prompt=prompt, unique_id="2").execute(hist, _edit(current, "add a hat"),
                                                                       "add a hat").result
        assert len(new) == 2
    assert _store(pack).load("s").instructions == ["add a hat"]


@pytest.mark.parametrize("field", ["instruction", "sent_instruction"])
def test_an_instruction_over_16_kib_is_refused_and_nothing_is_stored(pack, nodes, field):
    Store, Append = nodes
    hist, *_ = _run(Store, "new", image=_image(0))
    limit = core(pack, "controller.request").MAX_REQUEST_BYTES
    ok = "é" * (limit // 2)                      # exactly 16 KiB of UTF-8 (2 bytes a character)
    Append.execute(hist, _image(1), ok).result
    big = {"instruction": "add a hat", "sent_instruction": ""}
    big[field] = ok + "x"
    hist, *_ = _run(Store, "new", image=_image(0))
    with pytest.raises(core(pack, "errors").InputError, match=r"16,385 bytes.*16 KiB"):
        Append.execute(hist, _image(2), big["instruction"], sent_instruction=big["sent_instruction"]).result
    assert len(_store(pack).load("s")) == 2


# ----------------------------------------------------------------------------- History to Images

def _gallery(pack):
    return pack.NODE_CLASS_MAPPINGS["ReSpecHistoryToImages"]


def test_history_to_images_outputs_every_turn_and_a_log(pack, nodes):
    Store, Append = nodes
    hist, *_ = _run(Store, "in-graph", image=_image(0, 8, 6))
    for i in (1, 2):
        hist, _ = Append.execute(hist, _image(i, 8, 6), f"edit {i}",
                                 sent_instruction=f"sent {i}" if i == 2 else "").result
    images, log, count = _gallery(pack).execute(hist, 0, -1, "pad").result
    assert count == 3 and tuple(images.shape) == (3, 8, 6, 3)
    for i in range(3):   # same-size turns are passed through bit-exactly
        assert torch.equal(images[i:i + 1], _image(i, 8, 6))
    lines = log.splitlines()
    assert len(lines) == 4 and "original image" in lines[1] and "“edit 1”" in lines[2] and "sent" not in lines[2]
    assert "\u2192 sent “sent 2”" in lines[3]
    images, log, count = _gallery(pack).execute(hist, 1, 1, "pad").result
    assert count == 1 and torch.equal(images, _image(1, 8, 6))


@pytest.mark.parametrize("first,last,match", [(3, -1, "first_turn 3"), (0, 5, "last_turn 5"), (2, 1, "before")])
def test_history_to_images_refuses_a_range_outside_the_history(pack, nodes, first, last, match):
    Store, Append = nodes
    hist, *_ = _run(Store, "in-graph", image=_image(0))
    hist, _ = Append.execute(hist, _image(1), "a").result
    hist, _ = Append.execute(hist, _image(2), "b").result
    with pytest.raises(core(pack, "errors").InputError, match=match):
        _gallery(pack).execute(hist, first, last, "pad").result


def test_history_to_images_brings_other_sizes_to_the_first_turns_size(pack, nodes):
    Store, Append = nodes
    hist, *_ = _run(Store, "in-graph", image=_image(0, 8, 8))
    white_wide = torch.ones(1, 4, 8, 3)               # 8 wide, 4 high: half the height of I0
    hist, _ = Append.execute(hist, white_wide, "widen").result
    images, log, _ = _gallery(pack).execute(hist, 0, -1, "pad").result
    assert tuple(images.shape) == (2, 8, 8, 3)
    frame = images[1]
    # pad: scaled to fit (8x4 stays 8x4), centred on black: rows 0-1 and 6-7 black, 2-5 white
    assert torch.all(frame[:2] == 0) and torch.all(frame[6:] == 0) and torch.all(frame[2:6] == 1)
    assert "[pad 8x4 \u2192 8x8]" in log.splitlines()[2]
    images, _, _ = _gallery(pack).execute(hist, 0, -1, "stretch").result
    assert torch.all(images[1] == 1)                  # stretched over the whole frame
    images, _, _ = _gallery(pack).execute(hist, 0, -1, "crop").result
    assert tuple(images.shape) == (2, 8, 8, 3) and torch.all(images[1] == 1)
