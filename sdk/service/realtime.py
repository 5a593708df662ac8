"""Real-time settings of the frame loop: CPU affinity, SCHED_FIFO, locked memory, the GC kept out.

Each is applied where the OS permits and otherwise reported as a warning (a container or a user
without CAP_SYS_NICE / RLIMIT_MEMLOCK cannot have them); none is ever silently skipped.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os

from sdk.spec.schema import Service

MCL_CURRENT, MCL_FUTURE = 1, 2


def apply_realtime(service: Service) -> tuple[dict, list[str]]:
    """(what was applied, warnings) for this process and the threads it starts afterwards."""
    applied: dict = {}
    warnings: list[str] = []
    if service.cpu_affinity is not None:
        try:
            os.sched_setaffinity(0, set(service.cpu_affinity))
            applied["cpu_affinity"] = sorted(os.sched_getaffinity(0))
        except OSError as exc:
            warnings.append(f"cpu_affinity {list(service.cpu_affinity)} not applied: {exc.strerror}")
    if service.realtime_priority is not None:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(service.realtime_priority))
            applied["sched_fifo"] = service.realtime_priority
        except OSError as exc:
            warnings.append(f"SCHED_FIFO priority {service.realtime_priority} not applied ({exc.strerror}): needs CAP_SYS_NICE or LimitRTPRIO")
    if service.lock_memory:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        if libc.mlockall(MCL_CURRENT | MCL_FUTURE) == 0:
            applied["mlockall"] = True
        else:
            warnings.append(f"mlockall not applied ({os.strerror(ctypes.get_errno())}): needs CAP_IPC_LOCK or LimitMEMLOCK=infinity")
    return applied, warnings


class GcOutOfTheLoop:
    """Automatic collection off while frames flow; collected explicitly at status time instead.

    Everything built at start-up is frozen first (gc.freeze), so the explicit collections scan
    only what the loop created, which is almost nothing. Every generation is collected in turn:
    collecting only the youngest would promote cyclic garbage into generations nothing collects."""

    FULL_EVERY = 60  # calls: with the default 1 s status interval, a full collection a minute

    def __enter__(self) -> GcOutOfTheLoop:
        gc.collect()
        gc.freeze()
        self._was_enabled = gc.isenabled()
        self._calls = 0
        gc.disable()
        return self

    def collect(self) -> int:
        self._calls += 1
        generation = 2 if self._calls % self.FULL_EVERY == 0 else 1 if self._calls % 10 == 0 else 0
        return gc.collect(generation)

    def __exit__(self, *exc: object) -> None:
        if self._was_enabled:
            gc.enable()
        gc.unfreeze()
