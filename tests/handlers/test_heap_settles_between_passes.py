"""Between reconcile passes the heap is settled: survivors frozen out of the cyclic collector's traversals, garbage
left by a pass collected, and every object examined again once the frozen part has doubled."""

from __future__ import annotations

import gc
import weakref
from typing import TYPE_CHECKING, Any

import pytest

from nodesmith.handlers import heap

if TYPE_CHECKING:
    from collections.abc import Iterator


class Cycle:
    """An object that refers to itself: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me: Any = self


@pytest.fixture(autouse=True)
def fresh_heap() -> Iterator[None]:
    gc.unfreeze()
    heap._frozen.clear()
    yield
    gc.unfreeze()
    heap._frozen.clear()


def _in_a_generation(obj: object) -> bool:
    return any(o is obj for o in gc.get_objects())


def test_settle_freezes_survivors_and_collects_what_a_pass_left() -> None:
    kept = [[n] for n in range(1_000)]
    frozen = heap.settle()
    assert frozen > len(kept)
    assert 0 <= gc.get_freeze_count() - frozen <= 10  # every survivor counted (a few objects come alive as it returns)
    assert gc.is_tracked(kept[0]) and not _in_a_generation(kept[0])  # tracked, in no generation: frozen

    left = Cycle()  # garbage a later pass leaves: collected by the next settle, which examines only new objects
    gone = weakref.ref(left)
    del left
    heap.settle()
    assert gone() is None


def test_a_frozen_cycle_dropped_later_is_freed_once_the_frozen_count_doubles() -> None:
    heap.settle()
    held = Cycle()
    ref = weakref.ref(held)
    heap.settle()  # frozen while alive
    del held
    heap.settle()
    assert ref() is not None  # a frozen cycle waits: no collection traverses it

    grown = [[n] for n in range(int(heap.REEXAMINE_GROWTH * gc.get_freeze_count()))]
    heap.settle()  # freezes the growth: the frozen count has now more than doubled since the first examination
    assert ref() is not None
    heap.settle()  # so this one unfreezes and examines everything
    assert ref() is None
    examined_at = gc.get_freeze_count()
    assert grown and heap._frozen == [examined_at, 0]  # the examination starts a new baseline


@pytest.fixture
def thresholds() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)


def _full_collections_while_keeping(count: int) -> int:
    """How many full collections run while ``count`` container objects are built and kept, as a first listing does."""
    before = gc.get_stats()[2]["collections"]
    kept = [[n] for n in range(count)]
    after = gc.get_stats()[2]["collections"]
    del kept
    return after - before


@pytest.mark.usefixtures("thresholds")
def test_tuned_the_collector_runs_far_fewer_full_collections_while_a_pass_builds_what_it_keeps() -> None:
    gc.set_threshold(700, 10, 10)  # CPython's default
    default = _full_collections_while_keeping(2_000_000)
    heap.tune()
    assert gc.get_threshold() == (heap.YOUNG_THRESHOLD, 10, 10)
    tuned = _full_collections_while_keeping(2_000_000)
    assert default >= 3 and tuned * 3 <= default, (default, tuned)


@pytest.mark.usefixtures("thresholds")
def test_tune_leaves_a_higher_threshold_and_a_collector_turned_off_as_they_are() -> None:
    gc.set_threshold(heap.YOUNG_THRESHOLD * 2, 5, 20)
    heap.tune()
    assert gc.get_threshold() == (heap.YOUNG_THRESHOLD * 2, 5, 20)
    gc.set_threshold(0, 10, 10)
    heap.tune()
    assert gc.get_threshold()[0] == 0
