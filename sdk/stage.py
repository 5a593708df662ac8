"""The lifecycle every pipeline stage shares: a context manager that releases what it holds on exit."""

from __future__ import annotations


class Stage:
    """Stages hold their buffers from construction; `close()` releases anything beyond memory."""

    name = "stage"

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        pass
