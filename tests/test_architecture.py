"""The one rule of the architecture, and the promise that every module imports on any laptop."""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# What a vehicle does not have, or must not need: host tools and host-only packages.
HOST_ONLY = {"tools", "paramiko", "fabric", "asyncssh", "onnx", "onnx_graphsurgeon", "rich", "onnxsim", "numba"}
# What `import sdk.<anything>` must not load eagerly: heavy runtimes load inside the stage that needs them.
HEAVY = {"cv2", "onnxruntime", "tensorrt", "tensorrt_lean", "cuda", "torch"}


def sdk_files() -> list[Path]:
    return sorted((REPO / "sdk").rglob("*.py"))


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("path", sdk_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_sdk_never_imports_host_code(path):
    assert not imported_roots(path) & HOST_ONLY


@pytest.mark.parametrize("path", sdk_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_sdk_parses_as_python_3_10(path):
    """JetPack 6 runs Python 3.10: the device-side code must not use newer syntax."""
    ast.parse(path.read_text(), feature_version=(3, 10))


def all_modules(package: str) -> list[str]:
    root = REPO / package
    return [package] + [f"{package}.{m.name}" for m in pkgutil.walk_packages([str(root)], prefix="") if m.name != "__main__"]


def test_every_module_imports_in_a_clean_interpreter():
    """A fresh `python -I` (no user site, no PYTHONPATH): every module imports; sdk loads nothing host-only or heavy."""
    names = [n for n in all_modules("sdk") + all_modules("tools") if not n.endswith("__main__")]
    script = f"""
import importlib, json, sys
sys.path.insert(0, {str(REPO)!r})
loaded = {{}}
for name in {[n for n in names if n.startswith("sdk")]!r}:
    importlib.import_module(name)
loaded['sdk_all'] = sorted(m.split('.')[0] for m in sys.modules)
for name in {[n for n in names if n.startswith("tools")]!r}:
    importlib.import_module(name)
print(json.dumps(loaded))
"""
    done = subprocess.run([sys.executable, "-I", "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    roots = set(json.loads(done.stdout)["sdk_all"])
    assert not roots & HOST_ONLY
    assert not roots & HEAVY, f"imported eagerly: {roots & HEAVY}"


def test_a_missing_backend_module_says_how_to_install_it():
    script = f"""
import sys
sys.path.insert(0, {str(REPO)!r})
sys.modules['onnxruntime'] = None  # as if not installed
from sdk.backends import create_backend
from sdk.errors import SdkError
try:
    create_backend('onnxruntime', 'model.onnx').open()
except SdkError as exc:
    print(exc.message, '|', exc.hint)
"""
    done = subprocess.run([sys.executable, "-I", "-c", script], capture_output=True, text=True, timeout=60)
    assert "'onnxruntime' is not installed | install it with: pip install onnxruntime" in done.stdout, done.stderr


@pytest.mark.parametrize("module", ["sdk.store.cli", "sdk.probe", "sdk.service.control"])
def test_what_runs_on_a_bare_device_python_needs_only_the_standard_library(module):
    """`store`, `probe` and `service status` run on the device's own Python before any release
    environment exists (a deploy asks them first): no numpy, OpenCV, pydantic, YAML or ONNX Runtime."""
    script = f"import json, sys; sys.path.insert(0, {str(REPO)!r}); import {module}; print(json.dumps(sorted(m.split('.')[0] for m in sys.modules)))"
    done = subprocess.run([sys.executable, "-I", "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout))
    assert not loaded & {"numpy", "cv2", "pydantic", "yaml", "onnxruntime", "onnx"}, loaded
