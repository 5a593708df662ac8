"""report.html with several cameras: a table and one latency plot per camera, drawn from that camera's frames."""

from __future__ import annotations

from sdk.runtime import PipelineRunner
from sdk.runtime.report import build_report, write_report
from sdk.runtime.timeline import write_timeline
from sdk.spec import load_pipeline
from tools.evidence.camera_plots import draw_camera_plots
from tools.evidence.html_report import write_html
from tools.models.prepare import PrepareModel

TWO = """\
version: 1
name: tiny
sources:
  front: {uri: "synthetic://boxes?width=64&height=48&frames=12"}
  rear: {uri: "synthetic://noise?width=64&height=48&frames=7"}
preprocess:
  resize: {width: 32, height: 32}
  normalize: {scale: 0.00392156862745098}
model:
  path: tiny.onnx
  threads: 1
postprocess:
  decoder: {kind: yolo, output: output0, layout: v5}
  classes: [car, person]
budgets:
  warmup_frames: 0
  deadline_ms: 60000
  cameras:
    rear: {end_to_end: {p50_ms: 50000}}
"""


def test_one_latency_plot_per_camera(tmp_path):
    from tests.conftest import tiny_yolo

    folder = tmp_path / "p"
    folder.mkdir()
    tiny_yolo(folder / "tiny.onnx")
    (folder / "tiny.yaml").write_text(TWO)
    pipeline = load_pipeline(folder / "tiny.yaml")
    out = tmp_path / "out"
    result = PipelineRunner(pipeline, PrepareModel(pipeline, tmp_path / "cache")(), out).run()
    report = build_report(pipeline, result, target="local")
    assert report["cameras"]["front"]["frames"] == 12 and report["cameras"]["rear"]["frames"] == 7
    write_report(report, out)
    write_timeline(result.recorder, report["warmup_frames"], out)
    from sdk.runtime.timeline import read_timeline

    plots = draw_camera_plots(report, read_timeline(out / "timeline.npz"))
    assert list(plots) == ["front", "rear"]
    assert "camera rear" in plots["rear"] and "50000" in plots["rear"].replace(",", "")  # its own budget line
    page = write_html(out).read_text()
    assert page.count('aria-label="latency ') == 2 and "<h2>Cameras</h2>" in page
