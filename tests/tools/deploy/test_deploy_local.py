"""`deploy --target local` end to end on the real detector and video, through the real CLI."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import cv2
import pytest

from sdk.release import ReleaseManifest
from tools.cli import run
from tools.deploy.flow import Deploy

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "pipelines" / "pedestrian.yaml"


@pytest.fixture()
def cli(capfd, monkeypatch):
    """The CLI in this process (a subprocess would cost its imports; what these tests check is the exit code, the
    words and the files, not the process boundary: the kill test below keeps its real processes)."""

    def call(*args: str, state: Path, cwd: Path = REPO) -> SimpleNamespace:
        # Targets beside the state, never the checkout's targets/ (`targets list` below must see `local` only).
        monkeypatch.setenv("SDK_STATE_DIR", str(state))
        monkeypatch.setenv("SDK_TARGETS_DIR", str(state.parent / f"{state.name}.targets"))
        monkeypatch.setenv("COLUMNS", "200")
        monkeypatch.chdir(cwd)
        capfd.readouterr()
        try:
            code = run(list(args))
        except SystemExit as exc:  # argparse's usage errors
            code = exc.code
        out, err = capfd.readouterr()
        return SimpleNamespace(returncode=code, stdout=out, stderr=err)

    return call


@pytest.mark.slow
@pytest.mark.xdist_group("deployed-twice")
def test_deploy_local_writes_the_report_contract(deployed_twice):
    """`deploy` on the command line, its exit code, its words and its reports: the first deploy of `deployed_twice` (the
    example with budgets no frame can miss, so the verdict does not depend on how loaded this machine is; only the
    sample size decides: 10 measured frames after the 10 warm-up frames back a p50 (a 95 % upper bound needs 5) and a
    max, never a p99 (299 frames))."""
    folder, done = deployed_twice.folder, deployed_twice.cli
    state, reports = folder / "state", folder / "r1"
    assert done.returncode == 4, done.stderr  # 10 measured frames cannot back a p99: INCONCLUSIVE
    assert "verdict: INCONCLUSIVE" in done.stdout and "end to end" in done.stdout
    report = json.loads((reports / "report.json").read_text())
    assert report["verdict"] == "INCONCLUSIVE" and report["target"] == "local" and report["pipeline"] == "pedestrian"
    assert report["frames"] == REPORTED_FRAMES and report["dropped"] == 0
    for stage in ("preprocess", "infer", "postprocess", "sink"):
        assert set(report["stages"][stage]) >= {"p50_ms", "p99_ms", "max_ms"}
        assert 0 < report["stages"][stage]["p50_ms"] <= report["stages"][stage]["max_ms"]
    assert set(report["end_to_end"]) >= {"p50_ms", "p99_ms", "p999_ms", "max_ms"}
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["end_to_end.p99_ms"]["status"] == "INCONCLUSIVE" and checks["end_to_end.p99_ms"]["frames_needed"] == 299
    assert checks["end_to_end.p50_ms"]["measured"] == report["end_to_end"]["p50_ms"]
    assert checks["end_to_end.p50_ms"]["status"] == "PASS"  # 10 measured frames do back a p50
    # The runtime that ran is the release's own copy of sdk, not the checkout (the second deploy kept the release current).
    current = (state / "targets" / "local" / "current").resolve()
    assert report["environment"]["sdk_location"] == str(current / "sdk")
    assert report["release"] == current.name
    # Which sampler resized the frames, and with which OpenCV (the pixels must not depend on it).
    opencv = report["environment"]["packages"]["cv2"]["version"]
    assert report["preprocess"]["how"] in (f"CPU, OpenCV warpAffine (OpenCV {opencv})", f"CPU, separable bilinear (OpenCV {opencv})")
    assert (report["preprocess"]["device"], report["preprocess"]["reason"], report["preprocess"]["emulated"]) == ("cpu", "no CUDA device", False)
    lines = [json.loads(line) for line in (reports / "detections.jsonl").read_text().splitlines()]
    assert [line["frame"] for line in lines] == list(range(REPORTED_FRAMES))
    assert all(isinstance(line["t_capture_ns"], int) for line in lines)
    people = [d for line in lines for d in line["detections"]]
    assert len(people) > REPORTED_FRAMES and {d["label"] for d in people} == {"person"}
    assert all(0 <= d["box"][0] < d["box"][2] <= 768 and 0 <= d["box"][1] < d["box"][3] <= 576 for d in people)
    video = cv2.VideoCapture(str(reports / "annotated.mp4"))
    assert int(video.get(cv2.CAP_PROP_FRAME_COUNT)) == REPORTED_FRAMES and int(video.get(cv2.CAP_PROP_FRAME_WIDTH)) == 768
    video.release()


def with_the_prepared_example(state: Path, prepared_example) -> None:
    """The example's model, prepared once per session (tests/conftest.py), in this test's host cache: these tests are
    about the target, not about preparing (test_sdk_prepare_and_targets_list and tests/tools/models/ are)."""
    shutil.copytree(prepared_example.folder, state / "cache" / "prepared" / prepared_example.folder.name)


REPORTED_FRAMES = 20  # the pipeline's 10 warm-up frames, then 10 measured ones


def relaxed_example(folder: Path) -> Path:
    """The example, its budgets ones no frame can miss (the verdict must not depend on how loaded this machine is)."""
    shutil.copytree(REPO / "pipelines" / "assets", folder / "assets")
    relaxed = "end_to_end: {p50_ms: 60000, p99_ms: 60000, max_ms: 60000}"
    text = EXAMPLE.read_text().replace("end_to_end: {p50_ms: 33.3, p99_ms: 50.0, max_ms: 200.0}", relaxed)
    text = text.replace("deadline_ms: 33.3 ", "deadline_ms: 60000 ").replace("infer: {p99_ms: 40.0}", "infer: {p99_ms: 60000}")
    assert "p50_ms: 60000" in text and "deadline_ms: 60000" in text and "infer: {p99_ms: 60000}" in text
    (folder / "pedestrian.yaml").write_text(text)
    return folder / "pedestrian.yaml"


@pytest.fixture(scope="module")
def deployed_twice(tmp_path_factory, prepared_example) -> SimpleNamespace:
    """The example (relaxed budgets) deployed twice to one local target, the machine's free disk changed between the two
    deploys; made once for the tests that read it (one xdist worker: their group). The first deploy is `sdk deploy` on
    the command line (in this process: its exit code and words are kept, `cli`), 20 frames with the report folder r1;
    the second, 3 frames into r2. Kept: what each sent (their DeployResults), each deploy's reports, the store's
    objects before and after the second. test_deploy_local_writes_the_report_contract checks the first deploy's reports
    and words: what this deploy is, that test checks."""
    folder = tmp_path_factory.mktemp("deployed-twice")
    pipeline = relaxed_example(folder / "p")
    results: list = []
    deploy = Deploy.__call__

    def recorded(self):
        results.append(deploy(self))
        return results[-1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SDK_STATE_DIR", str(folder / "state"))
        patch.setenv("SDK_TARGETS_DIR", str(folder / "targets"))  # none: `local` only
        patch.setenv("COLUMNS", "200")
        with_the_prepared_example(folder / "state", prepared_example)
        patch.setattr(Deploy, "__call__", recorded)  # what the CLI's deploy sent, beside what it printed
        argv = ["deploy", "--target", "local", str(pipeline), "--frames", str(REPORTED_FRAMES), "--report-dir", str(folder / "r1")]
        stdout, stderr = (folder / "stdout").open("w"), (folder / "stderr").open("w")  # files: faulthandler wants a fileno
        with stdout, stderr, contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            code = run(argv)
        cli = SimpleNamespace(returncode=code, stdout=(folder / "stdout").read_text(), stderr=(folder / "stderr").read_text())
        assert len(results) == 1, cli.stderr
        store = folder / "state" / "targets" / "local" / "store"
        before = {p.name: p.stat().st_mtime_ns for p in store.iterdir()}
        (folder / "filler").write_bytes(bytes(1 << 20))  # the free disk changes between the runs
        second = Deploy(pipeline, "local", frames=3, report_dir=folder / "r2")()
    after = {p.name: p.stat().st_mtime_ns for p in store.iterdir()}
    return SimpleNamespace(folder=folder, cli=cli, first=results[0], second=second, before=before, after=after)


@pytest.mark.slow
@pytest.mark.xdist_group("deployed-twice")
def test_second_deploy_sends_nothing_new(deployed_twice):
    first, second, before = deployed_twice.first, deployed_twice.second, deployed_twice.before
    assert first.staged.files_sent == len(before) and first.staged.bytes_sent > 20_000_000
    assert (second.staged.files_sent, second.staged.bytes_sent) == (0, 0)
    assert second.staged.release_id == first.staged.release_id
    assert deployed_twice.after == before
    release = ReleaseManifest.load(deployed_twice.folder / "state" / "targets" / "local" / "current")
    assert not any(name.startswith("tools/") for name in release.files)  # the vehicle never gets host tools
    assert {"artifacts/model.onnx", "pipeline/pedestrian.yaml", "pipeline/assets/vtest.avi", "sdk/__init__.py"} <= set(release.files)
    assert "pipeline/assets/ssdlite_pedestrian.onnx" not in release.files  # the prepared model travels, not the original


BAD_FILES = {
    "unknown key": (("  threads: 2", "  thraeds: 2"), "did you mean 'threads'?"),
    "wrong type": (("threads: 2", "threads: two"), "model.threads"),
    "missing model": (("assets/ssdlite_pedestrian.onnx", "assets/gone.onnx"), "gone.onnx does not exist"),
    "escaping path": (("assets/ssdlite_pedestrian.onnx", "../../../etc/passwd"), "leaves the folder"),
    "python tag": (("name: pedestrian", "name: !!python/object/apply:os.system ['true']"), "python/object/apply"),
    "duplicate key": (("name: pedestrian", "name: pedestrian\nname: again"), "duplicate key 'name'"),
    "huge file": (("# Pedestrian", "#" + "x" * 300_000 + "\n# Pedestrian"), "at most 262144 bytes"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_pipeline_files_exit_1_and_touch_nothing(tmp_path, case, cli):
    (old, new), expected = BAD_FILES[case]
    folder = tmp_path / "p"
    shutil.copytree(REPO / "pipelines" / "assets", folder / "assets")
    (folder / "bad.yaml").write_text(EXAMPLE.read_text().replace(old, new, 1))
    state = tmp_path / "state"
    done = cli("deploy", "--target", "local", str(folder / "bad.yaml"), "--report-dir", str(tmp_path / "r"), state=state)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert lines[0].startswith("error: ") and expected in done.stderr and "bad.yaml" in lines[0]
    assert lines[-1].startswith("hint: ") and "Traceback" not in done.stderr
    assert not state.exists() and not (tmp_path / "r").exists()  # nothing written to the target or the reports


def test_unknown_target_lists_the_known_ones(tmp_path, cli):
    done = cli("deploy", "--target", "orin-99", str(EXAMPLE), state=tmp_path / "state")
    assert done.returncode == 1 and "unknown target 'orin-99'; known targets: local" in done.stderr
    hostile = cli("deploy", "--target", "x; rm -rf /", str(EXAMPLE), state=tmp_path / "state")
    assert hostile.returncode == 1 and "invalid target name" in hostile.stderr
    assert not (tmp_path / "state").exists()


def test_usage_errors_exit_2_and_out_of_range_frame_counts_exit_1_before_anything_is_done(tmp_path, cli):
    assert cli("deploy", str(EXAMPLE), state=tmp_path).returncode == 2  # no --target
    assert cli("deploy", "--target", "local", str(EXAMPLE), "--frames", "many", state=tmp_path).returncode == 2
    for frames, allowed in (("0", "allowed: 1 to 1000000"), ("100000000", "allowed: at most 1000000 frames")):
        done = cli("deploy", "--target", "local", str(EXAMPLE), "--frames", frames, state=tmp_path)
        assert done.returncode == 1 and done.stderr.count("error:") == 1 and allowed in done.stderr, done.stderr
        assert "Traceback" not in done.stderr and not (tmp_path / "targets").exists() and not (tmp_path / "cache").exists()
    assert cli("calibrate-everything", state=tmp_path).returncode == 2


# Where a deploy to the local target can be killed, by phase: the kill points on its path (sdk/store/faults.py). Each
# killed attempt picks a phase in turn and a point in it at random (seeded); the kill lands exactly there.
PHASES = {
    "lease": ("lease.token-written", "lease.recorded"),
    "staging": ("store.object-installed", "store.release-assembled"),
    "switch": ("trial.record-written", "link.temporary-made", "link.switched", "trial.current-switched", "trial.health-running"),
    "pass and commit": ("trial.passed-recorded", "commit.state-written", "commit.committed-linked", "commit.previous-linked", "commit.trial-removed"),
}


@pytest.fixture()
def host_forks():
    """Real processes of the host's CLI and of the unit's start command, forked from one that imported them once (each
    fresh interpreter would cost 2-3 CPU-seconds of imports; tests/sdk/store/forks.py)."""
    from tests.sdk.store.forks import DeviceForks

    forker = DeviceForks(REPO, {**os.environ, "PYTHONPATH": str(REPO)}, preload=("tools.cli", "tools.deploy.flow", "tools.console", "onnx"))
    yield forker
    forker.close()


@pytest.mark.slow
@pytest.mark.xdist_group("deployed-twice")
def test_a_deploy_killed_in_every_phase_leaves_the_last_committed_release_to_start_verified(tmp_path, host_forks, prepared_example, deployed_twice):
    """SIGKILL at points the deploy's processes announce (SDK_FAULT, traced by SDK_FAULT_TRACE), phase after phase,
    each attempt a new release; after each kill the systemd unit's start command runs the last committed release.
    The deploy's CLI and the unit's start are real processes, forked from one that imported them once (`host_forks`);
    the processes the deploy starts (its lease's holder, its trial, the health and measured runs) are its own.
    The target starts as a copy of `deployed_twice`'s (the example deployed and committed by a complete deploy: what
    the first attempt here made before); the next deploy after the kills recovers, a real CLI process to its end."""
    from sdk.store.faults import POINTS
    from sdk.store.objects import ReleaseStore
    from sdk.store.verify import verify_release

    assert {p for points in PHASES.values() for p in points} <= set(POINTS)
    folder = tmp_path / "p"
    shutil.copytree(REPO / "pipelines" / "assets", folder / "assets")
    state = tmp_path / "state"
    with_the_prepared_example(state, prepared_example)
    root = state / "targets" / "local"
    root.parent.mkdir(parents=True)
    subprocess.run(["cp", "-a", str(deployed_twice.folder / "state" / "targets" / "local"), str(root)], check=True)  # -a: its hard links
    assert ReleaseStore(root).committed() == deployed_twice.second.staged.release_id
    rng = random.Random(20261127)
    landed: dict[str, list[str]] = {phase: [] for phase in PHASES}
    order = list(PHASES)  # one kill a phase (tests/sdk/store/test_kill_points.py kills at every point)

    def deploy(attempt: int, fault: str | None):
        (folder / "p.yaml").write_text(EXAMPLE.read_text() + f"# attempt {attempt}\n")  # each attempt a new release
        env = {**os.environ, "SDK_STATE_DIR": str(state), "SDK_FAULT_TRACE": str(tmp_path / f"trace-{attempt}")}
        env |= {"SDK_FAULT": fault} if fault else {}
        argv = ["sdk", "deploy", "--target", "local", str(folder / "p.yaml"), "--frames", "2", "--report-dir", str(tmp_path / "r"), "--force"]
        return host_forks.run(argv, module="tools.cli:main", cwd=REPO, env=env, output=tmp_path / f"deploy-{attempt}", timeout=600)

    for attempt, phase in enumerate(order, start=1):
        before = ReleaseStore(root).committed()
        fault = rng.choice(PHASES[phase])
        done = deploy(attempt, fault)
        lines = [line.split(" ", 1) for line in (tmp_path / f"trace-{attempt}").read_text().splitlines()]
        passed = [name for _, name in lines]
        hits = [index for index, (_, name) in enumerate(lines) if name == fault]
        assert hits, f"the kill did not land at {fault} (points passed: {passed})"  # (another process of the
        # deploy passing the same point later, the lease's holder rolling back, is killed there too: a second fault)
        killed = lines[hits[0]][0]  # that process passed no point after it: it died there (others went on: the lease's end)
        assert not [name for pid, name in lines[hits[0] + 1 :] if pid == killed], passed
        assert done.returncode != 0 and "Traceback" not in done.stderr
        landed[phase].append(fault)
        expected = ReleaseStore(root).committed() if "commit.state-written" in passed else before
        # What a vehicle starts after the kill: the unit's start command, for two frames.
        command = ["sdk", "serve", "--root", str(root), "--status-dir", str(root / "service"), "--frames", "2"]
        unit_env = {**os.environ, "PYTHONPATH": str(REPO)}
        started = host_forks.run(command, module="sdk", cwd=root, env=unit_env, output=tmp_path / f"serve-{attempt}", timeout=300)
        assert started.returncode == 0, started.stderr
        status = json.loads((root / "service" / "status.json").read_text())
        assert status["release"] == expected and status["frames"] == 2
        verify_release(ReleaseStore(root).release_dir(expected))
    counts = {phase: len(points) for phase, points in landed.items()}
    print(f"kills landed per phase: {counts} ({landed})")
    assert counts["staging"] >= 1 and counts["switch"] >= 1, counts
    done = deploy(len(order) + 1, None)
    assert done.returncode in (0, 3, 4), done.stderr  # and the next deploy recovers
    current = (root / "current").resolve()
    assert ReleaseStore(root).committed() == current.name
    ReleaseManifest.load(current).verify(current)
    assert not list(root.rglob(".tmp-*"))


def test_sdk_prepare_and_targets_list(tmp_path, cli):
    state = tmp_path / "state"
    first = cli("prepare", str(EXAMPLE), state=state)
    assert first.returncode == 0, first.stderr
    assert "prepared: " in first.stdout and '"concat:0"' in first.stdout
    again = cli("prepare", str(EXAMPLE), state=state)
    assert "cached: " in again.stdout
    assert len(list((state / "cache" / "prepared").iterdir())) == 1
    listed = cli("targets", "list", state=state)
    assert listed.returncode == 0 and listed.stdout.split() == ["local"]


@pytest.mark.xdist_group("deployed-twice")
def test_the_device_fingerprint_is_the_same_on_every_run_of_one_machine(deployed_twice):
    """device.json (and the hash the report keeps of it) says what the device is; free disk space changes from run to
    run and goes with the run's environment instead. (The two deploys of `deployed_twice`: `deploy` on the command line
    writes its reports through the same Deploy, test_deploy_local_writes_the_report_contract.)"""
    folder = deployed_twice.folder
    first, second = ((folder / name / "device.json").read_bytes() for name in ("r1", "r2"))
    assert first == second and b"free_disk_bytes" not in first
    reports = [json.loads((folder / name / "report.json").read_text()) for name in ("r1", "r2")]
    assert {report["run"]["device_fingerprint_sha256"] for report in reports} == {hashlib.sha256(first).hexdigest()}
    assert all(report["environment"]["device_at_deploy"]["free_disk_bytes"] > 0 for report in reports)


def test_a_source_that_ends_before_the_health_check_says_how_to_loop_it(tiny_pipeline, tmp_path, state_dir, cli):
    pipeline, _ = tiny_pipeline(frames=2)  # a 2-frame recording: the health check needs 5
    done = cli("deploy", "--target", "local", str(pipeline.path), "--report-dir", str(tmp_path / "r"), state=state_dir)
    assert done.returncode == 1 and "only 2 frame(s) went through the pipeline" in done.stderr
    assert "hint: a single image or a short recording ends before the health check's 5 frames: set source.replay.loop: true" in done.stderr
