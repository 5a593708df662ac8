"""A classify or segment decoder's label file travels with the pipeline in the release, where the pipeline names it."""

from __future__ import annotations

from sdk.spec import load_pipeline
from tools.release.bundle import PIPELINE_DIR, collect_bundle

PIPELINE = """\
version: 1
name: labels
source: {uri: "file://clip.avi"}
preprocess: {resize: {width: 8, height: 8}}
model: {path: m.onnx}
postprocess:
  decoder: {kind: classify, output: p, labels: names/labels.txt}
"""


class NoArtifacts:
    def files(self):
        return []


def test_the_label_file_is_in_the_bundle_beside_the_pipeline(tmp_path):
    for name in ("clip.avi", "m.onnx"):
        (tmp_path / name).write_bytes(b"stand-in")
    (tmp_path / "names").mkdir()
    (tmp_path / "names" / "labels.txt").write_text("cat\ndog\n")
    (tmp_path / "p.yaml").write_text(PIPELINE)
    pipeline = load_pipeline(tmp_path / "p.yaml")
    bundle = collect_bundle(pipeline, NoArtifacts(), "key")
    assert bundle.files[f"{PIPELINE_DIR}/names/labels.txt"] == tmp_path / "names" / "labels.txt"
    assert pipeline.class_names() == ("cat", "dog")
