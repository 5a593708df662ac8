"""Every TensorRT name the builder adapter uses exists in the real TensorRT of each series, without a GPU.

The names are read from sdk/engine/trt_adapter.py itself (AST of the step functions a series runs,
SERIES_STEPS), not from a hand-kept list. Two witnesses from PyPI:
- the full bindings wheels (tensorrt-bindings 8.6.1 of DRIVE OS 6, tensorrt-cu12-bindings 10.3.0 of
  JetPack 6 and 11.4.0.106; about 1 MB each): their compiled module cannot load without TensorRT's
  libraries, but names every Python attribute as a string; read from the wheel with zipfile.
- the lean runtime 11.4 (bindings + libs, about 47 MB), which imports here: its enums are real, so a
  qualified name such as BuilderFlag.INT8 (removed in 11) is checked member by member.
Wheels are cached in $SDK_WHEEL_CACHE (default ~/.cache/perception-sdk/tensorrt-wheels); without
PyPI the tests skip and say so.
"""

from __future__ import annotations

import ast
import bisect
import functools
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from sdk.backends import tensorrt_gpu
from sdk.engine import trt_adapter

ADAPTER = Path(trt_adapter.__file__)
# Variables in the adapter that hold TensorRT objects (everything else is the SDK's own).
TRT_OBJECTS = {"trt", "builder", "network", "parser", "config", "profile", "layer", "tensor", "cache", "logger", "runtime", "engine", "context"}
SELF_TRT_OBJECTS = {"_engine", "_context"}
RUNTIME_BACKEND = Path(tensorrt_gpu.__file__)
FULL_BINDINGS = {
    "8.6": ("tensorrt-bindings==8.6.1", "3.10", "manylinux_2_17_x86_64"),
    "10": ("tensorrt-cu12-bindings==10.3.0", "3.10", "manylinux_2_17_x86_64"),
    "11": ("tensorrt-cu12-bindings==11.4.0.106", "3.11", "manylinux_2_28_x86_64"),
}
LEAN_11 = ("tensorrt-lean-cu12-bindings==11.4.0.106", "tensorrt-lean-cu12-libs==11.4.0.106")


def _chain(node: ast.AST) -> tuple[str, list[str]] | None:
    attrs = []
    while isinstance(node, ast.Attribute):
        attrs.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id == "self" and attrs and attrs[-1] in SELF_TRT_OBJECTS:
        node, attrs = ast.Name(id=attrs[-1].lstrip("_")), attrs[:-1]  # self._engine.x is engine.x
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):  # layer.get_output(i).name
        inner = _chain(node.func)
        if inner is None:
            return None
        base, chain = inner
        return base, chain + attrs[::-1]
    return (node.id, attrs[::-1]) if isinstance(node, ast.Name) else None


def adapter_names(series: str) -> tuple[set[str], set[tuple[str, ...]]]:
    """(every attribute name used on a TensorRT object, qualified `trt.A.B` chains) for one series."""
    steps = set(trt_adapter.COMMON_STEPS) | set(trt_adapter.SERIES_STEPS[series])
    tree = ast.parse(ADAPTER.read_text())
    return names_in([n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in steps])


def _is_local_base(node: ast.AST) -> bool:
    """`class CacheReplay(base)` where base is picked from TensorRT's calibrator interfaces."""
    return isinstance(node, ast.ClassDef) and any(isinstance(b, ast.Name) and b.id == "base" for b in node.bases)


def names_in(scopes: list[ast.AST], bases: set[str] = TRT_OBJECTS) -> tuple[set[str], set[tuple[str, ...]]]:
    names, qualified = set(), set()
    for function in scopes:
        for node in ast.walk(function):
            if isinstance(node, ast.ClassDef) and any(_chain(b) and _chain(b)[0] in bases for b in node.bases) or _is_local_base(node):
                # a TensorRT interface implemented in Python: its overrides must be the interface's names
                names |= {item.name for item in node.body if isinstance(item, ast.FunctionDef) and not item.name.startswith("__")}
            if isinstance(node, ast.Attribute):
                found = _chain(node)
                if found and found[0] in bases:
                    names |= {a for a in found[1] if not a.startswith("__")}
                    if found[0] in ("trt", "cudart"):
                        qualified.add(tuple(found[1]))
    return names, qualified


def fetch(requirements: tuple[str, ...], python: str | None = None, platform: str | None = None) -> list[Path]:
    cache = Path(os.environ.get("SDK_WHEEL_CACHE") or Path.home() / ".cache" / "perception-sdk" / "tensorrt-wheels")
    folder = cache / re.sub(r"[^A-Za-z0-9.]+", "_", "+".join(requirements) + f"-{python}-{platform}")
    wheels = sorted(folder.glob("*.whl"))
    if len(wheels) == len(requirements):
        return wheels
    target = ["--python-version", python, "--platform", platform] if python else []
    done = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:", "-d", str(folder), *target, *requirements],
        capture_output=True, text=True, timeout=600,
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["pip download failed"])[-1]
        pytest.skip(
            f"needs TensorRT's binding wheels, downloaded once from PyPI and kept in {cache} ($SDK_WHEEL_CACHE): cannot download "
            f"{' '.join(requirements)} ({last}); run once with PyPI reachable, or put the wheels in {folder}"
        )
    return sorted(folder.glob("*.whl"))


