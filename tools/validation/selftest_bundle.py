"""The selftest bundle: the repository's `gpu`-marked tests, packed for one device, separate from the release.

A release carries `sdk/` and no tests. `sdk selftest --target T` still runs the `gpu` tests on the device: the host
packs the gpu-marked test files of what runs on the device (tests/sdk, tests/plugins_cuda), the conftest files above
them and what they import from tests/ (followed through relative imports), what those read from the checkout (the
example pipeline and its assets, the kernels' sources, `tools/` for the fixtures that prepare a model), a pytest.ini
with the repository's markers, a root conftest that turns a module the device lacks into a skip naming it, and offline
wheels of pytest and its pure-Python dependencies for the device's Python (tools/release/wheels.py). The device runs
them with the release's own interpreter and sdk (sdk/selftest_pytest.py). Decision 0450.
"""

from __future__ import annotations

import ast
import json
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from sdk.errors import ReleaseError
from sdk.selftest_pytest import CONTENTS, NO_WHEELS

REPO = Path(__file__).resolve().parents[2]
# Tests of what runs on the device. The gpu tests of `tools` (the host) need the host's packages and a checkout.
DEVICE_TESTS = ("tests/sdk", "tests/plugins_cuda")
SUPPORT = ("pipelines", "plugins_cuda", "cmake", "tools")  # what the tests and their fixtures read from the checkout
DEVICE_CONFTEST = Path(__file__).with_name("selftest_conftest.py")  # shipped as the bundle's root conftest.py
PREPARED = "selftest-prepared/example"  # the example model prepared on the host (tests/conftest.py's prepared_example)


@dataclass(frozen=True)
class TestBundle:
    """What goes into the device's scratch folder: files (bundle-relative name -> host file or bytes), the test files
    to run, the pytest wheels (or why there are none), and the gpu-marked tests left out with the reason."""

    __test__ = False  # not a pytest class

    files: dict[str, Path | bytes]
    tests: list[str]
    wheels: list[Path] = field(default_factory=list)
    no_wheels: str | None = None
    left_out: list[str] = field(default_factory=list)

    def contents(self) -> dict[str, Path | bytes]:
        """Every file of the scratch folder, the wheels and the bundle's own list included."""
        out = dict(self.files)
        out[CONTENTS] = json.dumps({"tests": self.tests, "left_out": self.left_out}).encode()
        for wheel in self.wheels:
            out[f"wheels/{wheel.name}"] = wheel
        if not self.wheels:
            out[NO_WHEELS] = (self.no_wheels or "no wheels were packed").encode()
        return out


def _gpu_marked(path: Path) -> bool:
    """Whether the module uses `pytest.mark.gpu` (in code: a test that writes the words in a string is not marked).
    A module whose text never says `gpu` is not parsed: most of tests/ (parsing them all took seconds of every selftest)."""
    text = path.read_text()
    return "gpu" in text and any(
        isinstance(node, ast.Attribute)
        and node.attr == "gpu"
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "mark"
        and isinstance(node.value.value, ast.Name)
        and node.value.value.id == "pytest"
        for node in ast.walk(ast.parse(text, str(path)))
    )


def gpu_test_files(repo: Path = REPO) -> tuple[list[Path], list[str]]:
    """(the gpu-marked test files of DEVICE_TESTS, the gpu-marked test files elsewhere with why they stay home)."""
    shipped, left = [], []
    for path in sorted((repo / "tests").rglob("test_*.py")):
        if not _gpu_marked(path):
            continue
        rel = path.relative_to(repo).as_posix()
        if rel.startswith(tuple(f"{root}/" for root in DEVICE_TESTS)):
            shipped.append(path)
        else:
            left.append(f"{rel}: a test of the host's tools (needs the host's packages and a checkout), not shipped to the device")
    return shipped, left


def _relative_imports(path: Path) -> list[Path]:
    """The files of tests/ that `path` imports relatively (`from .helpers import x`, `from ..x.y import z`)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = path.parent
            for _ in range(node.level - 1):
                base = base.parent
            parts = node.module.split(".") if node.module else []
            candidate = base.joinpath(*parts)
            if candidate.with_suffix(".py").is_file():
                found.append(candidate.with_suffix(".py"))
            elif candidate.is_dir():  # `from . import helpers`
                found += [candidate / f"{alias.name}.py" for alias in node.names if (candidate / f"{alias.name}.py").is_file()]
    return found


def test_support(repo: Path, tests: list[Path]) -> list[Path]:
    """The test files, every conftest.py from tests/ down to each, and what they import from tests/, transitively."""
    wanted, queue = set(), list(tests)
    for test in tests:
        folder = test.parent
        while folder != repo and repo in folder.parents:
            if (folder / "conftest.py").is_file():
                queue.append(folder / "conftest.py")
            folder = folder.parent
    while queue:
        path = queue.pop().resolve()
        if path in wanted or (repo / "tests") not in path.parents:
            continue
        wanted.add(path)
        queue += _relative_imports(path)
    return sorted(wanted)


def pytest_ini(repo: Path) -> bytes:
    """The repository's markers (strict, as in pyproject.toml) and the import mode its tests are written for."""
    text = (repo / "pyproject.toml").read_text()
    block = re.search(r"^markers = \[(.*?)^\]", text, re.S | re.M)
    markers = re.findall(r'"([^"]+)"', block.group(1)) if block else ["gpu: needs an NVIDIA GPU and driver"]
    lines = ["[pytest]", "addopts = --strict-markers -ra --import-mode=importlib", "pythonpath = .", "markers ="]
    return ("\n".join(lines + [f"    {marker}" for marker in markers]) + "\n").encode()


