"""One interface for every inference backend: named tensors, buffers bound once, infer() per frame.

A caller fills `inputs[name]` in place, calls `infer()`, and reads `outputs[name]`; the
arrays never change identity, so nothing is allocated per frame. A TensorRT backend binds
the same way (device or pinned buffers behind numpy views) without changing callers.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from sdk.tensors import TensorSpec


class Backend(ABC):
    name = "backend"
    # The engine's tensors live in GPU memory that CUDA kernels can read and write in place (keep_on_device,
    # device_address, enqueue on stream_handle): what the CUDA path needs (sdk/preprocess/cuda.py).
    device_bindings = False

    def __init__(self) -> None:
        self.inputs: dict[str, np.ndarray] = {}
        self.outputs: dict[str, np.ndarray] = {}

    def __enter__(self) -> Backend:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @abstractmethod
    def open(self) -> None:
        """Load the model and allocate and bind every input and output buffer."""

    @abstractmethod
    def infer(self) -> None:
        """Run once on the current input buffers; results land in the output buffers."""

    @abstractmethod
    def close(self) -> None: ...

    @property
    @abstractmethod
    def input_specs(self) -> tuple[TensorSpec, ...]: ...

    @property
    @abstractmethod
    def output_specs(self) -> tuple[TensorSpec, ...]: ...

    def slowest_layers(self, count: int = 5) -> list[tuple[str, float]]:
        """(layer, total ms) of the layers that took longest, where the backend profiles its layers; else none."""
        return []

    def constants_written(self, names: tuple[str, ...]) -> None:
        """These inputs were written once and never change: a backend that copies inputs per frame may copy them now, once."""
        return None  # ONNX Runtime reads the bound buffers themselves: nothing to do

    def describe(self) -> str:
        return self.name
