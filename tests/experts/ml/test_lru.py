"""experts.ml.lru.Lru: the bounded map behind the chunk sentence cache and the answer cache."""

from __future__ import annotations

from experts.ml.lru import Lru


def test_the_least_recently_used_item_goes_first():
    lru: Lru[str, int] = Lru(2)
    lru.put("a", 1)
    lru.put("b", 2)
    assert lru.get("a") == 1  # "b" is now the least recently used
    lru.put("c", 3)

    assert lru.get("b") is None
    assert (lru.get("a"), lru.get("c"), len(lru)) == (1, 3, 2)
    assert (lru.hits, lru.misses) == (3, 1)


def test_size_zero_holds_nothing_and_clear_empties_it():
    off: Lru[str, int] = Lru(0)
    off.put("a", 1)
    assert (off.get("a"), len(off), off.misses) == (None, 0, 0)
    lru: Lru[str, int] = Lru(3)
    lru.put("a", 1)
    lru.clear()
    assert (lru.get("a"), len(lru)) == (None, 0)
