"""A release's offline environment made from a device Python that is itself a virtual environment (a plain
`pip install -e .` in a venv, the local target's case): it sees that environment's packages, their own .pth files
included, with the release's wheels first; a module it still lacks is named with the Python it was made from."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def device_venv(folder: Path) -> Path:
    """A virtual environment holding a module of its own, one behind a .pth file, and one the release also ships."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(folder)], check=True)
    site = next(folder.glob("lib/python*/site-packages"))
    (site / "only_in_the_device_venv.py").write_text("WHERE = 'device venv'\n")
    (site / "shadowed.py").write_text("WHERE = 'device venv'\n")
    extra = folder / "extra"
    extra.mkdir()
    (extra / "behind_a_pth.py").write_text("WHERE = 'extra'\n")
    (site / "extra.pth").write_text(f"{extra}\n")
    return folder / "bin" / "python"


def release_with_a_wheel(folder: Path) -> Path:
    (folder / "wheels").mkdir(parents=True)
    with zipfile.ZipFile(folder / "wheels" / "shadowed-1.0-py3-none-any.whl", "w") as wheel:
        wheel.writestr("shadowed.py", "WHERE = 'release wheel'\n")
        wheel.writestr("shadowed-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: shadowed\nVersion: 1.0\n")
    return folder


def test_an_environment_made_from_a_virtual_environment_sees_its_packages_after_the_wheels(tmp_path):
    python = device_venv(tmp_path / "device-venv")
    release = release_with_a_wheel(tmp_path / "release")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    build = "from pathlib import Path; from sdk.store.offline_env import build_env; "
    build += f"print(build_env(Path({str(release)!r}), Path({str(tmp_path / 'env')!r})))"
    made = Path(subprocess.run([str(python), "-c", build], env=env, capture_output=True, text=True, check=True).stdout.strip())
    assert made == tmp_path / "env" / "bin" / "python"
    probe = "import only_in_the_device_venv, behind_a_pth, shadowed, numpy; print(only_in_the_device_venv.WHERE, behind_a_pth.WHERE, shadowed.WHERE)"
    done = subprocess.run([str(made), "-c", probe], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr  # before: ModuleNotFoundError for what the venv alone had
    assert done.stdout.split() == ["device", "venv", "extra", "release", "wheel"]
    message = (
        "from sdk.errors import missing_dependency; e = missing_dependency('onnxruntime', 'pip install onnxruntime'); print(e.message); print(e.hint)"
    )
    said = subprocess.run([str(made), "-c", message], env=env, capture_output=True, text=True, check=True).stdout
    assert f"'onnxruntime' is not installed in the release's environment {tmp_path / 'env'}, made from the device's Python {python}" in said
    assert "(a virtual environment)" in said and "for that Python (the release's environment sees its packages)" in said


def test_scipy_is_a_runtime_dependency_so_track_runs_on_a_plain_install():
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    from sdk.probe import PIPELINE_MODULES

    # the same minimum as a device is shipped where it lacks scipy and the pipeline tracks
    assert PIPELINE_MODULES["scipy"] in [d.replace(" ", "") for d in project["dependencies"]], project["dependencies"]
