"""Whether the emulated CUDA device is asked for (`SDK_CUDA_EMULATION=host`), and as which memory model.

Read by every start that chooses `preprocess.device` (sdk/preprocess/cuda.py `choose_device`), on the CPU path too;
kept apart from the emulated device itself (sdk/gpu/emulation.py: its stream, its reference kernels, ctypes), which
only a start that emulates loads.
"""

from __future__ import annotations

import os

from sdk.errors import ConfigError

ENV = "SDK_CUDA_EMULATION"
MEMORY_ENV = "SDK_CUDA_EMULATION_MEMORY"


def emulated_memory() -> str:
    """The emulated device's input memory: `mapped` (Jetson, the default) or `copy` (a discrete GPU)."""
    value = os.environ.get(MEMORY_ENV, "") or "mapped"
    if value not in ("mapped", "copy"):
        raise ConfigError(f"{MEMORY_ENV}={value!r}: allowed: mapped (Jetson) or copy (discrete GPU)")
    return value


def emulation_requested() -> bool:
    """Whether SDK_CUDA_EMULATION asks for the host emulation; any value but `host` (or unset) is an error."""
    value = os.environ.get(ENV, "")
    if value in ("", "0", "off"):
        return False
    if value != "host":
        raise ConfigError(f"{ENV}={value!r}: allowed: host (or unset)", hint=f"export {ENV}=host to run the CUDA path on host buffers")
    return True


__all__ = ["ENV", "MEMORY_ENV", "emulated_memory", "emulation_requested"]
