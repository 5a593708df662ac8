"""How long-running host steps report progress without printing (the Protocol), and the CLI's rich implementation."""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Task(Protocol):
    def advance(self, amount: float = 1) -> None: ...
    def update(self, *, completed: float | None = None, total: float | None = None) -> None: ...
    def done(self) -> None: ...


class Progress(Protocol):
    def task(self, description: str, total: float | None = None, *, announce: bool = False) -> Task: ...


class _SilentTask:
    def advance(self, amount: float = 1) -> None:
        pass

    def update(self, *, completed: float | None = None, total: float | None = None) -> None:
        pass

    def done(self) -> None:
        pass


class SilentProgress:
    """For library callers and tests: progress is tracked nowhere."""

    def task(self, description: str, total: float | None = None, *, announce: bool = False) -> Task:
        return _SilentTask()


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds} s" if seconds < 60 else f"{seconds // 60} min {seconds % 60:02d} s"


def estimate(completed: float, total: float | None, elapsed: float) -> str:
    """`about 1 min 20 s left`, from the pace so far; empty before the first unit is done or without a total."""
    if not total or completed <= 0 or completed >= total:
        return ""
    return f"about {_duration(elapsed * (total - completed) / completed)} left"


def _count(n: float) -> str:
    """A count in at most 6 characters: 20, 1523, 20.7M."""
    if n < 10_000:
        return f"{n:.0f}"
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return f"{n:.0f}"


class RichProgress:
    """The CLI's progress: on a terminal, one live line per step; piped, one plain line per finished step.

    On a terminal the display starts with the first step (an error before it leaves no blank line), is
    redrawn 5 times a second in columns whose widths depend on the terminal's width only (a new, longer step
    does not shift the others: the description takes what the fixed-width columns leave, and is cut with
    an ellipsis), and a step's spinner stops when the step is done, whatever its count says (a redeploy
    that sends nothing).
    Piped or on a dumb terminal there is no live display at all: no cursor movement, no `\\r`, no colour.
    """

    BAR_WIDTH = 16
    COUNT_WIDTH = 13

    def __init__(self, console, heartbeat_s: float | None = None) -> None:
        self._console = console
        self._live = console.is_terminal and not console.is_dumb_terminal
        self._started = False
        self._lock = threading.Lock()
        # heartbeat_s (long commands, sdk optimize): on a terminal an estimate column; piped, a line every heartbeat_s
        # for each step under way (its count, its time so far, an estimate), so that a log never goes quiet for long.
        self._heartbeat_s = heartbeat_s
        self._running: list[_PlainTask] = []
        self._stop = threading.Event()
        self._beating: threading.Thread | None = None
        if self._live:
            self._progress = self._rich_progress(console)

    def _rich_progress(self, console):
        from rich.progress import BarColumn, ProgressColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as Display
        from rich.table import Column
        from rich.text import Text

        class Spinner(SpinnerColumn):
            def render(self, task):
                return self.finished_text if task.stop_time is not None else super().render(task)

        class Count(ProgressColumn):
            def render(self, task):
                total = "?" if task.total is None else _count(task.total)
                return Text(f"{_count(task.completed)}/{total}", style="progress.download")

        class Left(ProgressColumn):
            def render(self, task):
                text = estimate(task.completed, task.total, task.elapsed or 0.0) if task.stop_time is None else ""
                return Text(text.replace("about ", "~"), style="progress.remaining")

        estimates = [Left(table_column=Column(width=18, justify="right", no_wrap=True))] if self._heartbeat_s else []
        return Display(
            Spinner(finished_text=" "),
            TextColumn("{task.description}", table_column=Column(ratio=1, no_wrap=True, overflow="ellipsis")),
            BarColumn(bar_width=self.BAR_WIDTH),
            Count(table_column=Column(width=self.COUNT_WIDTH, justify="right", no_wrap=True)),
            TimeElapsedColumn(),
            *estimates,
            console=console,
            transient=False,
            refresh_per_second=5,
            expand=True,  # the description column fills the width the others leave
        )

    def __enter__(self) -> RichProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._beating is not None:
            self._beating.join()
        if self._live and self._started:
            self._progress.stop()

    def _beat(self) -> None:
        while not self._stop.wait(self._heartbeat_s):
            with self._lock:
                running = [t for t in self._running if not t.finished]
                self._running = running
            for task in running:
                if task.elapsed >= self._heartbeat_s / 2:  # a step begun just now has nothing to say yet
                    task.say_where()

    def task(self, description: str, total: float | None = None, *, announce: bool = False) -> Task:
        """`announce`: piped, the step is also said when it begins (a wait of unknown length, never silent)."""
        if not self._live:
            if announce:
                self._console.print(f"{description} ...", markup=False, highlight=False, soft_wrap=True)
            plain = _PlainTask(self._console, description, total)
            if self._heartbeat_s:
                with self._lock:
                    self._running.append(plain)
                    if self._beating is None:
                        self._beating = threading.Thread(target=self._beat, name="progress-heartbeat", daemon=True)
                        self._beating.start()
            return plain
        with self._lock:  # a fleet's targets add steps from several threads
            task = _LiveTask(self._progress, self._progress.add_task(description, total=total))
            if not self._started:
                self._progress.start()
                self._started = True
        return task


class _LiveTask:
    def __init__(self, progress, task_id) -> None:
        self._progress, self._id = progress, task_id

    def advance(self, amount: float = 1) -> None:
        self._progress.advance(self._id, amount)

    def update(self, *, completed: float | None = None, total: float | None = None) -> None:
        kwargs = {k: v for k, v in (("completed", completed), ("total", total)) if v is not None}
        self._progress.update(self._id, **kwargs)

    def done(self) -> None:
        task = self._progress.tasks[self._id]
        if task.total is None:
            self._progress.update(self._id, total=max(task.completed, 1), completed=max(task.completed, 1))
        self._progress.stop_task(self._id)


class _PlainTask:
    """Piped output: nothing while the step runs, one line when it is done (`sending release ...: 20.7M/20.7M in 0.3 s`)."""

    def __init__(self, console, description: str, total: float | None) -> None:
        self._console, self._description, self._total = console, description, total
        self._completed = 0.0
        self._started = time.monotonic()
        self._done = False

    def advance(self, amount: float = 1) -> None:
        self._completed += amount

    def update(self, *, completed: float | None = None, total: float | None = None) -> None:
        if completed is not None:
            self._completed = completed
        if total is not None:
            self._total = total

    @property
    def finished(self) -> bool:
        return self._done

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self._started

    def say_where(self) -> None:
        """A line for a step still under way: `refitting ...: 3/12, 45 s so far, about 2 min 15 s left`."""
        elapsed = time.monotonic() - self._started
        count = f"{_count(self._completed)}/{_count(self._total)}, " if self._total is not None else ""
        left = estimate(self._completed, self._total, elapsed)
        line = f"{self._description}: {count}{_duration(elapsed)} so far" + (f", {left}" if left else "")
        self._console.print(line, markup=False, highlight=False, soft_wrap=True)

    def done(self) -> None:
        if self._done:
            return
        self._done = True
        count = f"{_count(self._completed)}/{_count(self._total)} " if self._total is not None else ""
        line = f"{self._description}: {count}in {time.monotonic() - self._started:.1f} s"
        self._console.print(line, markup=False, highlight=False, soft_wrap=True)
