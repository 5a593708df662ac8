"""`kind: python` decoder plug-ins: the entry's form at load, importable and callable at open, the contract per frame,
errors named after the plug-in; and the real BlazeFace decoded by a plug-in through `deploy --target local`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import onnxruntime as ort
import pytest

from sdk.errors import ConfigError
from sdk.geometry import ResizeGeometry
from sdk.postprocess import create_postprocessor
from sdk.postprocess.plugin import PluginError, load_entry
from sdk.spec.loader import load_pipeline
from sdk.spec.schema import Postprocess, Resize
from tests.integration.mediapipe_reference import REPO, compare, deploy_local, reference_anchors
from tests.integration.test_blazeface_real_model import ASSETS, NAMES, PIPELINE, one_box_and_one_score_tensor, portrait_frames

FACES = '''\
"""A BlazeFace decoder written as a plug-in: MediaPipe's TensorsToDetections for fixed-size anchors, in numpy."""
import numpy as np


def _anchors(size):
    centres = []
    for stride, per_cell in ((8, 2), (16, 6)):
        cells = -(-size // stride)
        for y in range(cells):
            for x in range(cells):
                centres += [((x + 0.5) / cells, (y + 0.5) / cells)] * per_cell
    return np.array(centres, np.float32)


def decode(outputs, geometry, options):
    size = options["size"]
    anchors = _anchors(size)
    rows = outputs["regressors"][0]
    logits = np.clip(outputs["classificators"][0, :, 0], -100, 100)
    cx = rows[:, 0] / size + anchors[:, 0]
    cy = rows[:, 1] / size + anchors[:, 1]
    w, h = rows[:, 2] / size, rows[:, 3] / size
    boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1) * np.array([geometry.out_width, geometry.out_height] * 2)
    points = rows[:, 4:16].reshape(-1, 6, 2) / size + anchors[:, None, :]
    points = points * [geometry.out_width, geometry.out_height]
    return {"boxes": boxes, "scores": 1 / (1 + np.exp(-logits)), "class_ids": np.zeros(len(rows), np.int64), "keypoints": points}
