"""`preprocess.device` through `deploy --target local` on a machine without a GPU, through the real CLI (in this
process, its own error boundary; the release runs in the device's processes as always): cuda is one error line and
exit 1; auto runs on the CPU and the report says why; with SDK_CUDA_EMULATION=host, cuda runs the CUDA path
(emulated), its report names the cuda device, and its detections are the CPU path's (auto's run: on this machine it
is the CPU path, as its report says, so no third deploy with `device: cpu` is needed)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sdk.postprocess.compare import matched_share

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "pipelines" / "pedestrian.yaml"


def pipeline(folder: Path, device: str) -> Path:
    """The example with `device`, budgets no loaded machine misses, and the JSONL sink only."""
    if not (folder / "assets").exists():
        shutil.copytree(REPO / "pipelines" / "assets", folder / "assets")
    text = EXAMPLE.read_text().replace("  dtype: float32\n", f"  dtype: float32\n  device: {device}\n", 1)
    text = text.replace("end_to_end: {p50_ms: 33.3, p99_ms: 50.0, max_ms: 200.0}", "end_to_end: {p50_ms: 60000, max_ms: 60000}")
    text = text.replace("deadline_ms: 33.3 ", "deadline_ms: 60000 ").replace("infer: {p99_ms: 40.0}", "infer: {p50_ms: 60000}")
    text = text.replace("  - {kind: video, path: annotated.mp4}   # MPEG-4 part 2, plays everywhere\n", "")
    assert f"device: {device}" in text and "p50_ms: 60000" in text
    path = folder / f"pedestrian_{device}.yaml"
    path.write_text(text)
    return path


@pytest.mark.slow
def test_cpu_cuda_and_auto_on_a_machine_without_a_gpu(tmp_path, state_dir, monkeypatch, sdk_fd):
    sdk = sdk_fd
    folder = tmp_path / "p"
    folder.mkdir()
    monkeypatch.setenv("SDK_TARGETS_DIR", str(tmp_path / "targets"))
    monkeypatch.delenv("SDK_CUDA_EMULATION", raising=False)
    paths = {device: pipeline(folder, device) for device in ("cuda", "auto")}

    refused = sdk("deploy", "--target", "local", str(paths["cuda"]), "--frames", "5", "--report-dir", str(tmp_path / "r-refused"))
    assert refused.returncode == 1, refused.stderr
    errors = [line for line in (refused.stdout + refused.stderr).splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "preprocess.device: cuda, but no CUDA device" in errors[0] and "Traceback" not in refused.stderr

    reports = {}
    for device, emulate in (("auto", False), ("cuda", True)):
        out = tmp_path / f"r-{device}"
        if emulate:
            monkeypatch.setenv("SDK_CUDA_EMULATION", "host")  # the device's processes inherit it
        done = sdk("deploy", "--target", "local", str(paths[device]), "--frames", "12", "--report-dir", str(out))
        assert done.returncode in (0, 4), done.stdout + done.stderr  # PASS, or INCONCLUSIVE on 2 measured frames
        reports[device] = (
            json.loads((out / "report.json").read_text()),
            [json.loads(line) for line in (out / "detections.jsonl").read_text().splitlines()],
        )
        assert "preprocessing: " in done.stdout
    auto = reports["auto"][0]["preprocess"]
    assert (auto["device"], auto["reason"], auto["emulated"]) == ("cpu", "no CUDA device", False)
    cuda = reports["cuda"][0]["preprocess"]
    assert (cuda["device"], cuda["emulated"], cuda["decode"]["device"]) == ("cuda", True, "cuda")
    assert "preprocessing on cuda (emulated on the host)" in (tmp_path / "r-cuda" / "report.html").read_text()
    share, total = matched_share(reports["cuda"][1], reports["auto"][1])  # auto ran the CPU path (asserted above)
    assert total > 30 and share >= 0.99, (share, total)
