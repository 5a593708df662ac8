"""`sdk profile` of a vehicle over SSH (the simulated target: a real sshd): the current release's model profiled on the
device by `python -m sdk profile --release .`, under the deploy lease, the raw profile fetched and mapped on the host;
refused, before anything runs, when the current release runs another pipeline."""

from __future__ import annotations

import pytest

from sdk.errors import TargetError
from tools.deploy.flow import Deploy
from tools.perf.run import Profile


@pytest.mark.slow
def test_a_vehicle_profiles_its_current_release(ssh_target, tiny_pipeline, tmp_path):
    pipeline, _ = tiny_pipeline(frames=20)
    Deploy(pipeline.path, "sim", frames=2, report_dir=tmp_path / "deploy")()
    result = Profile(pipeline.path, "sim", frames=3, report_dir=tmp_path / "profile")()
    report = result.report
    assert report["target"] == "sim" and report["backend"] == "onnxruntime" and report["frames"] == 3
    assert report["run"]["release"] and (tmp_path / "profile" / "raw" / "profile.json").is_file()
    assert {m for layer in report["layers"] for m in layer["fused"]} == {"ReduceSum_0", "Mul_1", "Add_2"}  # unnamed nodes: op_index
    assert report["total"]["predicted_ms"] is None and any("device's CPU" in note for note in report["notes"])
    assert not (ssh_target.root / "runs" / "profile").exists()  # fetched, then cleared on the device

    other = tmp_path / "other"
    other.mkdir()
    (other / "tiny.yaml").write_text(pipeline.path.read_text().replace("name: tiny", "name: other"))
    (other / "tiny.onnx").write_bytes((pipeline.folder / "tiny.onnx").read_bytes())
    with pytest.raises(TargetError, match="runs another version"):
        Profile(other / "tiny.yaml", "sim", frames=2, report_dir=tmp_path / "refused")()


def test_stage_shares_come_from_the_newest_measured_run(tmp_path, monkeypatch):
    import json
    from types import SimpleNamespace

    import tools.reports.report_dirs as report_dirs
    from tools.perf.assemble import stage_shares

    monkeypatch.setattr(report_dirs, "REPORTS", tmp_path)
    pipeline = SimpleNamespace(spec=SimpleNamespace(name="tiny"))
    assert stage_shares(pipeline, "sim") is None
    for stamp, infer in (("20260101T000000Z", 9.0), ("20260102T000000Z", 6.0)):
        folder = tmp_path / "tiny" / f"{stamp}-sim-validate"
        folder.mkdir(parents=True)
        stages = {"preprocess": {"p50_ms": 2.0}, "infer": {"p50_ms": infer}, "postprocess": {"p50_ms": 2.0}}
        (folder / "report.json").write_text(json.dumps({"stages": stages}))
    (tmp_path / "tiny" / "20260103T000000Z-sim-profile").mkdir()  # a profile is not a measured run
    found = stage_shares(pipeline, "sim")
    assert found["shares"] == {"preprocess": 0.2, "infer": 0.6, "postprocess": 0.2} and found["from"].endswith("20260102T000000Z-sim-validate")
