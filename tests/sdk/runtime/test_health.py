"""The health monitor: NOMINAL/DEGRADED transitions, shedding, error storms, the sliding window."""

from __future__ import annotations

import socket
import tracemalloc

from sdk.runtime.health import DEGRADED, NOMINAL, STARTING, STOPPED, HealthMonitor
from sdk.service.notify import Notifier
from sdk.spec.schema import DegradedMode

MS = 1_000_000


def test_degraded_after_consecutive_misses_and_nominal_after_recovery():
    monitor = HealthMonitor(33.3, DegradedMode(after_misses=3, recover_after=4, process_every=2))
    assert monitor.state == STARTING
    monitor.frame(10 * MS)
    assert monitor.state == NOMINAL
    for _ in range(2):
        monitor.frame(50 * MS)
    monitor.frame(10 * MS)  # a hit breaks the streak
    for _ in range(2):
        monitor.frame(50 * MS)
    assert monitor.state == NOMINAL and monitor.misses == 4
    monitor.frame(50 * MS)
    assert monitor.state == DEGRADED and monitor.transitions == 2
    # While DEGRADED only every second frame is processed; the others are shed and counted.
    assert [monitor.admit(i) for i in range(6)] == [True, False, True, False, True, False] and monitor.shed == 3
    for _ in range(3):
        monitor.frame(10 * MS)
    assert monitor.state == DEGRADED
    monitor.frame(10 * MS)
    assert monitor.state == NOMINAL and all(monitor.admit(i) for i in range(4))
    snap = monitor.snapshot()
    assert snap["state"] == NOMINAL and snap["frames"] == 11 and snap["window"]["max_ms"] == 50.0 and snap["window"]["p50_ms"] == 10.0
    monitor.stop()
    assert monitor.snapshot()["state"] == STOPPED


def test_an_error_storm_escalates_without_a_deadline():
    monitor = HealthMonitor(None, DegradedMode(after_misses=5))
    monitor.frame(500 * MS)
    assert monitor.state == NOMINAL and monitor.misses == 0  # no deadline: latency alone never degrades
    for _ in range(5):
        monitor.failed()
    assert monitor.state == DEGRADED and monitor.snapshot()["errors"] == 5


def test_recording_a_frame_allocates_nothing():
    monitor = HealthMonitor(33.3, DegradedMode(), window=64)
    for _ in range(100):
        monitor.frame(10 * MS)
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for i in range(5000):
            monitor.admit(i)
            monitor.frame((10 + i % 40) * MS)
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    growth = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    assert growth < 4096  # not per frame: 5000 frames would be far more


def test_notifier_speaks_the_systemd_protocol_to_a_real_socket(tmp_path, monkeypatch):
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(str(tmp_path / "notify"))
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "notify"))
    monkeypatch.setenv("WATCHDOG_USEC", "4000000")
    notifier = Notifier()
    assert notifier.enabled and notifier.watchdog_interval_s == 2.0
    assert notifier.ready("up") and notifier.watchdog() and notifier.stopping()
    messages = [listener.recv(1024).decode() for _ in range(3)]
    assert messages[0].splitlines()[0] == "READY=1" and "STATUS=up" in messages[0] and messages[1:] == ["WATCHDOG=1", "STOPPING=1"]
    listener.close()
    assert not notifier.watchdog()  # the manager went away: no exception, the service keeps running
    monkeypatch.delenv("NOTIFY_SOCKET")
    assert not Notifier().enabled and not Notifier().ready()


def test_cyclic_garbage_is_collected_while_the_gc_is_kept_out_of_the_loop():
    import gc
    import weakref

    from sdk.service.realtime import GcOutOfTheLoop

    class Node:
        pass

    with GcOutOfTheLoop() as guard:
        assert not gc.isenabled()
        holder, survivors = [], []
        for _ in range(3):
            a, b = Node(), Node()
            a.other, b.other = b, a  # a cycle: reference counting alone never frees it
            holder.append(a)
            survivors.append(weakref.ref(a))
            del a, b
        for _ in range(25):
            guard.collect()  # still reachable: promoted out of the young generation
        holder.clear()  # now garbage, but in an old generation
        for _ in range(GcOutOfTheLoop.FULL_EVERY):
            guard.collect()
        assert all(ref() is None for ref in survivors)  # the rotation reaches the oldest generation too
    assert gc.isenabled()
