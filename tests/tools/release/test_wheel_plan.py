"""The offline wheels are resolved against what the device has and keeps (issue 21 item 6, decision 0430).

JetPack 6 (Ubuntu 22.04, Python 3.10) ships numpy 1.21.5 and PyYAML 5.4.1 (Ubuntu jammy's python3-numpy
1:1.21.5-1ubuntu22.04.1 and python3-yaml 5.4.1-1ubuntu1), OpenCV 4.8.0 built against that numpy (nvidia-opencv,
JetPack 6 release notes), and pydantic 1.8.2 where python3-pydantic is installed. Shipping numpy 2 next to that
OpenCV breaks it ("A module that was compiled using NumPy 1.x cannot be run in NumPy 2.x").
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement

import sdk
from sdk.errors import ReleaseError
from sdk.probe import PIPELINE_MODULES, RUNTIME_MODULES
from tools.release.wheels import plan_wheels, wheel_distribution

REPO = Path(__file__).resolve().parents[3]
JETPACK_6 = {
    "arch": "aarch64",
    "python_abi": "cp310",
    "cuda": "12.6",
    "missing_modules": ["pydantic", "onnxruntime", "cuda.bindings"],
    "module_versions": {"numpy": "1.21.5", "cv2": "4.8.0", "yaml": "5.4.1", "pydantic": None, "onnxruntime": None, "cuda.bindings": None},
}


def test_jetpack_6_keeps_its_numpy_opencv_and_pyyaml_and_gets_no_onnxruntime_on_tensorrt():
    plan = plan_wheels(JETPACK_6, onnxruntime=False)
    assert plan.requirements == ["cuda-bindings>=12,<13", "pydantic>=2.5"]
    assert plan.constraints == ["PyYAML==5.4.1", "numpy==1.21.5"]  # whatever comes must work with these
    assert {"numpy", "opencv-python-headless", "opencv-python", "pyyaml"} <= set(plan.keep)


def test_an_onnxruntime_release_resolves_onnxruntime_against_the_device_numpy():
    plan = plan_wheels(JETPACK_6)
    assert "onnxruntime>=1.17" in plan.requirements and "numpy==1.21.5" in plan.constraints
    assert not any(r.startswith("numpy") for r in plan.requirements)


def test_a_module_below_the_minimum_is_shipped_unless_the_device_owns_it():
    ubuntu_pydantic = {**JETPACK_6, "missing_modules": ["onnxruntime"], "module_versions": {**JETPACK_6["module_versions"], "pydantic": "1.8.2"}}
    plan = plan_wheels(ubuntu_pydantic, onnxruntime=False)
    assert "pydantic>=2.5" in plan.requirements and "pydantic" not in plan.keep  # the release's environment shadows pydantic 1
    old_numpy = {**JETPACK_6, "module_versions": {**JETPACK_6["module_versions"], "numpy": "1.19.5"}}
    with pytest.raises(ReleaseError, match=r"the device has numpy 1\.19\.5, older than the runtime's minimum numpy>=1\.21\.5"):
        plan_wheels(old_numpy)


def test_a_bare_device_gets_everything_and_an_old_probe_is_trusted():
    bare = {"cuda": None, "missing_modules": list(RUNTIME_MODULES), "module_versions": dict.fromkeys(RUNTIME_MODULES)}
    plan = plan_wheels(bare)
    assert [Requirement(r).name for r in plan.requirements] == ["numpy", "onnxruntime", "opencv-python-headless", "pydantic", "pyyaml"]
    assert plan.constraints == [] and plan.keep == []
    old_probe = {"missing_modules": ["onnxruntime"]}  # a device agent from before module_versions
    assert plan_wheels(old_probe).requirements == ["onnxruntime>=1.17"]


def test_the_runtime_minimums_are_what_jetpack_6_ships_and_pyproject_says_the_same():
    declared = {Requirement(text).name: Requirement(text) for text in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]}
    for module, text in RUNTIME_MODULES.items():
        requirement = Requirement(text)
        if module != "cuda.bindings":
            assert declared[requirement.name].specifier == requirement.specifier, module
    for module, version in {"numpy": "1.21.5", "yaml": "5.4.1", "cv2": "4.8.0"}.items():
        assert Requirement(RUNTIME_MODULES[module]).specifier.contains(version), (module, version)


def test_wheel_names_map_to_distributions():
    assert wheel_distribution(Path("opencv_python_headless-4.9.0.80-cp37-abi3-manylinux_2_17_aarch64.whl")) == "opencv-python-headless"
    assert wheel_distribution(Path("PyYAML-6.0.1-cp311-cp311-manylinux_2_17_aarch64.whl")) == "pyyaml"


def _site(folder: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


def test_the_probe_reports_the_version_of_the_copy_that_is_imported(tmp_path):
    """A JetPack-shaped system site: numpy with pip metadata, Debian's egg-info PyYAML, the vendor's OpenCV with only
    cv2/version.py; and a release environment whose stale numpy metadata must not be mistaken for the system's numpy."""
    system = _site(
        tmp_path / "system",
        {
            "numpy/__init__.py": "raise ImportError('the probe must not import numpy')\n",
            "numpy-1.21.5.dist-info/METADATA": "Metadata-Version: 2.1\nName: numpy\nVersion: 1.21.5\n",
            "numpy-1.21.5.dist-info/RECORD": "numpy/__init__.py,,\n",
            "yaml/__init__.py": "",
            "PyYAML-5.4.1.egg-info/PKG-INFO": "Metadata-Version: 1.1\nName: PyYAML\nVersion: 5.4.1\n",
            "cv2/__init__.py": "raise ImportError('the probe must not import cv2')\n",
            "cv2/version.py": 'opencv_version = "4.8.0"\ncontrib = False\n',
            "pydantic/__init__.py": "__version__ = '1.8.2'\n",  # no metadata at all: the module says it
        },
    )
    stale = _site(tmp_path / "release", {"numpy-2.2.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: numpy\nVersion: 2.2.0\n"})
    probe = Path(sdk.__file__).parent / "probe.py"
    environment = {"PYTHONPATH": f"{stale}:{system}", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-S", str(probe)], capture_output=True, text=True, timeout=60, env=environment)
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout)
    expected = {"numpy": "1.21.5", "cv2": "4.8.0", "yaml": "5.4.1", "pydantic": "1.8.2", "onnxruntime": None, "cuda.bindings": None}
    assert facts["module_versions"] == expected
    # scipy, mcap, ...: pipeline modules (track:, recorded drives), probed too
    assert facts["missing_modules"] == ["onnxruntime", "cuda.bindings", *PIPELINE_MODULES]
