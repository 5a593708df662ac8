"""kill -9 at every declared point of staging, activation, health check, commit, prune, rollback, recovery and the
lease's end, then start what a vehicle starts.

The points are declared once, in sdk/store/faults.py (`POINTS`): this file's cases must cover every one of them, and a
static check reads every `point(...)` call in `sdk/` and requires it to name a declared point or pattern. A
template store holds three real releases of a tiny pipeline: A and B committed (B current), C staged (and D,
whose health check fails). For each case a copy of it runs one deploy's device side (tests/sdk/store/
fault_driver.py) with `SDK_FAULT` naming the point; a chained case kills the recovery that follows too (a second
power cut). The cases whose first power cut is the same (the deploy killed once its rollback's record is written)
start from a copy of the store that this one kill left, made once per run: a SIGKILL leaves nothing but what is on
disk, and the copy is that, byte for byte. After the SIGKILL: no health-check process is left; the systemd unit's
start command (`serve --root`) runs exactly the release that the last completed atomic step committed, verified byte
for byte; every release reachable from a link or the history matches its manifest.
"""

from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sdk.release import ReleaseManifest
from sdk.store.faults import POINTS, STATIC, TEMPLATES
from sdk.store.objects import ReleaseStore
from sdk.store.verify import verify_release
from tests.sdk.store.forks import DeviceForks

REPO = Path(__file__).resolve().parents[3]
DRIVER = Path(__file__).with_name("fault_driver.py")

# Each case: the kills in order, (point, pass K or 0, scenario, release), then the release that must start.
# "B" before the commit's one atomic write, "C" after it, "B" again once the rollback's write landed.
ROLLED_BACK = ("rollback.state-written", 0, "deploy", "C")  # the rollback's record written, its links not yet
CASES = [
    ([("lease.token-written", 0, "deploy", "C")], "B"),
    ([("lease.recorded", 0, "deploy", "C")], "B"),
    ([("record.temporary-written", 0, "deploy", "C")], "B"),  # the trial record, half written
    ([("record.replaced", 0, "deploy", "C")], "B"),
    ([("trial.record-written", 0, "deploy", "C")], "B"),
    ([("link.temporary-made", 0, "deploy", "C")], "B"),  # `current` about to name the trial
    ([("link.switched", 0, "deploy", "C")], "B"),
    ([("trial.current-switched", 0, "deploy", "C")], "B"),
    ([("trial.health-started", 0, "deploy", "C")], "B"),
    ([("trial.health-running", 0, "deploy", "C")], "B"),  # the release on trial runs: a power cut now
    ([("trial.health-judged", 0, "deploy", "C")], "B"),
    ([("record.replaced", 2, "deploy", "C")], "B"),  # the pass recorded
    ([("trial.passed-recorded", 0, "deploy", "C")], "B"),  # passed, not committed: the host never confirmed
    ([("record.temporary-written", 3, "deploy", "C")], "B"),  # the commit's state.json, half written
    ([("commit.state-written", 0, "deploy", "C")], "C"),
    ([("commit.committed-linked", 0, "deploy", "C")], "C"),
    ([("commit.previous-linked", 0, "deploy", "C")], "C"),
    ([("commit.trial-removed", 0, "deploy", "C")], "C"),
    ([("commit.current-linked", 0, "damaged-current", "C")], "C"),  # `current` found elsewhere at the commit
    ([("prune.release-moved", 0, "deploy", "C")], "C"),
    ([("prune.state-written", 0, "deploy", "C")], "C"),
    ([("prune.release-deleted", 0, "deploy", "C")], "C"),
    ([("prune.object-deleted", 0, "deploy", "C")], "C"),
    ([("rollback.verified", 0, "deploy", "C")], "C"),
    ([ROLLED_BACK], "B"),
    ([("rollback.committed-linked", 0, "deploy", "C")], "B"),
    ([("rollback.current-linked", 0, "deploy", "C")], "B"),
    ([("rollback.previous-linked", 0, "deploy", "C")], "B"),
    ([ROLLED_BACK, ("recover.committed-linked", 0, "recover", "-")], "B"),  # a second power cut, during recovery
    ([ROLLED_BACK, ("recover.current-linked", 0, "recover", "-")], "B"),
    ([ROLLED_BACK, ("recover.previous-linked", 0, "recover", "-")], "B"),
    ([("trial.failed-before-rollback", 0, "failing", "D")], "B"),
    ([("abort.current-linked", 0, "failing", "D")], "B"),
    ([("abort.trial-removed", 0, "failing", "D")], "B"),
    ([("abort.committed-linked", 0, "dead-trial", "C")], "B"),  # recovery aborts a dead trial whose other links were damaged
    ([("abort.previous-linked", 0, "dead-trial", "C")], "B"),
    ([("lease.ended-before-recovery", 0, "hold-lock", "C")], "B"),
    ([("store.object-installed", 0, "stage", "C")], "B"),
    ([("store.release-assembled", 0, "stage", "C")], "B"),
]


