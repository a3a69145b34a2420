"""The persistent session store: safety rules (ids, concurrency, crashes, foreign files), lossless
images, idempotency, rewind/branch, lazy loading."""
from __future__ import annotations

import hashlib
import multiprocessing as mp
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from respec.errors import InputError, StoreError
from respec.history import StoredImage
from respec.plan import Plan
from respec.store import SessionStore, validate_session_id
from respec.store.database import DB_NAME
from respec.store.files import LazyStoredImage

ROOT = Path(__file__).resolve().parent.parent


def _img(seed: int, shape=(6, 5, 3)) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def _pngs(store: SessionStore) -> list[Path]:
    return sorted(store.files.dir.glob("*/*.png"))


@pytest.fixture
def store(tmp_path):
    return SessionStore(tmp_path / "store")


# ----------------------------------------------------------------------------- session ids

HOSTILE_IDS = ["../../etc", "../x", "a/b", "a\\b", "/abs", "", ".", "..", "a.b", "a b", "x" * 65,
               "caf\u00e9", "a\nb", "ok\n", "a\x00b", "C:", "~user", None, 5]


@pytest.mark.parametrize("bad", HOSTILE_IDS, ids=repr)
def test_session_ids_outside_the_safe_alphabet_are_refused_with_what_is_allowed(bad):
    with pytest.raises(InputError) as err:
        validate_session_id(bad)
    assert "A-Z" in str(err.value) and "1 to 64" in str(err.value)


def test_safe_session_ids_are_accepted():
    for good in ["a", "A-b_9", "x" * 64, "portrait-2"]:
        assert validate_session_id(good) == good


def test_a_hostile_session_id_writes_nothing_anywhere(tmp_path):
    store = SessionStore(tmp_path / "deep" / "store")
    before = sorted(p for p in tmp_path.rglob("*"))
    for op in (lambda: store.create("../../etc", _img(0)), lambda: store.load("../x"),
               lambda: store.append("a/b", _img(0), "x"), lambda: store.branch("ok", "../../y")):
        with pytest.raises(InputError):
            op()
    assert sorted(p for p in tmp_path.rglob("*")) == before


# ----------------------------------------------------------------------------- images

