"""The trial's verdict on the health run, at its boundaries, on the local target (sdk/store/trial.py through the
session deploy uses): `health.min_frames` frames through the pipeline pass, one fewer fails and says how many went
through; a runtime that exits with its own error fails with that error, whatever it left behind.

The release that passes first (`good`, five frames, its trial at `min_frames: 5`) and a second five-frame release
are staged, and the first tried and committed, once per run (a shared folder); each test tries its own release on a
copy of that store.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from sdk.errors import ReleaseError
from sdk.store.objects import ReleaseStore
from sdk.store.trial import HealthPolicy
from tests.conftest import PIPELINE, tiny_yolo


def staged(base: Path, label: str, uri: str, files: dict[str, bytes] | None = None, decoder: str | None = None) -> str:
    from sdk.spec import load_pipeline
    from tools.connect.sessions import LocalSession
    from tools.models.prepare import PrepareModel
    from tools.release.bundle import collect_bundle
    from tools.release.stage import manifest_for, stage_release
    from tools.targets import LocalTarget

    folder = base / f"pipeline-{label}"
    folder.mkdir()
    tiny_yolo(folder / "tiny.onnx")
    for name, data in (files or {}).items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    text = PIPELINE.format(uri=uri, rate="null", max_ms=5000)
    if decoder is not None:
        text = text.replace("decoder: {kind: yolo, output: output0, layout: v5}", decoder)
    (folder / "tiny.yaml").write_text(text + f"# release {label}\n")
    pipeline = load_pipeline(folder / "tiny.yaml")
    prepare = PrepareModel(pipeline, base / "cache")
    bundle = collect_bundle(pipeline, prepare(), prepare.key)
    return stage_release(LocalSession(LocalTarget("local", base / "target")), bundle, manifest_for(bundle)).release_id


def trial(base: Path, release: str, min_frames: int):
    from tools.connect.sessions import LocalSession
    from tools.targets import LocalTarget

    session = LocalSession(LocalTarget("local", base / "target"))
    session.lock("test")
    try:
        result = session.trial(release, "test", HealthPolicy(min_frames=min_frames, timeout_s=120), lambda event: None)
        if result.healthy:
            session.store_op("commit")
        return result
    finally:
        session.unlock("test")


FIVE = "synthetic://boxes?width=64&height=48&frames=5"


def _build(base: Path) -> None:
    """`good` staged, tried at `min_frames: 5` and committed; `b`, its camera the same five frames, staged."""
    good = staged(base, "good", FIVE)
    passed = trial(base, good, min_frames=5)
    b = staged(base, "b", FIVE)
    (base / "built.json").write_text(json.dumps({"good": good, "b": b, "healthy": passed.healthy, "reason": passed.reason}))


@pytest.fixture(scope="module")
def committed(tmp_path_factory):
    from tests.conftest import shared_folder

    base = shared_folder(tmp_path_factory, "trial-judgement-store", _build)
    return base, json.loads((base / "built.json").read_text())


@pytest.fixture()
def store(committed, tmp_path) -> tuple[Path, dict]:
    """A copy of the store with `good` committed (and `b` staged), and the prepared-model cache, in this test's folder."""
    base, built = committed
    for name in ("target", "cache"):
        subprocess.run(["cp", "-a", str(base / name), str(tmp_path / name)], check=True)  # -a keeps the store's hard links
    return tmp_path, built


def test_min_frames_through_the_pipeline_pass_and_one_more_needed_fails(store):
    """Two releases whose camera has exactly five frames: the first passed its trial at `min_frames: 5` (in the shared
    store), the second is tried at 6."""
    base, built = store
    assert built["healthy"], built["reason"]
    assert built["reason"] == "5 frames went through every stage"
    failed = trial(base, built["b"], min_frames=6)
    assert not failed.healthy
    assert failed.reason == "only 5 frame(s) went through the pipeline; the health check needs 6 (health.min_frames)"
    target = ReleaseStore(base / "target")
    assert target.committed() == target.current() == built["good"] and target.trial() is None
    assert target.status()["last_trial"]["outcome"] == "rolled back"


def test_a_runtime_that_exits_with_its_own_error_fails_with_that_error(store):
    tmp_path, built = store
    good = built["good"]
    # A video with no decodable frame: the runtime's own one-line error, status 1.
    broken = staged(tmp_path, "broken", "file://broken.avi", {"broken.avi": b"\0" * 4096})
    failed = trial(tmp_path, broken, min_frames=2)
    assert not failed.healthy
    assert "broken.avi" in failed.reason and not failed.reason.startswith(("only ", "the runtime wrote no report", "the runtime exited"))
    store = ReleaseStore(tmp_path / "target")
    assert store.committed() == store.current() == good


def test_a_release_edited_before_its_trial_never_runs(store):
    """A staged release changed in place (same length: only the hash tells) is refused before its health run starts:
    nothing switched, nothing ran."""
    tmp_path, built = store
    good = built["good"]
    edited = staged(tmp_path, "edited", FIVE)
    store = ReleaseStore(tmp_path / "target")
    path = store.release_dir(edited) / "pipeline" / "tiny.yaml"
    data = path.read_bytes()
    path.chmod(0o644)
    path.write_bytes(data.replace(b"release edited", b"RELEASE edited"))
    from tools.connect.sessions import LocalSession
    from tools.targets import LocalTarget

    session = LocalSession(LocalTarget("local", tmp_path / "target"))
    session.lock("test")
    try:
        with pytest.raises(ReleaseError) as refused:
            session.trial(edited, "test", HealthPolicy(min_frames=2, timeout_s=120), lambda event: None)
    finally:
        session.unlock("test")
    assert f"release {edited}: pipeline/tiny.yaml does not match its manifest (changed on disk)" in refused.value.message
    assert store.committed() == store.current() == good and store.trial() is None
    assert not (store.root / "runs" / f"health-{edited}").exists()


# A decoder that plants a module beside itself while the health check runs: what a compromised or buggy
# release could do to the bytes that are about to be committed.
PLANTING_DECODER = """\
from pathlib import Path

import numpy as np


def decode(outputs, geometry, options):
    Path(__file__).with_name("planted.py").write_text("import os\\n")
    rows = np.asarray(outputs["output0"])[0]
    cx, cy, w, h = rows[:, 0], rows[:, 1], rows[:, 2], rows[:, 3]
    scores = rows[:, 4:5] * rows[:, 5:]
    boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)
    return {"boxes": boxes, "scores": scores.max(axis=1), "class_ids": scores.argmax(axis=1)}
"""


def test_a_release_whose_files_change_during_its_health_check_is_rolled_back(store):
    tmp_path, built = store
    good = built["good"]
    decoder = "decoder: {kind: python, entry: 'planting:decode', path: plugins}"
    files = {"plugins/planting.py": PLANTING_DECODER.encode()}
    planting = staged(tmp_path, "planting", FIVE, files, decoder)
    failed = trial(tmp_path, planting, min_frames=2)
    assert not failed.healthy
    assert failed.reason.startswith(f"its files changed during the health check: release {planting}: ")
    assert failed.reason.endswith("plugins/planted.py is not part of the release (its manifest does not list it)"), failed.reason
    store = ReleaseStore(tmp_path / "target")
    assert store.committed() == store.current() == good and store.trial() is None
