"""kill -9 at every named point of activation, health check, commit, prune, rollback and the lease's end.

A template store holds three real releases of a tiny pipeline: A and B committed (B current), C staged.
For each kill point a copy of it runs one deploy's device side (tests/sdk/store/fault_driver.py) with
`SDK_FAULT` naming the point. After the SIGKILL: recovery leaves exactly the release that the last
completed atomic step committed as the one that starts; no health-check process is left; every
release reachable from a link or the history is complete and matches its manifest.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sdk.faults import POINTS
from sdk.release import ReleaseManifest
from sdk.store import ReleaseStore
from sdk.trial import HealthPolicy

REPO = Path(__file__).resolve().parents[3]
DRIVER = Path(__file__).with_name("fault_driver.py")

# (point, pass K or 0, scenario, the release that must be committed afterwards)
# "B" before the commit's one atomic write, "C" after it, "B" again once the rollback's write landed.
CASES = [
    ("lease.token-written", 0, "deploy", "B"),
    ("lease.recorded", 0, "deploy", "B"),
    ("record.temporary-written", 0, "deploy", "B"),  # the trial record, half written
    ("record.replaced", 0, "deploy", "B"),
    ("trial.record-written", 0, "deploy", "B"),
    ("link.temporary-made", 0, "deploy", "B"),  # `current` about to name the trial
    ("link.switched", 0, "deploy", "B"),
    ("trial.current-switched", 0, "deploy", "B"),
    ("trial.health-started", 0, "deploy", "B"),
    ("trial.health-running", 0, "deploy", "B"),  # the release on trial runs: a power cut now
    ("trial.health-judged", 0, "deploy", "B"),
    ("record.replaced", 2, "deploy", "B"),  # the pass recorded
    ("trial.passed-recorded", 0, "deploy", "B"),  # passed, not committed: the host never confirmed
    ("record.temporary-written", 3, "deploy", "B"),  # the commit's state.json, half written
    ("commit.state-written", 0, "deploy", "C"),
    ("commit.committed-linked", 0, "deploy", "C"),
    ("commit.previous-linked", 0, "deploy", "C"),
    ("commit.trial-removed", 0, "deploy", "C"),
    ("prune.release-moved", 0, "deploy", "C"),
    ("prune.state-written", 0, "deploy", "C"),
    ("prune.release-deleted", 0, "deploy", "C"),
    ("prune.object-deleted", 0, "deploy", "C"),
    ("rollback.verified", 0, "deploy", "C"),
    ("rollback.state-written", 0, "deploy", "B"),
    ("rollback.committed-linked", 0, "deploy", "B"),
    ("rollback.current-linked", 0, "deploy", "B"),
    ("rollback.previous-linked", 0, "deploy", "B"),
    ("trial.failed-before-rollback", 0, "failing", "B"),
    ("abort.current-linked", 0, "failing", "B"),
    ("abort.trial-removed", 0, "failing", "B"),
    ("lease.ended-before-recovery", 0, "hold-lock", "B"),
]


def test_every_kill_point_is_exercised():
    assert {point for point, *_ in CASES} == set(POINTS)


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """A store with A and B committed and C staged; D staged too, a release whose health check fails. Built once
    per run and shared by the xdist workers (each test copies it)."""
    import json

    from tests.conftest import shared_folder

    base = shared_folder(tmp_path_factory, "kill-points-template", _build_template)
    return base / "template", json.loads((base / "ids.json").read_text())


def _build_template(base: Path) -> None:
    import json

    from sdk.spec import load_pipeline
    from tests.conftest import PIPELINE, tiny_yolo
    from tools.prepare import PrepareModel
    from tools.release.bundle import collect_bundle
    from tools.release.stage import manifest_for, stage_release
    from tools.sessions import LocalSession
    from tools.targets import LocalTarget

    root = base / "template"
    session = LocalSession(LocalTarget("local", root))
    ids = {}
    for label, frames in (("A", 20), ("B", 20), ("C", 20), ("D", 1)):
        folder = base / f"pipeline-{label}"
        folder.mkdir()
        tiny_yolo(folder / "tiny.onnx")
        text = PIPELINE.format(uri=f"synthetic://boxes?width=64&height=48&frames={frames}", rate="null", max_ms=5000)
        (folder / "tiny.yaml").write_text(text + f"# release {label}\n")
        pipeline = load_pipeline(folder / "tiny.yaml")
        prepare = PrepareModel(pipeline, base / "cache")
        bundle = collect_bundle(pipeline, prepare(), prepare.key)
        session.lock("template")
        try:
            staged = stage_release(session, bundle, manifest_for(bundle))
            if label in ("A", "B"):
                assert session.trial(staged.release_id, "template", HealthPolicy(min_frames=2, timeout_s=60), lambda event: None).healthy
                session.store_op("commit")
        finally:
            session.unlock("template")
        ids[label] = staged.release_id
    store = ReleaseStore(root)
    assert store.committed() == ids["B"] and store.history() == [ids["A"], ids["B"]]
    (base / "ids.json").write_text(json.dumps(ids))


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


@pytest.mark.parametrize(("point", "k", "scenario", "expected"), CASES, ids=[f"{p}{':' + str(k) if k else ''}" for p, k, _, _ in CASES])
def test_kill_9_at_each_point_leaves_the_last_committed_release_to_start(template, tmp_path, point, k, scenario, expected):
    source, ids = template
    root = tmp_path / "target"
    subprocess.run(["cp", "-a", str(source), str(root)], check=True)  # -a keeps the store's hard links
    env = {**os.environ, "SDK_FAULT": f"{point}:{k}" if k else point, "PYTHONPATH": str(REPO)}
    if scenario == "hold-lock":
        store = ReleaseStore(root)
        holder = subprocess.Popen(
            [sys.executable, "-B", "-m", "sdk", "store", "--root", str(root), "hold-lock", "host-a", "--lease", "60"],
            cwd=REPO, env={**env, "SDK_FAULT": ""}, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )
        token = int(holder.stdout.readline().split(b'"token": ')[1].split(b"}")[0])
        with store.locked():
            store.begin_trial(ids["C"], token=token, owner="host-a", deadline_s=600)
        holder.kill()
        holder.wait()
        # the next holder (a host that lost its link mid-trial) dies at the point where it would roll back
        holder = subprocess.Popen(
            [sys.executable, "-B", "-m", "sdk", "store", "--root", str(root), "hold-lock", "host-b", "--lease", "60"],
            cwd=REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )
        holder.stdout.readline()
        holder.stdin.close()  # the host is gone
        code = holder.wait(timeout=60)
    else:
        release = ids["D"] if scenario == "failing" else ids["C"]
        code = subprocess.run([sys.executable, "-B", str(DRIVER), str(root), scenario, release], cwd=REPO, env=env, timeout=120).returncode
    assert code == -signal.SIGKILL, f"the process was not killed at {point} (exit {code}): that point is not on this path"
    deadline = time.monotonic() + 10
    while _health_processes(root) and time.monotonic() < deadline:
        time.sleep(0.1)  # PR_SET_PDEATHSIG: the health run dies with the trial process
    assert not _health_processes(root), "a health-check process outlived its trial"
    store = ReleaseStore(root)
    with store.locked():
        startable = store.committed_dir()  # what `sdk start` and the unit start, after the same recovery
    assert startable is not None and startable.name == ids[expected]
    assert store.current() == ids[expected] and store.trial() is None
    assert store.history()[-1] == ids[expected]
    _check_reachable(store)