def test_every_declared_kill_point_is_killed_by_a_case():
    killed = {point for steps, _ in CASES for point, *_ in steps}
    assert killed == set(POINTS), f"never killed: {sorted(set(POINTS) - killed)}; not declared: {sorted(killed - set(POINTS))}"


def _point_calls() -> list[tuple[str, int, ast.expr]]:
    """Every call of `point(...)` (sdk.store.faults' function) in sdk/, with its argument."""
    calls = []
    for path in sorted((REPO / "sdk").rglob("*.py")):
        tree = ast.parse(path.read_text())
        imported = (n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "sdk.store.faults")
        imports = any(a.name == "point" for n in imported for a in n.names)
        if not imports:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "point":
                calls.append((str(path.relative_to(REPO)), node.lineno, node.args[0]))
    return calls


def _shape(text_or_fstring) -> str:
    """A point name's shape: placeholders as `{}` (an f-string's, or a template's)."""
    if isinstance(text_or_fstring, ast.JoinedStr):
        return "".join("{}" if isinstance(v, ast.FormattedValue) else v.value for v in text_or_fstring.values)
    import re

    return re.sub(r"\{[a-z_]+\}", "{}", text_or_fstring)


def test_every_point_call_names_a_declared_point_and_every_declared_point_is_called():
    """Adding a point (a literal or an f-string) without declaring it, or removing a call, fails here."""
    templates = {_shape(t): t for t in TEMPLATES}
    called = set()
    for where, line, argument in _point_calls():
        if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
            assert argument.value in STATIC, f"{where}:{line}: point({argument.value!r}) is not declared in sdk/store/faults.py"
            called.add(argument.value)
        else:
            shape = _shape(argument) if isinstance(argument, ast.JoinedStr) else None
            assert shape in templates, f"{where}:{line}: a point name built at run time must match a declared template, not {shape!r}"
            called.add(templates[shape])
    assert called == set(STATIC) | set(TEMPLATES), f"declared but never called: {sorted(set(STATIC) | set(TEMPLATES) - called)}"


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """A store with A and B committed and C staged; D staged too, a release whose health check fails. Built once
    per run and shared by the xdist workers (each test copies it)."""
    import json

    from tests.conftest import shared_folder

    base = shared_folder(tmp_path_factory, "kill-points-template", _build_template)
    return base / "template", json.loads((base / "ids.json").read_text())


def _build_template(base: Path) -> None:
    from tests.sdk.store.template import build_store

    frames = "synthetic://boxes?width=64&height=48&frames={}"
    releases = [(label, frames.format(n), "", label in ("A", "B")) for label, n in (("A", 20), ("B", 20), ("C", 20), ("D", 1))]
    ids = build_store(base, releases)
    store = ReleaseStore(base / "template")
    assert store.committed() == ids["B"] and store.history() == [ids["A"], ids["B"]]


def _health_processes(root: Path) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if str(root) in command and " run " in command:
                found.append(int(entry.name))
    return found


def _check_reachable(store: ReleaseStore) -> None:
    reachable = set(store.history()) | {store.current(), store.committed(), store.previous()} - {None}
    for release in reachable:
        folder = store.release_dir(release)
        ReleaseManifest.load(folder).verify(folder)
    for link in ("current", "committed", "previous"):
        if (store.root / link).is_symlink():
            assert (store.root / link).resolve().parent == store.releases.resolve()


def _case_id(steps) -> str:
    return " then ".join(f"{point}{':' + str(k) if k else ''}" for point, k, _, _ in steps)


def _dead_trial_with_damaged_links(store: ReleaseStore, release: str) -> None:
    """A trial from an earlier boot, with the `committed` link pointing at A and `previous` gone (damage)."""
    with store.locked():
        store.begin_trial(release, token=None, owner="a host that lost power", deadline_s=3600)
    trial = json.loads((store.root / "trial.json").read_text())
    (store.root / "trial.json").write_text(json.dumps({**trial, "boot": "an-earlier-boot"}))
    older = store.history()[0]
    os.symlink(f"releases/{older}", store.root / "committed.damage")
    os.replace(store.root / "committed.damage", store.root / "committed")
    (store.root / "previous").unlink()


