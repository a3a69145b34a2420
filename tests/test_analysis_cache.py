"""The one analysis cache (respec/pixels/analysis_cache.py) and the typed change record
(respec/pixels/change_record.py): what is kept is kept in the cache passed in, and a change
record's JSON is read in one place."""
from __future__ import annotations

import numpy as np

from respec.controller.object_turns import object_turns
from respec.history import CHANGE, History, TurnMask
from respec.pixels.alignment import Alignment, alignment_for
from respec.pixels.analysis_cache import CACHE, AnalysisCache
from respec.pixels.change_mask import change_between, change_for, change_record_between, remember_change
from respec.pixels.change_record import ChangeRecord, alignment_of, turn_alignment
from respec.pixels.provenance import provenance_of
from respec.post_edit.record import TurnSoFar
from respec.turn import TurnRecord, keep_turn

from synthetic_scenes import background, draw_rect, u8

SHAPE = (48, 64)


def _history(turns: int) -> History:
    img = background(5, SHAPE)
    h = History.start(u8(img))
    for t in range(1, turns + 1):
        img = draw_rect(img, (4 * t, 5 * t, 4 * t + 8, 5 * t + 8), (0.9, 0.1 * t, 0.2))
        h = h.append(u8(img), f"add a box{t}")
    return h


def test_a_change_record_is_computed_once_and_kept_typed_in_the_cache_passed_in():
    h, cache = _history(1), AnalysisCache()
    prev, cur = h.turns[0].image, h.turns[1].image
    rec = change_record_between(prev, cur, (SHAPE[1], SHAPE[0]), cache=cache)
    assert isinstance(rec, ChangeRecord) and len(cache.changes) == 1 and len(cache.alignments) == 1
    assert change_record_between(prev, cur, (SHAPE[1], SHAPE[0]), cache=cache) is rec
    assert change_between(prev, cur, (SHAPE[1], SHAPE[0]), cache=cache) is rec.stored
    assert cache.stats()["changes"] == {"items": 1, "hits": 2, "misses": 1}


def test_what_one_cache_keeps_another_does_not_see():
    h, a, b = _history(3), AnalysisCache(), AnalysisCache()
    provenance_of(h, cache=a)
    object_turns(h, cache=a)
    assert len(a.heads) == 1 and len(a.packed) == 3 and len(a.object_turns) == 3
    assert all(len(lru) == 0 for lru in b.tables().values())
    assert a.stats()["counts"]["masks_computed"] == 3


def test_clear_forgets_every_table():
    h, cache = _history(2), AnalysisCache()
    provenance_of(h, cache=cache)
    cache.clear()
    assert all(s["items"] == 0 for name, s in cache.stats().items() if name != "counts")


def test_a_remembered_change_record_is_the_one_returned():
    h, cache = _history(1), AnalysisCache()
    prev, cur = h.turns[0].image, h.turns[1].image
    tm = TurnMask.from_mask(np.ones(SHAPE, bool), {"fraction": 1.0})
    remember_change(prev, cur, (SHAPE[1], SHAPE[0]), tm, cache=cache)
    assert change_between(prev, cur, (SHAPE[1], SHAPE[0]), cache=cache) is tm


def test_the_change_record_reads_its_json_once_typed():
    h = _history(1)
    tm = change_for(h, h.turns[1].image, cache=AnalysisCache())
    rec = ChangeRecord.of(tm)
    assert rec.alignment == Alignment.from_record(tm.info["alignment"])
    assert rec.fraction == tm.info["fraction"] and rec.stable_fraction == tm.info["stable_fraction"]
    assert rec.rerendered is tm.info["rerendered"] and rec.resized_from is None
    assert rec.unstable_grid.shape == (len(tm.info["unstable_grid"]), len(tm.info["unstable_grid"][0]))
    assert rec.alignment_record() == tm.info["alignment"] and ChangeRecord.of(rec) is rec


def test_a_turns_alignment_is_its_meta_first_then_its_change_record():
    moved = Alignment(dx=2.0, size=(SHAPE[1], SHAPE[0]))
    tm = TurnMask.from_mask(np.zeros(SHAPE, bool), {"alignment": moved.record()})
    assert alignment_of({}, tm) == moved and alignment_of(None, tm.info) == moved
    assert alignment_of({"alignment": Alignment(dy=1.0).record()}, tm).dy == 1.0
    assert alignment_of({}, None).is_identity


def test_keep_turn_copies_the_change_records_alignment_into_the_turns_meta():
    h = _history(1)
    img = h.turns[1].image
    new = keep_turn(h.rewind(0), img, "add a box1")
    assert new.turns[1].meta["alignment"] == new.turns[1].masks[CHANGE].info["alignment"]
    measured = alignment_for(h.turns[0].image, img, (SHAPE[1], SHAPE[0]), CACHE)
    assert turn_alignment(new.turns[1]) == Alignment.from_record(measured.record())   # as stored: rounded


def test_a_turn_record_is_what_a_post_edit_step_may_read():
    rec = TurnRecord(turn=1, request="remove the box", is_restoration=True)
    seen: TurnSoFar = rec
    assert (seen.request, seen.is_restoration, seen.plan, seen.image, dict(seen.masks)) == \
        ("remove the box", True, None, None, {})
