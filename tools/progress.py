"""How long-running host steps report progress without printing: the CLI supplies a rich implementation."""

from __future__ import annotations

from typing import Protocol


class Task(Protocol):
    def advance(self, amount: float = 1) -> None: ...
    def update(self, *, completed: float | None = None, total: float | None = None) -> None: ...
    def done(self) -> None: ...


class Progress(Protocol):
    def task(self, description: str, total: float | None = None) -> Task: ...


class _SilentTask:
    def advance(self, amount: float = 1) -> None:
        pass

    def update(self, *, completed: float | None = None, total: float | None = None) -> None:
        pass

    def done(self) -> None:
        pass


class SilentProgress:
    """For library callers and tests: progress is tracked nowhere."""

    def task(self, description: str, total: float | None = None) -> Task:
        return _SilentTask()