SHAPES = [(1, 1, 1), (3, 7, 1), (5, 2, 3), (17, 1, 4), (64, 33, 3), (2, 3, 4), (31, 47, 1)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_images_of_every_mode_and_odd_size_round_trip_bit_identically(tmp_path, shape):
    arr = _img(sum(shape), shape)
    if shape[2] == 4:
        arr[0, 0, 3] = 0   # colour under full transparency must survive too
    s = SessionStore(tmp_path / "s")
    s.create("a", arr)
    s.append("a", arr[::-1].copy(), "flip")
    back = SessionStore(tmp_path / "s").load("a")   # a fresh store: nothing cached
    for got, want in zip(back.images, [arr, arr[::-1]]):
        assert got.array.dtype == np.uint8 and got.array.shape == shape
        assert np.array_equal(got.array, want)


@pytest.mark.parametrize("mode", ["L", "RGB", "RGBA"])
def test_pil_images_round_trip_in_their_mode(tmp_path, mode):
    pil = Image.fromarray(_img(3, (9, 11, 4))).convert(mode)
    s = SessionStore(tmp_path / "s")
    s.create("a", pil)
    got = SessionStore(tmp_path / "s").load("a").current.image
    assert got.pil().mode == mode and np.array_equal(np.asarray(got.pil()), np.asarray(pil))


@pytest.mark.parametrize("channels", [1, 3, 4])
def test_image_batches_round_trip_bit_identically(store, channels):
    stack = _img(channels, (5, 9, 7, channels))
    store.create("a", stack[0])
    for i, frame in enumerate(stack[1:], 1):
        store.append("a", frame, f"frame {i}")
    assert len(_pngs(store)) == 5
    back = np.stack([im.array for im in SessionStore(store.root).load("a").images])
    assert back.shape == stack.shape and np.array_equal(back, stack)


def test_the_same_image_is_stored_once(store):
    store.create("a", _img(1))
    store.append("a", _img(2), "one")
    store.append("a", _img(2), "same picture again")
    store.append("a", _img(1), "back to the original")
    assert len(_pngs(store)) == 2
    assert len(store.load("a")) == 4


def test_a_damaged_image_file_is_reported_not_returned(store):
    store.create("a", _img(1))
    store.append("a", _img(2), "edit")
    victim = store.files.path(store.load("a").current.image.digest)
    Image.fromarray(_img(9)).save(victim)           # a valid PNG, but not the image it is named after
    with pytest.raises(StoreError, match="does not hold the image"):
        SessionStore(store.root).load("a").current.image.array
    victim.write_bytes(b"\x89PNG garbage")
    with pytest.raises(StoreError, match="damaged"):
        SessionStore(store.root).load("a").current.image.array
    victim.unlink()
    with pytest.raises(StoreError, match="missing"):
        SessionStore(store.root).load("a").current.image.array


# ----------------------------------------------------------------------------- turns, versions

def test_a_loaded_session_equals_the_history_the_writes_returned(store):
    plan = Plan(turn=1, user_instruction="add a cat", synthesis_instruction="add a cat, keep the sofa",
                is_restoration=False, image_ids=(0,), reasoning={"why": ["a", 1]}, fallbacks=("x",))
    store.create("a", _img(0), meta={"source": "astronaut"})
    h = store.append("a", _img(1), "add a cat", "add a cat, keep the sofa", plan, {"seed": 3, "t": (1, 2)})
    back = SessionStore(store.root).load("a")
    assert back.fingerprint == h.fingerprint
    assert back.turns[1].plan == plan and back.turns[1].meta == {"seed": 3, "t": [1, 2]}
    assert back.turns[0].meta == {"source": "astronaut"}
    assert (back.session_id, back.version, back.store_root) == ("a", h.version, str(store.root))


def test_append_assigns_the_next_turn_index_and_bumps_the_version(store):
    h0 = store.create("a", _img(0))
    h1 = store.append("a", _img(1), "one")
    h2 = store.append("a", _img(2), "two")
    assert [t.index for t in h2.turns] == [0, 1, 2]
    assert h0.version < h1.version < h2.version == store.load("a").version
    assert h2.instructions == ["one", "two"] and h2.turns[1].sent_instruction == "one"


def test_appending_with_the_same_idempotency_key_adds_nothing(store):
    store.create("a", _img(0))
    first = store.append("a", _img(1), "add a cat", idempotency_key="k1")
    again = store.append("a", _img(1), "add a cat", idempotency_key="k1")
    assert len(again) == 2 and again.version == first.version
    assert len(SessionStore(store.root).load("a")) == 2
    assert len(store.append("a", _img(1), "add a cat", idempotency_key="k2")) == 3


def test_append_refuses_a_session_that_changed_since_the_expected_version(store):
    h = store.create("a", _img(0))
    store.append("a", _img(1), "someone else's turn")
    with pytest.raises(StoreError, match="changed since"):
        store.append("a", _img(2), "mine", expected_version=h.version)
    assert len(store.load("a")) == 2


def test_a_missing_session_gives_a_clear_store_error(store):
    for op in (lambda: store.load("nope"), lambda: store.append("nope", _img(0), "x"),
               lambda: store.rewind("nope", 0), lambda: store.branch("nope", "b")):
        with pytest.raises(StoreError, match="no session 'nope'"):
            op()


def test_create_refuses_an_existing_session_unless_it_has_the_same_original(store):
    store.create("a", _img(0))
    store.append("a", _img(1), "edit")
    with pytest.raises(StoreError, match="already exists"):
        store.create("a", _img(0))
    assert len(store.create("a", _img(0), exist_ok=True)) == 2
    with pytest.raises(StoreError, match="different original image"):
        store.create("a", _img(5), exist_ok=True)


def test_rewind_keeps_turns_up_to_k_and_the_version_keeps_growing(store):
    store.create("a", _img(0))
    for i in range(1, 5):
        store.append("a", _img(i), f"edit {i}")
    v = store.load("a").version
    h = store.rewind("a", 2)
    assert [t.index for t in h.turns] == [0, 1, 2] and h.version > v
    assert SessionStore(store.root).load("a").fingerprint == h.fingerprint
    h = store.append("a", _img(9), "new third edit")
    assert h.instructions == ["edit 1", "edit 2", "new third edit"] and h.version > v + 1
    with pytest.raises(InputError, match="turns 0..3"):
        store.rewind("a", 4)


def test_rewind_to_the_latest_turn_changes_nothing(store):
    store.create("a", _img(0))
    store.append("a", _img(1), "edit")
    v = store.load("a").version
    assert len(store.rewind("a", 1)) == 2 and store.load("a").version == v


def test_branch_shares_image_files_and_leaves_the_source_unchanged(store):
    store.create("a", _img(0))
    for i in range(1, 4):
        store.append("a", _img(i), f"edit {i}")
    source = store.load("a").fingerprint
    files = _pngs(store)
    b = store.branch("a", "b", at_turn=1)
    assert b.session_id == "b" and b.instructions == ["edit 1"]
    assert _pngs(store) == files                       # nothing copied
    store.append("b", _img(7), "branch edit")
    assert SessionStore(store.root).load("a").fingerprint == source
    b_row = {s["session_id"]: s for s in store.list_sessions()}["b"]
    assert b_row["parent_id"] == "a" and b_row["parent_turn"] == 1
    with pytest.raises(StoreError, match="already exists"):
        store.branch("a", "b")


def test_queueing_the_same_branch_again_gives_the_branch_made_before(store):
    store.create("a", _img(0))
    for i in range(1, 3):
        store.append("a", _img(i), f"edit {i}")
    b = store.branch("a", "b", at_turn=1, exist_ok=True)
    store.append("b", _img(7), "branch edit")
    again = store.branch("a", "b", at_turn=1, exist_ok=True)
    assert again.instructions == ["edit 1", "branch edit"]        # the branch as it is now, not a new one
    assert again.version == b.version + 1 and len(store.list_sessions()) == 2
    assert store.branch("a", "b", exist_ok=True).session_id == "b"   # no turn given: any branch of a


def test_a_branch_id_taken_by_something_else_is_refused(store):
    store.create("a", _img(0))
    store.append("a", _img(1), "edit 1")
    store.create("c", _img(2))
    store.branch("a", "b", at_turn=1)
    with pytest.raises(StoreError, match="not the branch of 'a' at turn 0"):
        store.branch("a", "b", at_turn=0, exist_ok=True)
    with pytest.raises(StoreError, match="not the branch of 'a'"):
        store.branch("a", "c", exist_ok=True)
    assert store.load("c").instructions == [] and len(store.load("b")) == 2   # nothing changed


def test_a_recreated_session_changes_its_token(store):
    store.create("a", _img(0))
    t1 = store.token("a")
    assert store.token("a") == t1
    store.delete_session("a")
    assert store.token("a") != t1
    store.create("a", _img(0))
    assert store.token("a") != t1   # same id, same version number, but a new session


def test_list_sessions_and_turns_describe_without_pixels(store):
    store.create("a", _img(0))
    store.append("a", _img(1), "edit", plan=Plan(turn=1, user_instruction="edit", synthesis_instruction="e"))
    store.branch("a", "b")
    sessions = {s["session_id"]: s for s in store.list_sessions()}
    assert set(sessions) == {"a", "b"} and sessions["a"]["turns"] == 2
    assert sessions["a"]["current_image"] == store.load("a").current.image.digest
    turns = store.load("a").summary()["turns"]
    assert [t["index"] for t in turns] == [0, 1] and turns[1]["plan"]["image_ids"] == []
    assert (turns[1]["width"], turns[1]["height"]) == store.load("a").current.image.size
    assert "array" not in str(turns)


def test_a_session_serves_only_its_own_images(store):
    from respec import web
    store.create("a", _img(0))
    store.create("b", _img(1))
    da, db = store.load("a").current.image.digest, store.load("b").current.image.digest
    assert web.session_image(store, "a", da).status == 200
    other = web.session_image(store, "a", db)
    assert other.status == 404 and "not part of session" in other.json()["error"]
    assert web.session_image(store, "a", "../../etc/passwd").status == 400   # InputError


def test_gc_removes_only_unreferenced_old_files(store):
    store.create("a", _img(0))
    store.append("a", _img(1), "edit")
    store.rewind("a", 0)                        # _img(1) is now unreferenced
    orphan = store.files.path(StoredImage(_img(1)).digest)
    assert orphan.exists()
    assert store.gc(min_age_s=3600) == 0 and orphan.exists()   # too young: may belong to an append in flight
    assert store.gc(min_age_s=0) == 1 and not orphan.exists()
    assert np.array_equal(SessionStore(store.root).load("a").current.image.array, _img(0))


def _orphans(store, seeds, age_s=7200.0) -> list[Path]:
    """Session 'a' made of images `seeds`, rewound to turn 0: the later images are unreferenced
    and, `age_s` ago, last changed."""
    store.create("a", _img(seeds[0]))
    for i in seeds[1:]:
        store.append("a", _img(i), f"edit {i}")
    store.rewind("a", 0)
    paths = [store.files.path(StoredImage(_img(i)).digest) for i in seeds[1:]]
    for p in paths:
        os.utime(p, (time.time() - age_s,) * 2)
    return paths


def test_gc_dry_run_removes_nothing_and_names_what_would_go(store):
    orphans = _orphans(store, [0, 1, 2])
    seen = []
    assert store.gc(dry_run=True, seen=lambda p, size: seen.append((p, size))) == 2
    assert sorted(p for p, _ in seen) == sorted(orphans) and all(p.exists() for p in orphans)
    assert [size for _, size in sorted(seen)] == [p.stat().st_size for p in sorted(orphans)]


def test_gc_stops_at_its_limit_and_the_next_call_goes_on(store):
    orphans = _orphans(store, [0, 1, 2, 3])
    assert store.gc(limit=2) == 2 and sum(p.exists() for p in orphans) == 1
    assert store.gc(limit=2) == 1 and not any(p.exists() for p in orphans)
    assert np.array_equal(SessionStore(store.root).load("a").current.image.array, _img(0))


def test_gc_of_a_folder_without_a_store_file_removes_and_creates_nothing(tmp_path):
    stray = tmp_path / "s" / "images" / "ab" / ("ab" + "0" * 62 + ".png")
    stray.parent.mkdir(parents=True)
    stray.write_bytes(b"an image of a store file moved away")
    os.utime(stray, (0, 0))
    assert SessionStore(tmp_path / "s").gc(min_age_s=0) == 0
    assert stray.exists() and sorted(p.name for p in (tmp_path / "s").iterdir()) == ["images"]


def test_the_gc_command_lists_what_it_removes_and_the_space_it_frees(store, capsys):
    from respec.__main__ import main
    orphans = _orphans(store, [0, 1, 2])
    size = sum(p.stat().st_size for p in orphans)
    assert main(["gc", "--store", str(store.root), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert all(f"would remove images/{p.parent.name}/{p.name}" in out for p in orphans)
    assert "2 unused files would be removed" in out and all(p.exists() for p in orphans)
    assert main(["gc", "--store", str(store.root), "--min-age", "10800"]) == 0     # 3 h: both are younger
    assert "0 unused files removed, 0 bytes freed" in capsys.readouterr().out and all(p.exists() for p in orphans)
    assert main(["gc", "--store", str(store.root)]) == 0
    out = capsys.readouterr().out
    assert f"2 unused files removed, {size} bytes freed" in out and not any(p.exists() for p in orphans)
    assert len(SessionStore(store.root).load("a")) == 1


def test_the_gc_command_refuses_a_bad_age_and_a_foreign_store_and_creates_none(tmp_path, capsys):
    from respec.__main__ import main
    assert main(["gc", "--store", str(tmp_path / "none")]) == 0
    assert "no session store" in capsys.readouterr().out and not (tmp_path / "none").exists()
    assert main(["gc", "--store", str(tmp_path), "--min-age", "-1"]) == 2
    assert "--min-age" in capsys.readouterr().err
    _store_with_db(tmp_path, b"not a database" * 100)
    assert main(["gc", "--store", str(tmp_path / "s"), "--min-age", "0"]) == 2
    assert "error:" in capsys.readouterr().err


# ----------------------------------------------------------------------------- lazy loading

def test_loading_a_session_decodes_no_image_until_its_pixels_are_read(store, monkeypatch):
    store.create("a", _img(0))
    for i in range(1, 30):
        store.append("a", _img(i), f"edit {i}")
    fresh = SessionStore(store.root)
    decoded = []
    real_get = fresh.files.get
    monkeypatch.setattr(fresh.files, "get", lambda d: decoded.append(d) or real_get(d))
    h = fresh.load("a")
    assert len(h) == 30 and decoded == []
    assert all(isinstance(im, LazyStoredImage) and not im.decoded for im in h.images)
    assert h.current.image.size == (5, 6) and h.fingerprint and decoded == []
    assert np.array_equal(h.current.image.array, _img(29)) and len(decoded) == 1
    h.current.image.array
    assert len(decoded) == 1                     # decoded once, then kept


def test_a_lazy_image_pickles_as_a_plain_stored_image(store):
    import pickle
    store.create("a", _img(0))
    im = SessionStore(store.root).load("a").current.image
    back = pickle.loads(pickle.dumps(im))
    assert type(back) is StoredImage and back == im and np.array_equal(back.array, _img(0))


def test_an_unchanged_session_loads_from_the_cache(store):
    store.create("a", _img(0))
    store.append("a", _img(1), "edit")
    assert store.load("a") is store.load("a")


def test_a_session_that_only_grew_elsewhere_reads_just_the_new_turns(store, monkeypatch):
    store.create("a", _img(0))
    for i in range(1, 6):
        store.append("a", _img(i), f"edit {i}")
    store.load("a")
    other = SessionStore(store.root)               # another process
    other.append("a", _img(6), "edit 6")
    other.append("a", _img(7), "edit 7")
    read = []
    real = store._turn
    monkeypatch.setattr(store, "_turn", lambda row, *rest: read.append(row[0]) or real(row, *rest))
    h = store.load("a")
    assert read == [6, 7] and h.fingerprint == SessionStore(store.root).load("a").fingerprint


def test_a_cold_load_reads_the_latest_turn_and_the_earlier_ones_only_when_asked(store, monkeypatch):
    store.create("a", _img(0))
    for i in range(1, 8):
        store.append("a", _img(i), f"edit {i}", meta={"i": i})
    cold = SessionStore(store.root)
    read = []
    real = cold._turn
    monkeypatch.setattr(cold, "_turn", lambda row, *masks: read.append(row[0]) or real(row, *masks))
    h = cold.load("a")
    assert read == [7] and len(h) == 8 and h.next_turn == 8
    assert np.array_equal(h.current.image.array, _img(7)) and h.current.instruction == "edit 7"
    assert h.turns[3].meta == {"i": 3} and read == [7, 0, 1, 2, 3, 4, 5, 6]   # all earlier rows, once
    h.turns[5], h.images
    assert len(read) == 8
    assert h == store.load("a") and [t.index for t in h.turns] == list(range(8))
    assert [t.instruction for t in h.append(_img(9), "more").turns[6:]] == ["edit 6", "edit 7", "more"]


def test_earlier_turns_are_not_read_from_another_lineage(store):
    store.create("a", _img(0))
    for i in range(1, 4):
        store.append("a", _img(i), f"edit {i}")
    old = SessionStore(store.root).load("a")        # latest turn only, so far
    store.rewind("a", 0)
    store.append("a", _img(20), "another edit 1")   # turn 1 now means something else
    with pytest.raises(StoreError, match="load the session again"):
        old.turns[1]
    fresh = SessionStore(store.root)
    fresh.load("a")
    back = fresh.rewind("a", 0)                     # a rewind's history reads its turns under the new lineage
    assert len(back) == 1 and np.array_equal(back.current.image.array, _img(0))


def test_a_lazily_loaded_history_pickles_with_all_its_turns(store):
    import pickle
    store.create("a", _img(0))
    store.append("a", _img(1), "edit 1")
    h = SessionStore(store.root).load("a")
    back = pickle.loads(pickle.dumps(h))
    assert isinstance(back.turns, tuple) and [t.instruction for t in back.turns] == ["", "edit 1"]


@pytest.mark.parametrize("elsewhere", ["rewind", "rewind_and_regrow", "recreate"])
def test_a_cached_history_is_never_stale(store, elsewhere):
    store.create("a", _img(0))
    for i in range(1, 4):
        store.append("a", _img(i), f"edit {i}")
    store.load("a")
    other = SessionStore(store.root)
    if elsewhere == "rewind":
        other.rewind("a", 1)
    elif elsewhere == "rewind_and_regrow":
        other.rewind("a", 1)
        for i in range(2, 4):
            other.append("a", _img(10 + i), f"other edit {i}")   # same length, other turns
    else:
        other.delete_session("a")
        other.create("a", _img(0))
        for i in range(1, 4):
            other.append("a", _img(20 + i), f"new edit {i}")
    assert store.load("a").fingerprint == SessionStore(store.root).load("a").fingerprint


# ----------------------------------------------------------------------------- foreign / corrupt files

def _store_with_db(tmp_path, data: bytes) -> SessionStore:
    root = tmp_path / "s"
    root.mkdir()
    (root / DB_NAME).write_bytes(data)
    return SessionStore(root)


@pytest.mark.parametrize("content", ["random", "text", "truncated_header"])
def test_a_corrupt_database_file_gives_a_clear_store_error(tmp_path, content):
    data = {"random": np.random.default_rng(0).bytes(8192),
            "text": b"hello, this is not a database\n" * 200,
            "truncated_header": b"SQLite format 3\x00" + b"\x10\x00\x01\x01" + b"\xff" * 500}[content]
    s = _store_with_db(tmp_path, data)
    with pytest.raises(StoreError, match="unreadable|not a ReSpec") as err:
        s.load("a")
    assert str(s.root / DB_NAME) in str(err.value)
    with pytest.raises(StoreError):
        s.create("a", _img(0))
    assert (s.root / DB_NAME).read_bytes() == data


def test_a_foreign_sqlite_database_is_refused_and_left_untouched(tmp_path):
    root = tmp_path / "s"
    root.mkdir()
    con = sqlite3.connect(root / DB_NAME)
    con.execute("CREATE TABLE users (name TEXT)")
    con.execute("INSERT INTO users VALUES ('ada')")
    con.commit()
    con.close()
    before = hashlib.sha256((root / DB_NAME).read_bytes()).hexdigest()
    with pytest.raises(StoreError, match="another program.*users"):
        SessionStore(root).list_sessions()
    assert hashlib.sha256((root / DB_NAME).read_bytes()).hexdigest() == before


def test_a_store_from_a_newer_schema_version_is_refused(store):
    store.create("a", _img(0))
    store.close()
    con = sqlite3.connect(store.db_path)
    con.execute("PRAGMA user_version = 99")
    con.commit()
    con.close()
    with pytest.raises(StoreError, match="schema version 99.*newer"):
        SessionStore(store.root).load("a")


# The schema of version 1 (ReSpec before per-turn masks), frozen here as it was written, so the
# migration is tested against a real old store rather than against today's code.
_SCHEMA_V1 = """
CREATE TABLE store_info (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE sessions (id TEXT PRIMARY KEY, lineage TEXT NOT NULL, version INTEGER NOT NULL,
    n_turns INTEGER NOT NULL, created REAL NOT NULL, updated REAL NOT NULL, parent_id TEXT, parent_turn INTEGER);
CREATE TABLE turns (session_id TEXT NOT NULL, idx INTEGER NOT NULL, instruction TEXT NOT NULL,
    sent_instruction TEXT NOT NULL, plan TEXT, meta TEXT NOT NULL, image TEXT NOT NULL,
    height INTEGER NOT NULL, width INTEGER NOT NULL, channels INTEGER NOT NULL, idem_key TEXT,
    created REAL NOT NULL, PRIMARY KEY (session_id, idx));
CREATE UNIQUE INDEX turns_idem ON turns (session_id, idem_key) WHERE idem_key IS NOT NULL;
CREATE INDEX turns_image ON turns (image);
INSERT INTO store_info VALUES ('app', 'respec-session-store'), ('schema', '1');
PRAGMA user_version = 1;
"""


def _version_1_store(root: Path) -> list[np.ndarray]:
    """A store as ReSpec schema version 1 wrote it: session 'old' with turns 0..2."""
    from respec.store.files import ImageFiles
    root.mkdir(parents=True)
    imgs = [_img(i, (8, 8, 3)) for i in range(3)]
    files = ImageFiles(root / "images")
    con = sqlite3.connect(root / DB_NAME)
    con.executescript("PRAGMA journal_mode = WAL;" + _SCHEMA_V1)
    con.execute("INSERT INTO sessions VALUES ('old', 'lin', 3, 3, 1.0, 1.0, NULL, NULL)")
    for i, im in enumerate(imgs):
        con.execute("INSERT INTO turns VALUES ('old', ?, ?, ?, NULL, '{}', ?, 8, 8, 3, NULL, 1.0)",
                    (i, f"edit {i}" if i else "", f"edit {i}" if i else "", files.put(im).digest))
    con.commit()
    con.close()
    return imgs


def test_a_store_of_schema_version_1_opens_and_is_migrated_in_place(tmp_path):
    from respec.history import CHANGE, TurnMask
    from respec.store.database import SCHEMA_VERSION
    root = tmp_path / "v1"
    imgs = _version_1_store(root)
    store = SessionStore(root)
    h = store.load("old")
    assert [t.instruction for t in h.turns] == ["", "edit 1", "edit 2"]
    assert np.array_equal(h.turns[2].image.array, imgs[2])
    assert all(t.masks == {} for t in h.turns)            # old turns simply have no masks
    con = sqlite3.connect(root / DB_NAME)
    assert con.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 2
    assert con.execute("SELECT value FROM store_info WHERE key='schema'").fetchone()[0] == "2"
    con.close()
    mask = TurnMask.from_mask(np.eye(8, dtype=bool), {"method": "test"})
    store.append("old", _img(9, (8, 8, 3)), "edit 3", masks={CHANGE: mask})
    again = SessionStore(root).load("old")
    assert len(again) == 4 and np.array_equal(again.turns[3].change.mask, np.eye(8, dtype=bool))
    assert again.turns[3].change.info == {"method": "test"}
    store.append("old", _img(10, (8, 8, 3)), "edit 4")
    later = SessionStore(root).load("old")          # turn 3 is now an earlier turn, read on first access
    assert np.array_equal(later.turns[3].change.mask, np.eye(8, dtype=bool)) and later.turns[4].masks == {}


def test_a_database_damaged_after_creation_gives_a_store_error(store):
    store.create("a", _img(0))
    for i in range(1, 40):
        store.append("a", _img(i), "x" * 500)
    store.close()
    raw = bytearray(store.db_path.read_bytes())
    raw[4096:] = np.random.default_rng(1).bytes(len(raw) - 4096)   # keep the header, wreck the pages
    store.db_path.write_bytes(bytes(raw))
    for f in store.root.glob(DB_NAME + "-*"):
        f.unlink()
    with pytest.raises(StoreError, match="unreadable|inconsistent"):
        SessionStore(store.root).load("a")


# ----------------------------------------------------------------------------- real processes

def _tag(worker: int, j: int) -> np.ndarray:
    arr = np.zeros((4, 4, 3), np.uint8)
    arr[..., 0], arr[..., 1], arr[..., 2] = worker, j, 255 - j
    return arr


def _append_worker(root: str, worker: int, n: int, ready) -> None:
    from respec.store import SessionStore as Store
    s = Store(root)
    s.exists("shared")    # connected and checked: the appends below are all that is left
    ready.wait(120)       # every process starts appending at the same moment
    for j in range(n):
        s.append("shared", _tag(worker, j), f"w{worker}-{j}", f"sent w{worker}-{j}",
                 meta={"worker": worker, "j": j})


@pytest.mark.slow
def test_concurrent_processes_appending_lose_nothing_and_never_interleave_a_turn(tmp_path):
    workers, n = 4, 20
    root = str(tmp_path / "s")
    SessionStore(root).create("shared", np.zeros((4, 4, 3), np.uint8))
    ctx = mp.get_context("spawn")
    ready = ctx.Barrier(workers + 1)
    procs = [ctx.Process(target=_append_worker, args=(root, w, n, ready)) for w in range(1, workers + 1)]
    for p in procs:
        p.start()
    ready.wait(120)
    for p in procs:
        p.join(180)
    assert [p.exitcode for p in procs] == [0] * workers
    h = SessionStore(root).load("shared")
    assert len(h) == 1 + workers * n and [t.index for t in h.turns] == list(range(len(h)))
    seen = [t.instruction for t in h.turns[1:]]
    assert sorted(seen) == sorted(f"w{w}-{j}" for w in range(1, workers + 1) for j in range(n))
    last_j = {}
    for t in h.turns[1:]:
        w, j = t.meta["worker"], t.meta["j"]
        # every field of the turn comes from the same append
        assert t.instruction == f"w{w}-{j}" and t.sent_instruction == f"sent w{w}-{j}"
        assert np.array_equal(t.image.array, _tag(w, j))
        assert j > last_j.get(w, -1)      # each process's turns keep their order
        last_j[w] = j
    assert h.version == 1 + workers * n


def _run_until_paused(root: Path, point: str, mark: Path, op: str) -> subprocess.Popen:
    code = f"""
import time, numpy as np
from respec.store import sessions as st
def pause(point):
    if point == {point!r}:
        open({str(mark)!r}, "w").close()
        time.sleep(300)
st._checkpoint = pause
s = st.SessionStore({str(root)!r})
{op}
"""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=str(ROOT), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not mark.exists():
        if proc.poll() is not None:
            raise AssertionError(f"child exited early: {proc.stderr.read().decode()[-2000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("child never reached the pause point")
        time.sleep(0.02)
    return proc


@pytest.mark.slow
@pytest.mark.parametrize("point", ["image_written", "before_commit"])
def test_a_process_killed_mid_append_leaves_the_session_as_it_was(tmp_path, point):
    root = tmp_path / "s"
    s = SessionStore(root)
    s.create("a", _img(0))
    s.append("a", _img(1), "edit 1")
    before = SessionStore(root).load("a")
    proc = _run_until_paused(root, point, tmp_path / "paused",
                             "s.append('a', np.full((8, 8, 3), 7, np.uint8), 'half turn')")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    after = SessionStore(root).load("a")
    assert after.version == before.version and after.fingerprint == before.fingerprint
    assert "half turn" not in after.instructions
    # the killed writer's PNG may be left behind: harmless, and still writable after the kill
    h = SessionStore(root, timeout=10).append("a", _img(2), "edit 2")
    assert h.instructions == ["edit 1", "edit 2"]
    assert SessionStore(root).gc(min_age_s=0) == 1
    assert all(np.array_equal(im.array, _img(i)) for i, im in enumerate(SessionStore(root).load("a").images))


@pytest.mark.slow
def test_a_process_killed_while_creating_a_session_leaves_no_session(tmp_path):
    root = tmp_path / "s"
    SessionStore(root).create("other", _img(5))
    proc = _run_until_paused(root, "before_commit", tmp_path / "paused",
                             "s.create('a', np.full((8, 8, 3), 7, np.uint8))")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    s = SessionStore(root)
    assert not s.exists("a") and [x["session_id"] for x in s.list_sessions()] == ["other"]
    assert len(s.create("a", _img(3))) == 1


def test_append_once_adds_a_queued_prompts_turn_only_once(store):
    """ComfyUI re-runs a re-queued prompt on the session it already changed: no second turn."""
    h0 = store.create("a", _img(1))
    prompt = {"1": {"class_type": "ReSpecHistoryAppend", "inputs": {"instruction": "add a hat"}}}
    h1 = store.append_once(h0, _img(2), "add a hat", "add a hat", prompt=prompt, node_id="7")
    again = store.append_once(h1, _img(3), "add a hat", "add a hat", prompt=prompt, node_id="7")
    assert len(h1) == 2 and len(again) == 2 and store.load("a").version == h1.version
    other = store.append_once(h1, _img(3), "add a scarf", "add a scarf", prompt={"x": 1}, node_id="7")
    assert len(other) == 3


def test_append_once_refuses_a_history_that_is_no_longer_current(store):
    h0 = store.create("a", _img(1))
    store.append("a", _img(2), "elsewhere")
    with pytest.raises(StoreError, match="changed since this history was loaded"):
        store.append_once(h0, _img(3), "mine", "mine")


def test_append_once_reserves_its_meta_key(store):
    h0 = store.create("a", _img(1))
    with pytest.raises(InputError, match="reserved"):
        store.append_once(h0, _img(2), "x", "x", meta={"_respec_run": 1})


def test_append_once_ignores_what_comfyui_adds_to_the_queued_prompt(store):
    """ComfyUI stores each node's IS_CHANGED result in the prompt (it changes after every append)."""
    h0 = store.create("a", _img(1))
    queued = {"1": {"class_type": "ReSpecHistoryStore", "inputs": {"session_id": "a"}},
              "2": {"class_type": "ReSpecHistoryAppend", "inputs": {"instruction": "add a hat"}}}
    first = {k: {**v, "is_changed": ["v0"]} for k, v in queued.items()}
    h1 = store.append_once(h0, _img(2), "add a hat", "add a hat", prompt=first, node_id="2")
    second = {k: {**v, "is_changed": ["v1"]} for k, v in queued.items()}
    again = store.append_once(h1, _img(3), "add a hat", "add a hat", prompt=second, node_id="2")
    assert len(again) == 2 and store.load("a").version == h1.version


# ----------------------------------------------------------------------------- whole numbers only

@pytest.mark.parametrize("at", ["1", 1.7, 1.0, True, "abc", [1]])
def test_branch_accepts_only_a_real_integer_turn(store, at):
    store.create("a", _img(0))
    store.append("a", _img(1), "x")
    with pytest.raises(InputError, match="turn must be a whole number"):
        store.branch("a", "b", at)
    assert not store.exists("b")
    assert store.branch("a", "c", np.int64(0)).turns[-1].index == 0


@pytest.mark.parametrize("k", ["1", 1.0, True])
def test_rewind_accepts_only_a_real_integer_turn(store, k):
    store.create("a", _img(0))
    store.append("a", _img(1), "x")
    with pytest.raises(InputError, match="turn must be a whole number"):
        store.rewind("a", k)
    assert len(store.load("a")) == 2


# ----------------------------------------------------------------------------- creating a store

def test_an_empty_database_file_is_a_clear_error_and_stays_empty(tmp_path):
    s = _store_with_db(tmp_path, b"")
    for read in (lambda: s.list_sessions(), lambda: s.exists("a"), lambda: s.create("a", _img(0))):
        with pytest.raises(StoreError, match="empty.*0 bytes") as err:
            read()
        assert "move the file away" not in str(err.value)
    assert (s.root / DB_NAME).stat().st_size == 0


def test_a_new_store_file_never_appears_half_made(tmp_path, monkeypatch):
    # The file appears under its name complete (created aside, then linked into place): at the
    # moment it appears it already holds the schema and is in WAL mode.
    import respec.store.database as store_mod
    seen = []
    real_link = os.link

    def spy(src, dst, *a, **kw):
        con = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
        seen.append((con.execute("SELECT value FROM store_info WHERE key='app'").fetchone(),
                     con.execute("PRAGMA journal_mode").fetchone()[0]))
        con.close()
        assert not Path(dst).exists()
        return real_link(src, dst, *a, **kw)

    monkeypatch.setattr(store_mod.os, "link", spy)
    s = SessionStore(tmp_path / "s")
    s.create("a", _img(0))
    assert seen == [(("respec-session-store",), "wal")]
    assert sorted(p.name for p in s.root.iterdir() if p.name.startswith(DB_NAME)) == \
        [DB_NAME, DB_NAME + "-shm", DB_NAME + "-wal"]
    assert not list(s.root.glob("*.tmp*"))


def test_opening_a_store_never_creates_an_empty_file_under_the_store_name(tmp_path, monkeypatch):
    # the old way: sqlite3.connect created a 0-byte file that other processes could open meanwhile
    import respec.store.database as store_mod
    sizes = []
    real_connect = sqlite3.connect

    def spy(target, *a, **kw):
        db = tmp_path / "s" / DB_NAME
        sizes.append(db.stat().st_size if db.exists() else None)
        con = real_connect(target, *a, **kw)
        if db.exists():
            sizes.append(db.stat().st_size)
        return con

    monkeypatch.setattr(store_mod.sqlite3, "connect", spy)
    SessionStore(tmp_path / "s").list_sessions()
    assert 0 not in sizes


def test_store_identity_is_read_in_one_statement(tmp_path):
    import respec.store.database as store_mod
    # A reader must not see the table list from before another process's creation and the
    # user_version from after it (that mix read as "another program's database").
    s = SessionStore(tmp_path / "s")
    s.list_sessions()
    con = sqlite3.connect(s.db_path)
    statements = []
    con.set_trace_callback(statements.append)
    tables, version = store_mod.identity(con)
    con.close()
    assert tables >= {"sessions", "turns", "store_info"} and version == store_mod.SCHEMA_VERSION
    assert len([q for q in statements if q.strip().upper().startswith(("SELECT", "PRAGMA"))]) == 1


def test_a_busy_store_is_waited_for_and_the_message_states_the_real_wait(tmp_path):
    s = SessionStore(tmp_path / "s", timeout=0.5)
    s.create("a", _img(0))
    s.close()
    con = sqlite3.connect(s.db_path, isolation_level=None)
    con.execute("BEGIN EXCLUSIVE")        # another process holds the write lock
    t0 = time.monotonic()
    with pytest.raises(StoreError, match=r"busy.*0\.5 s") as err:
        SessionStore(s.root, timeout=0.5).append("a", _img(1), "x")
    assert time.monotonic() - t0 >= 0.45
    assert "move the file away" not in str(err.value)
    con.execute("ROLLBACK")
    con.close()


def test_a_transaction_that_fails_is_rolled_back_even_at_commit_and_the_connection_stays_usable():
    from respec.store.database import transaction
    con = sqlite3.connect(":memory:", isolation_level=None)
    con.execute("PRAGMA foreign_keys = ON")
    con.execute("CREATE TABLE p (id INTEGER PRIMARY KEY)")
    con.execute("CREATE TABLE c (pid INTEGER REFERENCES p(id) DEFERRABLE INITIALLY DEFERRED)")
    with pytest.raises(sqlite3.IntegrityError):
        with transaction(con):
            con.execute("INSERT INTO c VALUES (7)")          # no parent: refused only by the COMMIT
    assert not con.in_transaction and con.execute("SELECT count(*) FROM c").fetchone() == (0,)
    with pytest.raises(StoreError, match="mapped: no such table") as err:
        with transaction(con, errors=lambda e: StoreError(f"mapped: {e}")):
            con.execute("INSERT INTO p VALUES (1)")
            con.execute("INSERT INTO nowhere VALUES (1)")
    assert isinstance(err.value.__cause__, sqlite3.OperationalError) and not con.in_transaction
    with pytest.raises(InputError):
        with transaction(con):
            con.execute("INSERT INTO p VALUES (2)")
            raise InputError("not ours to change")           # any other error passes through as it is
    with transaction(con, write=False):
        assert con.execute("SELECT count(*) FROM p").fetchone() == (0,)


@pytest.mark.slow
def test_four_processes_opening_a_fresh_store_at_once_all_succeed(tmp_path):
    # a CI-size run of scripts/dev/stress_store_open.py (the script's default is 4 x 200 rounds)
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "dev" / "stress_store_open.py"), "--rounds", "25",
                           "--workdir", str(tmp_path)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "100 opens, 0 failures" in done.stdout
