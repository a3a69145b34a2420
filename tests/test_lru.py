"""The core's one LRU cache (respec/lru.py): its eviction rules and its bounds."""
import threading

import numpy as np
import pytest

from respec.lru import LRU


def test_the_least_recently_used_item_goes_first():
    c = LRU(2)
    c.put("a", 1)
    c.put("b", 2)
    c.put("c", 3)
    assert c.keys() == ["b", "c"] and c.get("a") is None


def test_a_hit_counts_as_a_use():
    c = LRU(2)
    c.put("a", 1)
    c.put("b", 2)
    assert c.get("a") == 1
    c.put("c", 3)
    assert c.keys() == ["a", "c"]


def test_a_peek_does_not_count_as_a_use():
    c = LRU(2)
    c.put("a", 1)
    c.put("b", 2)
    assert c.peek("a") == 1 and c.peek("x", "none") == "none"
    c.put("c", 3)
    assert c.keys() == ["b", "c"]


def test_a_put_replaces_and_counts_as_a_use():
    c = LRU(2)
    c.put("a", 1)
    c.put("b", 2)
    c.put("a", 10)
    c.put("c", 3)
    assert c.keys() == ["a", "c"] and c.get("a") == 10


def test_the_byte_bound_holds_and_replacing_an_item_recounts_its_bytes():
    c = LRU(max_bytes=100, size_of=lambda a: a.nbytes)
    for k in range(5):
        c.put(k, np.zeros(30, np.uint8))
    assert c.keys() == [2, 3, 4]
    c.put(4, np.zeros(70, np.uint8))     # 30 + 30 + 70 > 100: the oldest goes
    assert c.keys() == [3, 4]


def test_an_item_larger_than_the_byte_bound_is_not_kept():
    c = LRU(max_bytes=100, size_of=len)
    c.put("small", b"x" * 10)
    c.put("big", b"x" * 101)
    assert c.keys() == ["small"]
    c.put("small", b"x" * 101)           # a replacement too big to keep drops the old value
    assert len(c) == 0


def test_both_bounds_hold_together():
    c = LRU(3, max_bytes=10, size_of=len)
    for k in range(5):
        c.put(k, b"x")
    assert c.keys() == [2, 3, 4]
    c.put("big", b"x" * 9)
    assert c.keys() == [4, "big"]


def test_a_byte_bound_needs_a_size():
    with pytest.raises(ValueError):
        LRU(max_bytes=10)


def test_clear_forgets_items_and_their_bytes():
    c = LRU(max_bytes=10, size_of=len)
    c.put("a", b"x" * 10)
    c.clear()
    c.put("b", b"x" * 10)
    assert c.keys() == ["b"]


def test_many_threads_never_push_it_past_its_bounds():
    c = LRU(16, max_bytes=400, size_of=len)
    seen, errors = [], []

    def work(seed):
        rng = np.random.default_rng(seed)
        try:
            for _ in range(2000):
                k = int(rng.integers(64))
                if c.get(k) is None:
                    c.put(k, b"x" * int(rng.integers(1, 60)))
                seen.append(len(c))
        except Exception as e:   # noqa: BLE001 - reported below, in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and max(seen) <= 16
    assert c._bytes <= 400 and c._bytes == sum(len(c.peek(k)) for k in c.keys())
