"""A service's outputs in process: rotation and retention keep a long run under its bound, the free-space
floors stop the video first and the detections last, a killed run's torn file is published whole."""

from __future__ import annotations

import json
from collections import namedtuple

import numpy as np
import pytest

import sdk.sinks.files as files_module
from sdk.errors import ConfigError
from sdk.frame import Frame
from sdk.postprocess.detections import Detections
from sdk.sinks import SinkGroup
from sdk.sinks.files import MIB, finished_files
from sdk.sinks.jsonl import JsonlSink
from sdk.sinks.video import VideoSink
from sdk.spec.schema import Retention, Rotate

NOTHING = Detections(1, ("car",))
IMAGE = np.full((48, 64, 3), 90, np.uint8)


def frame(index: int) -> Frame:
    return Frame(index=index, t_capture_ns=index * 33_000_000, image=IMAGE)


def test_rotation_and_retention_keep_a_long_run_under_its_bound(tmp_path):
    rotate, retention = Rotate(max_mb=0.01), Retention(max_total_mb=0.05, max_files=100)
    sink = JsonlSink(tmp_path / "detections.jsonl", rotate=rotate, retention=retention)
    bound = int(retention.max_total_mb * MIB)
    largest = 0
    sink.open()
    for index in range(5000):
        sink.write(frame(index), NOTHING)
        if index % 50 == 0:
            largest = max(largest, sink.segments.total_bytes())
    sink.close()
    assert largest <= bound and sink.segments.total_bytes() <= bound
    kept = finished_files(tmp_path / "detections.jsonl")
    frames = [json.loads(line)["frame"] for path in kept for line in path.read_text().splitlines()]
    assert frames == list(range(frames[0], 5000))  # the newest, whole and in order; the oldest files went first
    assert sink.segments.deleted > 0 and all(path.stat().st_size <= rotate.max_mb * MIB for path in kept)
    assert not (tmp_path / ".detections.current.jsonl").exists()


def test_the_free_space_floors_stop_the_video_first_and_the_detections_last(tmp_path, monkeypatch):
    free = {"mib": 4096}
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(files_module.shutil, "disk_usage", lambda _: usage(0, 0, int(free["mib"] * MIB)))
    monkeypatch.setattr(files_module, "FREE_CHECK_S", 0.0)
    retention = Retention(min_free_mb=1024, detections_min_free_mb=64)
    jsonl = JsonlSink(tmp_path / "detections.jsonl", rotate=Rotate(), retention=retention)
    video = VideoSink(tmp_path / "annotated.avi", fourcc="MJPG", fps=30, rotate=Rotate(max_mb=8), retention=retention)
    group = SinkGroup([jsonl, video])
    plan = [(4096, 10), (512, 7), (32, 5), (4096, 4)]  # (free MiB, frames)
    index = 0
    seen = []
    with group:
        for mib, count in plan:
            free["mib"] = mib
            for _ in range(count):
                group(frame(index), NOTHING)
                index += 1
            seen.append(group.conditions())
    assert (video.stats.written, video.stats.not_written) == (14, 12)  # stopped below 1024 MiB
    assert (jsonl.stats.written, jsonl.stats.not_written) == (21, 5)  # stopped only below 64 MiB
    assert seen[0] == [] and seen[3] == []
    assert len(seen[1]) == 1 and seen[1][0].startswith("annotated.avi: frames not written (free space 512.0 MiB is below min_free_mb 1024)")
    assert len(seen[2]) == 2 and "detections_min_free_mb 64" in seen[2][0]
    segments = finished_files(tmp_path / "annotated.avi")
    assert len(segments) == 2  # finished when the floor was reached (it plays), a new one when space came back
    import cv2

    counts = [int(cv2.VideoCapture(str(s)).get(cv2.CAP_PROP_FRAME_COUNT)) for s in segments]
    assert counts == [10, 4]


def test_a_killed_runs_current_file_is_published_with_its_torn_line_cut(tmp_path, capsys):
    (tmp_path / "detections.000007.jsonl").write_text('{"frame": 0}\n')
    (tmp_path / ".detections.current.jsonl").write_bytes(b'{"frame":0}\n{"frame":1}\n{"frame":2}\n{"fra')
    sink = JsonlSink(tmp_path / "detections.jsonl", rotate=Rotate(), retention=Retention())
    sink.open()
    sink.write(frame(0), NOTHING)
    sink.close()
    names = [p.name for p in finished_files(tmp_path / "detections.jsonl")]
    assert names == ["detections.000007.jsonl", "detections.000008.jsonl", "detections.000009.jsonl"]
    assert (tmp_path / "detections.000008.jsonl").read_text() == '{"frame":0}\n{"frame":1}\n{"frame":2}\n'
    assert "kept as detections.000008.jsonl" in capsys.readouterr().err


def test_rotation_and_floors_are_checked_at_load(tmp_path):
    from sdk.spec import load_pipeline
    from tests.conftest import PIPELINE, tiny_yolo

    tiny_yolo(tmp_path / "tiny.onnx")
    base = PIPELINE.format(uri="synthetic://boxes?width=64&height=48&frames=5", rate="null", max_ms=5000)
    cases = {
        "half": ("  - {kind: jsonl}\n", "  - {kind: jsonl, rotate: {max_mb: 600}}\n", "more than half of service.retention.max_total_mb"),
        "floors": ("budgets:", "service: {retention: {min_free_mb: 10, detections_min_free_mb: 20}}\nbudgets:", "the detections sink stops last"),
    }
    for name, (old, new, message) in cases.items():
        (tmp_path / f"{name}.yaml").write_text(base.replace(old, new))
        with pytest.raises(ConfigError, match=message):
            load_pipeline(tmp_path / f"{name}.yaml")


def test_rotation_by_time_finishes_a_file_every_max_age_s(tmp_path, monkeypatch):
    """rotate.max_age_s on a clock the test drives (one frame a second): a file every 60 frames, none lost, none
    split, and size never the reason (64 MiB is far away)."""
    import types

    import sdk.sinks.jsonl as jsonl_module

    clock = {"now": 1000.0}
    monkeypatch.setattr(jsonl_module, "time", types.SimpleNamespace(monotonic=lambda: clock["now"]))
    sink = JsonlSink(tmp_path / "detections.jsonl", rotate=Rotate(max_mb=64, max_age_s=60), retention=Retention())
    sink.open()
    for index in range(200):
        sink.write(frame(index), NOTHING)
        clock["now"] += 1.0
    sink.close()
    kept = finished_files(tmp_path / "detections.jsonl")
    spans = [[json.loads(line)["frame"] for line in path.read_text().splitlines()] for path in kept]
    assert [(span[0], span[-1], len(span)) for span in spans] == [(0, 59, 60), (60, 119, 60), (120, 179, 60), (180, 199, 20)]
    assert sink.segments.deleted == 0 and sink.stats.written == 200 and sink.stats.not_written == 0
