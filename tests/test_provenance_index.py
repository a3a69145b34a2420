"""The provenance index (respec/pixels/provenance_index.py): the same answers as reading every mask,
kept incrementally, each missing mask computed once."""
from __future__ import annotations

import numpy as np
import pytest

from respec.history import CHANGE, History, Turn
from respec.pixels import change_mask as changes, provenance_index
from respec.lru import LRU
from respec.pixels.analysis_cache import CACHE, MAX_HEADS, AnalysisCache
from respec.pixels.change_mask import change_for
from respec.pixels.provenance import provenance_of

from synthetic_scenes import background, draw_rect, u8

SHAPE = (48, 64)


def _box(t: int) -> tuple[int, int, int, int]:
    y, x = (7 * t) % (SHAPE[0] - 10), (11 * t) % (SHAPE[1] - 10)
    return (y, x, y + 8, x + 8)


def _history(turns: int, store_masks: bool = True) -> History:
    """Each turn paints an 8x8 square of its own colour at its own place."""
    img = background(3, SHAPE)
    h = History.start(u8(img))
    for t in range(1, turns + 1):
        img = draw_rect(img, _box(t), ((t * 37 % 255) / 255.0, 0.1, 0.9))
        arr = u8(img)
        h = h.append(arr, f"add a box{t}", masks={CHANGE: change_for(h, arr)} if store_masks else None)
    return h


def _bare(h: History) -> History:
    return History(tuple(Turn(t.index, t.image, t.instruction, t.sent_instruction) for t in h.turns))


def _reference(h: History) -> tuple[list[np.ndarray], np.ndarray]:
    """Every mask read the slow way, and the loop "out[C_t] = t"."""
    masks = [np.zeros(SHAPE, bool)] + [t.masks[CHANGE].mask for t in h.turns[1:]]
    last = np.zeros(SHAPE, np.int32)
    for t, m in enumerate(masks):
        if t:
            last[m] = t
    return masks, last


@pytest.fixture(autouse=True)
def _fresh_index():
    provenance_index.clear()
    yield
    provenance_index.clear()


def test_the_index_gives_the_answers_of_reading_every_mask():
    h = _history(12)
    masks, last = _reference(h)
    prov = provenance_of(h)
    assert len(prov.changes) == 13 and prov.computed == ()
    assert np.array_equal(prov.last_change(), last)
    for t in range(13):
        assert np.array_equal(prov.changes[t], masks[t])
        assert prov.share(t) == float(masks[t].mean())
    for k in (0, 3, 11, 12):
        assert np.array_equal(prov.unchanged_since(k), last <= k)
    assert np.array_equal(prov.stack(), np.stack(masks))


def test_one_more_turn_stamps_one_turn():
    h = _history(10)
    provenance_of(h)
    before = provenance_index.stats()
    img = h.current.image.array.copy()
    img[0:6, 0:6] = 255
    longer = h.append(img, "add a white corner", masks={CHANGE: change_for(h, img)})
    prov = provenance_of(longer)
    after = provenance_index.stats()
    assert after["turns_stamped"] - before["turns_stamped"] == 1
    assert after["summaries_made"] - before["summaries_made"] == 1
    assert prov.last_change()[2, 2] == 11
    provenance_of(longer)     # asked again: nothing new
    assert provenance_index.stats() == after


def test_a_history_without_stored_masks_computes_each_missing_mask_once_past_64_turns(monkeypatch):
    h = _bare(_history(70, store_masks=False))
    calls = []
    real = changes.change_mask
    monkeypatch.setattr(changes, "change_mask", lambda *a, **k: calls.append(1) or real(*a, **k))
    CACHE.changes.clear()
    first = provenance_of(h)
    assert first.computed == tuple(range(1, 71)) and len(calls) == 70
    again = provenance_of(h)
    assert len(calls) == 70, "the 64-entry cache must not make the index compute masks again"
    assert np.array_equal(again.last_change(), first.last_change())
    # A copy of the same turns (a session loaded again) finds the same summaries.
    CACHE.heads.clear()
    provenance_of(_bare(h))
    assert len(calls) == 70


def test_computed_masks_equal_stored_ones():
    h = _history(5)
    stored, bare = provenance_of(h), provenance_of(_bare(h))
    assert bare.computed == (1, 2, 3, 4, 5)
    for a, b in zip(stored.changes, bare.changes):
        assert np.array_equal(a, b)
    assert np.array_equal(stored.last_change(), bare.last_change())


def test_a_rewind_and_branch_reuses_the_common_turns_summaries():
    h = _history(8)
    provenance_of(h)
    made = provenance_index.stats()["summaries_made"]
    branch = h.rewind(4)
    img = branch.current.image.array.copy()
    img[40:46, 50:60] = 0
    branch = branch.append(img, "add a black bar", masks={CHANGE: change_for(branch, img)})
    prov = provenance_of(branch)
    assert provenance_index.stats()["summaries_made"] == made + 1
    masks, last = _reference(branch)
    assert np.array_equal(prov.last_change(), last)


def test_turns_touching_a_turns_blocks():
    h = _history(6)
    idx = provenance_of(h).index
    masks, _ = _reference(h)
    for t in range(1, 7):
        touching = idx.turns_touching(t)
        for j in range(1, 7):
            if j != t and (masks[j] & masks[t]).any():
                assert j in touching     # a superset of the pixel overlaps


def test_block_grid_marks_the_blocks_of_changed_pixels():
    m = np.zeros((64, 64), bool)
    m[0, 0] = m[63, 40] = True
    g = provenance_index.block_grid(m, 8)
    assert g.shape == (8, 8) and g.sum() == 2 and g[0, 0] and g[7, 5]
    assert provenance_index.block_grid(np.ones((3, 5), bool)).shape == (3, 3)


def test_the_maps_kept_stay_within_their_byte_budget():
    cache = AnalysisCache(heads=LRU(max_items=MAX_HEADS, max_bytes=3 * SHAPE[0] * SHAPE[1] * 4,
                                    size_of=lambda head: head.last.nbytes))
    h = _history(6)
    for k in range(1, 7):
        provenance_of(h.rewind(k), cache=cache)
    assert len(cache.heads) == 3
    masks, last = _reference(h)
    assert np.array_equal(provenance_of(h, cache=cache).last_change(), last), "an evicted map is built again"
