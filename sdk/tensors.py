"""A named tensor's shape and element type: what a backend binds and what a prepared model declares."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: object  # a numpy dtype

    def describe(self) -> str:
        import numpy as np

        return f"{self.name} {list(self.shape)} {np.dtype(self.dtype).name}"


__all__ = ["TensorSpec"]