@functools.cache
def identifiers_in(wheel: Path) -> frozenset[str]:
    """Every identifier-shaped string in the wheel's compiled module and Python files."""
    found = set()
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if name.endswith((".so", ".py")):
                found |= {m.decode() for m in re.findall(rb"[A-Za-z_][A-Za-z0-9_]{1,80}", archive.read(name))}
    return frozenset(found)


def missing_from(names: set[str], identifiers: frozenset[str]) -> set[str]:
    """Names found neither whole nor as the tail of a longer string: linkers merge string constants
    by their tails, so `INPUT` (TensorIOMode) is stored inside `CONDITIONAL_INPUT`."""
    tails = _reversed_sorted(identifiers)
    missing = set()
    for name in names - identifiers:
        key = name[::-1]
        at = bisect.bisect_left(tails, key)
        if not (at < len(tails) and tails[at].startswith(key)):
            missing.add(name)
    return missing


@functools.cache
def _reversed_sorted(identifiers: frozenset[str]) -> list[str]:
    return sorted(i[::-1] for i in identifiers)


@pytest.mark.parametrize("series", sorted(FULL_BINDINGS))
def test_every_name_a_series_uses_is_in_its_bindings(series):
    names, qualified = adapter_names(series)
    assert {"create_network", "build_serialized_network", "can_run_on_DLA"} <= names  # the collector sees the adapter
    (wheel,) = fetch((FULL_BINDINGS[series][0],), *FULL_BINDINGS[series][1:])
    module = identifiers_in(wheel)
    assert not missing_from(names | {part for chain in qualified for part in chain}, module)


@pytest.mark.parametrize("series", sorted(FULL_BINDINGS))
def test_the_runtime_backend_uses_only_names_every_series_has(series):
    names, qualified = names_in([ast.parse(RUNTIME_BACKEND.read_text())])
    assert {"deserialize_cuda_engine", "set_tensor_address", "execute_async_v3", "num_io_tensors", "report_layer_time", "IProfiler"} <= names
    (wheel,) = fetch((FULL_BINDINGS[series][0],), *FULL_BINDINGS[series][1:])
    assert not missing_from(names | {part for chain in qualified for part in chain}, identifiers_in(wheel))


def test_the_runtime_backend_drives_cuda_through_declared_driver_names_that_exist():
    """The backend uses the driver API only (decision 0412): every `call("name"` / `own("name"` is in DRIVER_NAMES,
    every name there is in the installed cuda.bindings.driver, and nothing of the runtime API is left."""
    driver = pytest.importorskip("cuda.bindings.driver", reason="cuda-python is not installed here")
    text = RUNTIME_BACKEND.read_text()
    called = set(re.findall(r'\bcall\("(\w+)"', text)) | set(re.findall(r'\bown\("(\w+)"', text))
    assert {"cuMemHostAlloc", "cuEventElapsedTime", "cuMemcpyHtoDAsync", "cuStreamBeginCapture", "cuGraphInstantiate"} <= called
    assert called <= set(tensorrt_gpu.DRIVER_NAMES)
    assert [name for name in tensorrt_gpu.DRIVER_NAMES if not hasattr(driver, name)] == []
    assert hasattr(driver.CUstream_flags, "CU_STREAM_NON_BLOCKING") and hasattr(driver.CUstreamCaptureMode, "CU_STREAM_CAPTURE_MODE_THREAD_LOCAL")
    assert "cudart" not in text and "bindings.runtime" not in text.replace("`cuda.bindings.runtime`", "")


def test_the_runtime_backend_sets_dynamic_shapes_with_names_every_series_has():
    names, _ = names_in([ast.parse(RUNTIME_BACKEND.read_text())])
    assert {"set_input_shape", "get_tensor_profile_shape", "get_tensor_shape"} <= names  # checked per series above


def test_the_check_fails_for_a_name_the_bindings_lack():
    """TensorRT 11 removed calibrators: the implicit-INT8 steps of 10.x would be caught against 11's module."""
    (wheel,) = fetch((FULL_BINDINGS["11"][0],), *FULL_BINDINGS["11"][1:])
    names_10, _ = adapter_names("10")
    assert {"int8_calibrator", "IInt8EntropyCalibrator2"} <= missing_from(names_10, identifiers_in(wheel))


def test_qualified_enum_members_of_the_11_path_exist_in_the_lean_runtime(tmp_path):
    wheels = fetch(LEAN_11)
    site = tmp_path / "site"
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(site)
    chains = {series: sorted(adapter_names(series)[1]) for series in ("10", "11")}
    script = f"""
import json, sys
sys.path.insert(0, {str(site)!r})
import tensorrt_lean_bindings as trt
def resolves(chain):
    value = trt
    for part in chain:
        if not hasattr(value, part):
            return False
        value = getattr(value, part)
    return True
chains = {chains!r}
print(json.dumps({{s: {{".".join(c): resolves(c) for c in cs if hasattr(trt, c[0])}} for s, cs in chains.items()}}))
"""
    done = subprocess.run([sys.executable, "-I", "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["11"] and all(result["11"].values()), result["11"]  # e.g. DeviceType.DLA, MemoryPoolType.DLA_MANAGED_SRAM
    assert result["10"]["BuilderFlag.INT8"] is False and result["10"]["BuilderFlag.FP16"] is False  # why 11 has its own path