def _marker_environment(arch: str, python_abi: str) -> dict:
    version = f"{python_abi[2]}.{python_abi[3:]}"
    return {
        "python_version": version, "python_full_version": f"{version}.0", "implementation_name": "cpython",
        "platform_python_implementation": "CPython", "platform_machine": arch, "sys_platform": "linux",
        "platform_system": "Linux", "os_name": "posix", "extra": "",
    }  # fmt: skip


def _unmet(wheels: list[Path], arch: str, python_abi: str) -> list[str]:
    """Dependencies the target's Python needs that pip, running on the host's Python, did not fetch: pip evaluates
    environment markers (`exceptiongroup; python_version < "3.11"`) for the host's interpreter, not `--python-version`'s."""
    from packaging.requirements import Requirement

    from tools.release.wheels import _normalise, wheel_distribution

    have = {wheel_distribution(w) for w in wheels}
    environment, missing = _marker_environment(arch, python_abi), set()
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            metadata = next((n for n in archive.namelist() if n.endswith(".dist-info/METADATA")), None)
            text = archive.read(metadata).decode() if metadata else ""
        for line in text.splitlines():
            if line.startswith("Requires-Dist:"):
                requirement = Requirement(line.split(":", 1)[1].strip())
                if (requirement.marker is None or requirement.marker.evaluate(environment)) and _normalise(requirement.name) not in have:
                    missing.add(str(requirement).split(";")[0].strip())
    return sorted(missing)


def pytest_wheels(arch: str, python_abi: str, cache: Path) -> list[Path]:
    """pytest and its dependencies for the device's Python (pure Python: py3-none-any), with what markers add there."""
    from tools.release.wheels import download_wheels

    requirements = ["pytest"]
    for _ in range(3):
        wheels = download_wheels(requirements, arch, python_abi, cache)
        unmet = _unmet(wheels, arch, python_abi)
        if not unmet:
            return wheels
        requirements = sorted(set(requirements) | set(unmet))
    raise ReleaseError(f"pytest's dependencies for {arch} {python_abi} do not settle: still missing {', '.join(unmet)}")


def prepared_example(repo: Path, cache: Path) -> dict[str, Path]:
    """The example's model prepared here (onnx-graphsurgeon is a host package), for the fixture that the TensorRT tests
    build their engine from; nothing where this checkout has no example or cannot prepare it (the tests then skip)."""
    from sdk.errors import SdkError
    from sdk.spec import load_pipeline
    from tools.models.prepare import PrepareModel

    example = repo / "pipelines" / "pedestrian.yaml"
    if not example.is_file():
        return {}
    try:
        artifacts = PrepareModel(load_pipeline(example), cache)()
    except (SdkError, ImportError):
        return {}
    return {f"{PREPARED}/{path.name}": path for path in sorted(artifacts.folder.iterdir()) if path.is_file()}


def build_bundle(facts: dict, cache: Path, repo: Path = REPO) -> TestBundle:
    """The bundle for a probed device. Raises ReleaseError where this installation has no tests (not a checkout)."""
    if not (repo / "tests").is_dir():
        raise ReleaseError(f"{repo} has no tests/ folder (an installed SDK, not a checkout): the gpu tests cannot be packed")
    tests, left_out = gpu_test_files(repo)
    files: dict[str, Path | bytes] = {p.relative_to(repo).as_posix(): p for p in test_support(repo, tests)}
    for folder in SUPPORT:
        for path in sorted((repo / folder).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and not path.name.startswith(".") and (folder != "tools" or path.suffix == ".py"):
                files[path.relative_to(repo).as_posix()] = path
    files.update(prepared_example(repo, cache))
    files["pytest.ini"] = pytest_ini(repo)
    files["conftest.py"] = DEVICE_CONFTEST
    try:
        wheels, no_wheels = pytest_wheels(facts["arch"], facts["python_abi"], cache), None
    except ReleaseError as exc:
        wheels, no_wheels = [], exc.message
    return TestBundle(files, [p.relative_to(repo).as_posix() for p in tests], wheels, no_wheels, left_out)