def _kill(forks: DeviceForks, root: Path, ids: dict, point: str, k: int, scenario: str, release: str) -> None:
    env = {**os.environ, "SDK_FAULT": f"{point}:{k}" if k else point, "PYTHONPATH": str(REPO)}
    if scenario == "hold-lock":
        store = ReleaseStore(root)
        holder = subprocess.Popen(
            [sys.executable, "-B", "-m", "sdk", "store", "--root", str(root), "hold-lock", "host-a", "--lease", "60"],
            cwd=REPO, env={**env, "SDK_FAULT": ""}, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )  # fmt: skip
        token = int(holder.stdout.readline().split(b'"token": ')[1].split(b"}")[0])
        with store.locked():
            store.begin_trial(ids["C"], token=token, owner="host-a", deadline_s=600)
        holder.kill()
        holder.wait()
        # the next holder (a host that lost its link mid-trial) dies at the point where it would roll back
        holder = subprocess.Popen(
            [sys.executable, "-B", "-m", "sdk", "store", "--root", str(root), "hold-lock", "host-b", "--lease", "60"],
            cwd=REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )  # fmt: skip
        holder.stdout.readline()
        holder.stdin.close()  # the host is gone
        code = holder.wait(timeout=60)
    else:
        if scenario == "dead-trial":
            _dead_trial_with_damaged_links(ReleaseStore(root), ids[release])
            scenario = "recover"
        driver = [str(DRIVER), str(root), scenario, ids.get(release, "-")]  # `python -B fault_driver.py ...`, forked
        code = forks.run(driver, module=None, cwd=REPO, env=env, output=root.parent / "driver").returncode
    assert code == -signal.SIGKILL, f"the process was not killed at {point} (exit {code}): that point is not on this path"


def _start_as_the_unit_does(forks: DeviceForks, root: Path) -> dict:
    """The systemd unit's start command (`python -m sdk serve --root`, forked), run for two frames: what a vehicle starts
    after the power returns."""
    status_dir = root / "service"
    command = ["sdk", "serve", "--root", str(root), "--status-dir", str(status_dir), "--frames", "2"]
    done = forks.run(command, module="sdk", cwd=root, env={**os.environ, "PYTHONPATH": str(REPO)}, output=root.parent / "serve")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    return json.loads((status_dir / "status.json").read_text())


@pytest.fixture(scope="module")
def forks():
    """The device processes of this file's cases, forked from one that imported the device's modules (tests/sdk/store/forks.py)."""
    forker = DeviceForks(REPO, {**os.environ, "PYTHONPATH": str(REPO)})
    yield forker
    forker.close()


def _kill_and_check(forks: DeviceForks, root: Path, ids: dict, steps) -> None:
    for point, k, scenario, release in steps:
        _kill(forks, root, ids, point, k, scenario, release)
        deadline = time.monotonic() + 10
        while _health_processes(root) and time.monotonic() < deadline:
            time.sleep(0.1)  # PR_SET_PDEATHSIG: the health run dies with the trial process
        assert not _health_processes(root), "a health-check process outlived its trial"


@pytest.fixture(scope="module")
def rolled_back(template, forks, tmp_path_factory) -> Path:
    """The store that the first kill of the ROLLED_BACK cases leaves (a copy of the template, its deploy killed once its
    rollback's record was written), made once per run: those cases copy it and go on from there."""
    from tests.conftest import shared_folder

    source, ids = template

    def build(base: Path) -> None:
        subprocess.run(["cp", "-a", str(source), str(base / "target")], check=True)  # -a keeps the store's hard links
        _kill_and_check(forks, base / "target", ids, [ROLLED_BACK])

    return shared_folder(tmp_path_factory, "kill-points-rolled-back", build) / "target"


@pytest.mark.parametrize(("steps", "expected"), CASES, ids=[_case_id(steps) for steps, _ in CASES])
def test_kill_9_at_each_point_then_the_unit_starts_the_last_committed_release_verified(template, forks, tmp_path, steps, expected, request):
    source, ids = template
    if steps[0] == ROLLED_BACK:  # that kill's store, left once; the steps after it are this case's own
        source, steps = request.getfixturevalue("rolled_back"), steps[1:]
    root = tmp_path / "target"
    subprocess.run(["cp", "-a", str(source), str(root)], check=True)  # -a keeps the store's hard links
    _kill_and_check(forks, root, ids, steps)
    status = _start_as_the_unit_does(forks, root)
    assert status["release"] == ids[expected] and status["frames"] == 2
    store = ReleaseStore(root)
    verify_release(store.release_dir(ids[expected]))  # what ran is what passed, byte for byte
    assert store.committed() == ids[expected] and store.history()[-1] == ids[expected]
    assert store.current() == ids[expected] and store.trial() is None  # the start's recovery repaired the rest
    _check_reachable(store)