'''


def _plugin_pipeline(entry: str = "faces:decode", extra: str = "") -> str:
    start, end = PIPELINE.index("  decoder:\n"), PIPELINE.index("  classes: [face]")
    decoder = f"  decoder:\n    kind: python\n    entry: {entry}\n    path: plugins\n    options: {{size: 128}}\n{extra}"
    return PIPELINE[:start] + decoder + PIPELINE[end:]


def _postprocess(**decoder) -> Postprocess:
    return Postprocess.model_validate({"decoder": {"kind": "python", **decoder}, "classes": ["a", "b"], "score_threshold": 0.5})


def _geometry() -> ResizeGeometry:
    return ResizeGeometry.plan(200, 100, Resize(width=100, height=100))


@pytest.mark.parametrize("entry", ["mod", "pkg.mod:f", "pkg.mod:Cls.method", "my-decoder.v2"])
def test_entry_forms_that_load(entry):
    assert _postprocess(entry=entry).decoder.entry == entry


@pytest.mark.parametrize("entry", ["pkg.mod:", ":f", "pkg mod:f", "a:b:c", "pkg/mod.py:f", "pkg.mod:f()"])
def test_a_malformed_entry_is_one_error_line_at_load(tmp_path, entry):
    (tmp_path / "p.yaml").write_text(_plugin_pipeline(entry=f"'{entry}'"))
    with pytest.raises(ConfigError) as caught:
        load_pipeline(tmp_path / "p.yaml", check_files=False)
    assert "postprocess.decoder.entry" in str(caught.value) and "package.module:function" in str(caught.value)


def test_a_plugin_folder_outside_the_pipeline_or_missing_is_refused_at_load(tmp_path):
    (tmp_path / "p.yaml").write_text(_plugin_pipeline().replace("path: plugins", "path: ../elsewhere"))
    with pytest.raises(ConfigError, match=r"postprocess\.decoder\.path"):
        load_pipeline(tmp_path / "p.yaml", check_files=False)
    (tmp_path / "p.yaml").write_text(_plugin_pipeline())
    (tmp_path / "frames").mkdir()
    (tmp_path / "blazeface.onnx").write_bytes(b"")
    with pytest.raises(ConfigError, match=r"postprocess\.decoder\.path: .*plugins does not exist"):
        load_pipeline(tmp_path / "p.yaml")


def test_open_refuses_what_does_not_import_or_call(tmp_path):
    (tmp_path / "broken_at_import.py").write_text("x = 1\nraise RuntimeError('no licence key')\n")
    (tmp_path / "not_callable.py").write_text("decode = 42\n")
    with pytest.raises(ConfigError, match=r"module 'nowhere_module_xyz' cannot be found"):
        load_entry("nowhere_module_xyz:decode", tmp_path)
    with pytest.raises(ConfigError, match=r"importing 'broken_at_import' raised RuntimeError: no licence key at broken_at_import.py:2"):
        load_entry("broken_at_import:decode", tmp_path)
    with pytest.raises(ConfigError, match=r"'not_callable' has no attribute 'missing'"):
        load_entry("not_callable:missing", tmp_path)
    with pytest.raises(ConfigError, match=r"'decode' is a int, not a function"):
        load_entry("not_callable:decode", tmp_path)
    with pytest.raises(ConfigError, match=r"not an entry point of the 'sdk.decoders' group"):
        load_entry("no-such-decoder", None)


def test_an_entry_point_of_the_group_is_found(tmp_path, monkeypatch):
    """An installed distribution's entry point (a real .dist-info on sys.path, read by importlib.metadata)."""
    (tmp_path / "shipped_heads.py").write_text("def decode(outputs, geometry, options):\n    return {'boxes': [], 'scores': [], 'class_ids': []}\n")
    info = tmp_path / "shipped_heads-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: shipped-heads\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[sdk.decoders]\nshipped = shipped_heads:decode\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    function = load_entry("shipped")
    assert function.__module__ == "shipped_heads" and function.__name__ == "decode"


def test_the_contract_threshold_nms_cap_and_source_pixels(tmp_path, monkeypatch):
    (tmp_path / "heads.py").write_text(
        "import numpy as np\n"
        "def decode(outputs, geometry, options):\n"
        "    assert not outputs['out'].flags.writeable\n"
        "    return {'boxes': np.array([[10, 10, 50, 50], [12, 10, 52, 50], [60, 60, 90, 90], [0, 0, 5, 5]]),\n"
        "            'scores': [0.9, 0.8, 0.7, 0.2], 'class_ids': [0, 0, 1, 1]}\n"
    )
    out = np.zeros((1, 3), np.float32)
    for nms, expected in ((True, 2), (False, 3)):
        post = create_postprocessor(_postprocess(entry="heads:decode", nms=nms), {"out": out}, (100, 100), {}, plugin_folder=tmp_path)
        found = list(post(_geometry()))
        assert len(found) == expected and [d.score for d in found] == sorted((d.score for d in found), reverse=True)
        assert found[0].box == pytest.approx((20.0, 10.0, 100.0, 50.0))  # x stretched 2x back to the 200-pixel-wide source
    assert out.flags.writeable  # the backend's own buffer is untouched


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("1 / 0", r"decoder plug-in 'bad:decode' raised ZeroDivisionError: division by zero at bad\.py:3"),
        ("[]", r"decoder plug-in 'bad:decode' returned list; expected a mapping with boxes, scores and class_ids"),
        ("{'boxes': [[0, 0, 1]], 'scores': [1], 'class_ids': [0]}", r"returned boxes \[1, 3\], scores \[1\], class_ids \[1\]"),
        ("{'boxes': [[0, 0, 1, 1]], 'scores': [1], 'class_ids': [7]}", r"returned class id 7; postprocess.classes names 2"),
        ("{'boxes': [[0, 0, 1, 1]], 'scores': [float('nan')], 'class_ids': [0]}", r"NaN or infinite"),
    ],
)
def test_errors_in_the_plugin_are_named_after_it(tmp_path, body, message):
    (tmp_path / "bad.py").write_text(f"def decode(outputs, geometry, options):\n    x = 1\n    return {body}\n")
    sys.modules.pop("bad", None)
    post = create_postprocessor(_postprocess(entry="bad:decode"), {"out": np.zeros(1, np.float32)}, (100, 100), {}, plugin_folder=tmp_path)
    with pytest.raises(PluginError, match=message):
        post(_geometry())
    sys.modules.pop("bad", None)


def _blazeface_folder(tmp_path: Path, frames: int, plugin: str) -> tuple[Path, list[np.ndarray], Path]:
    folder = tmp_path / "blazeface"
    (folder / "frames").mkdir(parents=True)
    (folder / "plugins").mkdir()
    (folder / "plugins" / "faces.py").write_text(plugin)
    model = one_box_and_one_score_tensor(ASSETS / "blazeface_front_128.onnx", folder / "blazeface.onnx")
    images = portrait_frames(cv2.imread(str(ASSETS / "astronaut_256.jpg")), frames)
    for i, frame in enumerate(images):
        cv2.imwrite(str(folder / "frames" / f"{i:03d}.png"), frame)
    return folder, images, model


@pytest.mark.slow
def test_the_real_blazeface_decoded_by_a_plugin_matches_the_reference_through_deploy_local(tmp_path):
    frames = 12
    folder, images, model = _blazeface_folder(tmp_path, frames, FACES)
    (folder / "faces.yaml").write_text(_plugin_pipeline(extra="    nms: true\n"))
    lines = deploy_local(folder / "faces.yaml", frames, tmp_path / "state", tmp_path / "reports")
    assert [line["frame"] for line in lines] == list(range(frames))
    quiet = ort.SessionOptions()
    quiet.log_severity_level = 3
    session = ort.InferenceSession(str(model), quiet, providers=["CPUExecutionProvider"])
    stats = compare(images, lines, session, reference_anchors(), NAMES, band=0.01)
    assert stats["matched"] >= frames, stats
    assert stats["recall"] >= 0.97 and stats["precision"] >= 0.97, stats
    assert stats["score"] <= 0.01 and stats["box"] <= 1.0 and stats["keypoint"] <= 1.0, stats


@pytest.mark.slow
def test_a_plugin_failing_every_frame_stops_the_deploy_with_its_name(tmp_path):
    frames = 26  # more than the runner's 25 consecutive failures
    folder, _, _ = _blazeface_folder(tmp_path, frames, "def decode(outputs, geometry, options):\n    return 1 / 0\n")
    (folder / "faces.yaml").write_text(_plugin_pipeline())
    env = {**os.environ, "SDK_STATE_DIR": str(tmp_path / "state"), "COLUMNS": "400"}
    done = subprocess.run(
        [sys.executable, "-c", "from tools.cli import main; main()", "deploy", "--target", "local", str(folder / "faces.yaml")]
        + ["--frames", str(frames), "--report-dir", str(tmp_path / "reports")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    # The health check runs the release first: its one error line carries the plug-in's own.
    assert "last stage error: frame" in done.stderr, done.stderr
    assert "decoder plug-in 'faces:decode' raised ZeroDivisionError: division by zero at faces.py:2" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
