"""An output folder removed under running sinks: the frames that went with it are counted not written, never
as written; the folder is made again and writing goes on; where it cannot be made, every frame is counted
with the reason; closing never raises."""

from __future__ import annotations

import json
import shutil

import cv2
import numpy as np
import pytest

import sdk.sinks.files as files_module
from sdk.frame import Frame
from sdk.postprocess.detections import Detections
from sdk.sinks import SinkGroup
from sdk.sinks.files import finished_files
from sdk.sinks.jsonl import JsonlSink
from sdk.sinks.video import VideoSink
from sdk.spec.schema import Retention, Rotate

NOTHING = Detections(1, ("car",))
IMAGE = np.full((48, 64, 3), 90, np.uint8)


def frame(index: int) -> Frame:
    return Frame(index=index, t_capture_ns=index * 33_000_000, image=IMAGE)


@pytest.fixture(autouse=True)
def every_frame(monkeypatch):
    monkeypatch.setattr(files_module, "PRESENCE_CHECK_S", 0.0, raising=False)  # asked at every frame: the counts below are exact


def sinks(folder, service: bool) -> tuple[JsonlSink, VideoSink]:
    retention = Retention(min_free_mb=0, detections_min_free_mb=0) if service else None
    jsonl = JsonlSink(folder / "detections.jsonl", rotate=Rotate(), retention=retention)
    video = VideoSink(folder / "annotated.avi", fourcc="MJPG", fps=30, rotate=Rotate(max_mb=8), retention=retention)
    return jsonl, video


def frames_on_disk(folder, service: bool) -> tuple[list[int], int]:
    """(the frame numbers in the detections files, the frames in the video files) under `folder`."""
    jsonl = finished_files(folder / "detections.jsonl") if service else [folder / "detections.jsonl"]
    videos = finished_files(folder / "annotated.avi") if service else [folder / "annotated.avi"]
    lines = [json.loads(line)["frame"] for path in jsonl for line in path.read_text().splitlines()]
    return lines, sum(int(cv2.VideoCapture(str(v)).get(cv2.CAP_PROP_FRAME_COUNT)) for v in videos)


@pytest.mark.parametrize("service", [True, False], ids=["service", "measuring-run"])
def test_frames_in_a_removed_folder_are_counted_lost_and_writing_goes_on_in_it_made_again(tmp_path, service, capfd):
    folder = tmp_path / "output"
    jsonl, video = sinks(folder, service)
    with SinkGroup([jsonl, video]) as group:
        for index in range(12):
            group(frame(index), NOTHING)
        shutil.rmtree(folder)
        for index in range(12, 30):
            group(frame(index), NOTHING)
    lines, video_frames = frames_on_disk(folder, service)
    assert lines == list(range(12, 30)) and video_frames == 18
    for sink in (jsonl, video):
        assert (sink.stats.written, sink.stats.not_written) == (18, 12)
        assert "was removed with 12 frame(s) in it" in sink.stats.last_error
    err = capfd.readouterr().err
    assert "detections.jsonl: the current file was removed from" in err and "annotated.avi: the segment being written was removed" in err


@pytest.mark.parametrize("service", [True, False], ids=["service", "measuring-run"])
def test_a_folder_removed_just_before_the_end_is_counted_and_closing_does_not_raise(tmp_path, service):
    folder = tmp_path / "output"
    jsonl, video = sinks(folder, service)
    with SinkGroup([jsonl, video]) as group:
        for index in range(7):
            group(frame(index), NOTHING)
        shutil.rmtree(folder)
    for sink in (jsonl, video):
        assert (sink.stats.written, sink.stats.not_written) == (0, 7)
    assert not folder.exists() or not any(folder.iterdir())


def test_a_folder_that_cannot_be_made_again_fails_loudly_frame_by_frame(tmp_path):
    folder = tmp_path / "output"
    jsonl, video = sinks(folder, service=True)
    with SinkGroup([jsonl, video]) as group:
        for index in range(5):
            group(frame(index), NOTHING)
        shutil.rmtree(folder)
        folder.write_text("a file where the folder was")  # nothing can make the folder again
        for index in range(5, 15):
            group(frame(index), NOTHING)
        conditions = group.conditions()
    for sink in (jsonl, video):
        assert (sink.stats.written, sink.stats.not_written) == (0, 15)
        assert sink.stats.failing.startswith(f"cannot recreate {folder}")
    assert len(conditions) == 2 and all("frames not written (cannot recreate" in c for c in conditions)
