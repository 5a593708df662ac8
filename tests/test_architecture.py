"""The one rule of the architecture, and the promise that every module imports on any laptop."""

from __future__ import annotations

import ast
import functools
import json
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
    """Every module of the package, from its files (pkgutil.walk_packages would import a subpackage by its bare name,
    and find an installed package of that name instead: `tools/models` is not site-packages' `models`)."""
    return sorted(module_name(p) for p in (REPO / package).rglob("*.py") if p.stem != "__main__")


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
    assert f"'onnxruntime' is not installed for {sys.executable} | install it with: pip install onnxruntime" in done.stdout, done.stderr


@pytest.mark.parametrize("module", ["sdk.store.cli", "sdk.probe", "sdk.service.control"])
def test_what_runs_on_a_bare_device_python_needs_only_the_standard_library(module):
    """`store`, `probe` and `service status` run on the device's own Python before any release
    environment exists (a deploy asks them first): no numpy, OpenCV, pydantic, YAML or ONNX Runtime."""
    script = f"import json, sys; sys.path.insert(0, {str(REPO)!r}); import {module}; print(json.dumps(sorted(m.split('.')[0] for m in sys.modules)))"
    done = subprocess.run([sys.executable, "-I", "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout))
    assert not loaded & {"numpy", "cv2", "pydantic", "yaml", "onnxruntime", "onnx"}, loaded


# The floors of `sdk/` (ARCHITECTURE.md): a module imports its own floor or the ones below, never one above.
FLOORS = {
    0: ("sdk", "sdk.errors", "sdk.procinfo", "sdk.durable", "sdk.tensors", "sdk.frame", "sdk.stage", "sdk.pixels"),
    1: ("sdk.spec", "sdk.release", "sdk.artifacts", "sdk.geometry", "sdk.anchors"),
    2: ("sdk.store", "sdk.sources", "sdk.preprocess", "sdk.backends", "sdk.postprocess", "sdk.sinks", "sdk.track", "sdk.cascade")
    + ("sdk.gpu", "sdk.engine", "sdk.probe"),  # the stages, the store, and what the CUDA path and the backends use
    3: ("sdk.runtime", "sdk.profiling"),
    4: ("sdk.service", "sdk.selftest", "sdk.selftest_pytest", "sdk.selftest_nv12"),
    5: ("sdk.agent", "sdk.__main__"),
}


def module_name(path: Path) -> str:
    name = ".".join(path.relative_to(REPO).with_suffix("").parts)
    return name.removesuffix(".__init__")


@functools.cache
def import_graph(packages=("sdk", "tools")) -> dict[str, set[str]]:
    """module -> the project's modules it imports (at any depth of the code: a function's lazy import counts). Parsed
    once a session and shared by the tests: a caller that changes it changes a copy."""
    modules = {module_name(p): p for package in packages for p in (REPO / package).rglob("*.py")}

    def owner(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            else:
                continue
            found |= {o for o in map(owner, targets) if o and o != name}
        graph[name] = found
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import graph's strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle_in_sdk_or_tools():
    assert circles(import_graph()) == []


def floor_of(name: str) -> int | None:
    found = [(len(p), f) for f, prefixes in FLOORS.items() for p in prefixes if name == p or name.startswith(p + ".")]
    return max(found)[1] if found else None


def test_no_sdk_import_runs_up_a_floor():
    graph = import_graph(("sdk",))
    unplaced = sorted(name for name in graph if floor_of(name) is None)
    assert not unplaced, f"give these modules a floor in FLOORS (and ARCHITECTURE.md): {unplaced}"
    upward = sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets if floor_of(b) > floor_of(a))
    assert not upward


MAX_FILE_LINES = 450  # past this a module holds more than one concept: split it where a name explains the piece
MAX_FUNCTION_LINES = 80


def test_no_module_or_function_outgrows_one_concept():
    too_long = []
    for package in ("sdk", "tools"):
        for path in sorted((REPO / package).rglob("*.py")):
            text = path.read_text()
            where = path.relative_to(REPO)
            if text.count("\n") > MAX_FILE_LINES:
                too_long.append(f"{where}: {text.count(chr(10))} lines")
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES:
                    too_long.append(f"{where}: {node.name}() {node.end_lineno - node.lineno + 1} lines")
    assert not too_long


# The rooms of `tools/` in order, ground first (ARCHITECTURE.md, "Rooms"): a room imports only rooms before it. A room
# is a top-level folder; a module at the package's root is a room of its own (the plumbing, all at rank 0).
TOOLS_ORDER = (
    ("tools", "tools.state", "tools.cache", "tools.progress", "tools.console", "tools.output_paths"),
    "tools.reports", "tools.targets", "tools.models", "tools.release", "tools.connect",
    "tools.dla", "tools.int8", "tools.engines", "tools.history", "tools.evaluate", "tools.evidence",
    "tools.perf", "tools.deploy", "tools.optimize", "tools.validation",
    "tools.gpu_check", "tools.cli", "tools.docs",
)  # fmt: skip


def room_of(module: str) -> str:
    return ".".join(module.split(".")[:2])


def room_graph(graph: dict[str, set[str]]) -> dict[str, dict[str, set[str]]]:
    """room -> {room it imports: the module edges `a -> b` behind it}."""
    rooms: dict[str, dict[str, set[str]]] = {}
    for module, targets in graph.items():
        edges = rooms.setdefault(room_of(module), {})
        for target in targets:
            if room_of(target) != room_of(module):
                edges.setdefault(room_of(target), set()).add(f"{module} -> {target}")
    return rooms


def back_edges(graph: dict[str, set[str]], order=TOOLS_ORDER) -> list[str]:
    """Every import of a room from a room at or after it in `order` (the plumbing shares rank 0)."""
    rank = {room: i for i, entry in enumerate(order) for room in ((entry,) if isinstance(entry, str) else entry)}
    found = []
    for room, edges in room_graph(graph).items():
        if room not in rank:
            found.append(f"{room}: not in the order (give it a place in TOOLS_ORDER and ARCHITECTURE.md)")
            continue
        found += sorted(e for target, why in edges.items() if rank.get(target, -1) > rank[room] for e in why)
    return sorted(found)


def folder_cycles(graph: dict[str, set[str]]) -> list[str]:
    rooms = room_graph(graph)
    found = []
    for component in circles({room: set(edges) for room, edges in rooms.items()}):
        inside = sorted(e for r in component for target, why in rooms[r].items() if target in component for e in why)
        found.append(f"{' <-> '.join(component)}: {'; '.join(inside)}")
    return found


def test_no_folder_imports_in_a_circle_or_up_the_order():
    graph = import_graph()
    upward = back_edges({m: t for m, t in graph.items() if m.startswith("tools")})
    assert not upward, "imports up the rooms' order (TOOLS_ORDER, ARCHITECTURE.md):\n" + "\n".join(upward)
    cycles = folder_cycles(graph)
    assert not cycles, "folders importing in a circle (room <-> room: the imports inside it):\n" + "\n".join(cycles)


def test_the_folder_check_names_a_planted_upward_import():
    graph = {m: set(t) for m, t in import_graph().items()}
    graph["tools.connect.sessions"].add("tools.deploy.flow")  # connect (ground) importing deploy (top)
    graph["sdk.gpu.plan"].add("sdk.preprocess.cpu")  # the CUDA path importing a stage that uses it
    assert back_edges({m: t for m, t in graph.items() if m.startswith("tools")}) == ["tools.connect.sessions -> tools.deploy.flow"]
    cycles = folder_cycles(graph)
    assert len(cycles) == 2 and "sdk.gpu.plan -> sdk.preprocess.cpu" in cycles[0] and "tools.connect.sessions -> tools.deploy.flow" in cycles[1]


def test_every_folder_of_code_is_a_package():
    """The wheel's `packages.find` takes only folders with an `__init__.py`: one without would import from a checkout
    and be missing from an install."""
    folders = {p.parent for package in ("sdk", "tools") for p in (REPO / package).rglob("*.py")}
    assert sorted(str(f.relative_to(REPO)) for f in folders if not (f / "__init__.py").is_file()) == []
