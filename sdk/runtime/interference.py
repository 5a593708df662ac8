"""Interference mode: CPU and memory-bandwidth stress on the device while the pipeline runs.

A budget that holds on an idle board says little about a vehicle where planning, logging and
other perception stacks share the CPUs and the memory bus. The stress runs in separate
processes (so the GIL of the runtime is not involved), at normal priority, and stops with the run.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass

from sdk.errors import ConfigError

# A CPU worker spins; a memory worker streams through its buffer (bandwidth, not just residency).
_CPU_WORKER = "while True: pass"
_MEMORY_WORKER = "import sys\nsize = int(sys.argv[1]) << 20\na = bytearray(size); b = bytearray(size)\nwhile True:\n    a[:] = b; b[:] = a\n"


@dataclass(frozen=True)
class InterferencePlan:
    cpu_workers: int = 0
    memory_workers: int = 0
    memory_mb: int = 64  # per memory worker, two buffers of this size

    @classmethod
    def parse(cls, text: str) -> InterferencePlan:
        """`cpu=2,memory=1,memory_mb=256` (the `--stress` flag)."""
        values = {}
        for part in filter(None, text.split(",")):
            key, _, value = part.partition("=")
            if key not in ("cpu", "memory", "memory_mb") or not value.isdigit():
                raise ConfigError(
                    f"--stress {text!r}: {part!r} is not KEY=N",
                    hint="use e.g. --stress cpu=2,memory=1,memory_mb=256 (keys: cpu, memory, memory_mb)",
                )
            values[key] = int(value)
        plan = cls(values.get("cpu", 0), values.get("memory", 0), values.get("memory_mb", 64))
        if plan.cpu_workers + plan.memory_workers > 64 or plan.memory_mb > 4096:
            raise ConfigError(f"--stress {text!r} asks for too much", hint="at most 64 workers and 4096 MB each")
        return plan

    def describe(self) -> dict:
        return {"cpu_workers": self.cpu_workers, "memory_workers": self.memory_workers, "memory_mb": self.memory_mb}


class Interference:
    """A context manager: workers start on enter and are killed on exit, whatever happened."""

    def __init__(self, plan: InterferencePlan) -> None:
        self.plan = plan
        self._workers: list[subprocess.Popen] = []

    def __enter__(self) -> Interference:
        try:
            for _ in range(self.plan.cpu_workers):
                self._workers.append(subprocess.Popen([sys.executable, "-c", _CPU_WORKER]))
            for _ in range(self.plan.memory_workers):
                self._workers.append(subprocess.Popen([sys.executable, "-c", _MEMORY_WORKER, str(self.plan.memory_mb)]))
        except BaseException:
            self.__exit__()
            raise
        return self

    @property
    def running(self) -> int:
        return sum(worker.poll() is None for worker in self._workers)

    def __exit__(self, *exc: object) -> None:
        for worker in self._workers:
            worker.kill()
        for worker in self._workers:
            worker.wait()
        self._workers.clear()
