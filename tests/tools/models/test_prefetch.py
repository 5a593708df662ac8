"""Reading ahead keeps order, carries errors to the consumer, and closes the source when left early."""

from __future__ import annotations

import threading

import pytest

from tools.models.prefetch import Prefetched


def test_items_arrive_in_order_and_all_of_them():
    with Prefetched(iter(range(1000)), depth=4) as items:
        assert list(items) == list(range(1000))


def test_an_error_in_the_source_reaches_the_consumer_after_the_items_before_it():
    def source():
        yield 1
        yield 2
        raise ValueError("frame 3 is unreadable")

    seen = []
    with Prefetched(source()) as items, pytest.raises(ValueError, match="frame 3"):
        for item in items:
            seen.append(item)
    assert seen == [1, 2]


def test_leaving_early_closes_the_source_and_ends_the_thread():
    closed = threading.Event()

    def source():
        try:
            yield from range(10_000)
        finally:
            closed.set()  # a reader's `with` block would end here

    before = set(threading.enumerate())
    with Prefetched(source(), depth=2) as items:
        started = [t for t in set(threading.enumerate()) - before if t.name == "prefetch"]  # this reader's own thread
        for item in items:
            if item == 3:
                break
    # Only the thread this test started is looked at: other tests' threads (ssh keepalives, readers) may come and go.
    assert len(started) == 1 and closed.wait(5) and not started[0].is_alive()


def test_iterating_outside_the_block_is_refused():
    with pytest.raises(RuntimeError, match="outside its `with` block"):
        next(iter(Prefetched(iter([1]))))
