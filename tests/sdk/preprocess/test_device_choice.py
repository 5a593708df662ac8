"""`preprocess.device` chosen at every start: on the CPU path without loading the emulated CUDA device or the kernel plans.

Each run and service start chooses the device; the emulated device (sdk/gpu/emulation.py: its stream, the kernels'
numpy twins, ctypes) and the plans (sdk/gpu/plan.py, binaries.py) are for a start that takes the CUDA path. Here they
are made unimportable (`sys.modules[name] = None`), so a choice that imported them would fail.
"""

from __future__ import annotations

import sys

import pytest

from sdk.errors import ConfigError

CUDA_ONLY = ("sdk.gpu.emulation", "sdk.gpu.emulated_stream", "sdk.gpu.reference", "sdk.gpu.plan", "sdk.gpu.binaries")


@pytest.fixture()
def cuda_only_modules_missing(monkeypatch):
    import sdk.preprocess

    for name in CUDA_ONLY:
        monkeypatch.setitem(sys.modules, name, None)
    if "sdk.preprocess.cuda" in sys.modules:  # imported afresh, as a start imports it; the loaded one put back after
        monkeypatch.setattr(sdk.preprocess, "cuda", sys.modules["sdk.preprocess.cuda"], raising=False)
        monkeypatch.delitem(sys.modules, "sdk.preprocess.cuda")


@pytest.mark.parametrize("requested", ["auto", "cpu"])
def test_the_cpu_path_is_chosen_without_the_cuda_only_modules(cuda_only_modules_missing, monkeypatch, requested):
    monkeypatch.delenv("SDK_CUDA_EMULATION", raising=False)
    from sdk.preprocess.cuda import choose_device

    choice = choose_device(requested, None, None)
    assert choice.device == "cpu" and not choice.emulated and choice.reason
    if requested == "cpu":
        assert choice.reason == "preprocess.device is cpu"


def test_a_bad_emulation_value_is_refused_by_the_choice(cuda_only_modules_missing, monkeypatch):
    monkeypatch.setenv("SDK_CUDA_EMULATION", "gpu")
    from sdk.preprocess.cuda import choose_device

    with pytest.raises(ConfigError, match=r"SDK_CUDA_EMULATION='gpu': allowed: host \(or unset\)"):
        choose_device("auto", None, None)


def test_the_emulated_device_still_names_the_switch():
    """sdk.gpu.emulation keeps its names (tools.gpu_check and the CUDA tests import them from there)."""
    from sdk.gpu import emulation, emulation_switch

    assert emulation.ENV == emulation_switch.ENV == "SDK_CUDA_EMULATION"
    assert emulation.emulation_requested is emulation_switch.emulation_requested
    assert emulation.emulated_memory is emulation_switch.emulated_memory
