"""A killed run's unfinished video segment: salvaged by the next run up to its last complete frame (an MP4's
index rebuilt, an AVI cut and indexed), each kept frame the one written at its place; one that cannot be
salvaged is deleted and counted. The writer is a real process killed with SIGKILL mid-segment."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from sdk.sinks.files import finished_files
from sdk.sinks.salvage import settings_path
from sdk.sinks.video import VideoSink
from sdk.spec.schema import Retention, Rotate

REPO = Path(__file__).resolve().parents[3]
WRITTEN = 40
RETENTION = Retention(min_free_mb=0, detections_min_free_mb=0)
ONE_SEGMENT = Rotate(max_mb=64, max_age_s=None)

WRITER = """
import sys, time
import cv2, numpy as np
from pathlib import Path
from sdk.sinks.video import VideoSink
from sdk.spec.schema import Retention, Rotate
from tests.sdk.sinks.test_salvage import picture
pairs = sys.argv[2:]
sinks = [VideoSink(Path(path), fourcc=fourcc, fps=10.0, rotate=Rotate(max_mb=64, max_age_s=None),
                   retention=Retention(min_free_mb=0, detections_min_free_mb=0)) for path, fourcc in zip(pairs[::2], pairs[1::2])]
for sink in sinks:
    sink.open()
for index in range(int(sys.argv[1])):
    for sink in sinks:
        sink.write_image(picture(index))
print("written", flush=True)
time.sleep(120)
"""
CASES = [("annotated.mp4", "mp4v"), ("annotated.mov", "XVID"), ("annotated.mp4", "MJPG"), ("annotated.avi", "MJPG"), ("annotated.avi", "mp4v")]
UNSALVAGEABLE = ("annotated.mp4", "mp4v")  # its settings file is removed before the next run


def cells(index: int) -> np.ndarray:
    """Frame `index`'s 24 x 32 cells: noise of its own seed."""
    return np.random.default_rng(index).integers(0, 256, (24, 32, 3), dtype=np.uint8)


def picture(index: int) -> np.ndarray:
    """Frame `index`: its cells, 10 x 10 pixels each, 320 x 240 (about 20 KB a frame in MPEG-4 part 2)."""
    return cv2.resize(cells(index), (320, 240), interpolation=cv2.INTER_NEAREST)


def killed_mid_segment(pairs: list[tuple[Path, str]]) -> dict[Path, int]:
    """One real writer process with a sink for each (path, fourcc), SIGKILLed after WRITTEN frames of one segment in
    every sink (each case's folder is its own; one process start serves them all); each unfinished segment's size."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-c", WRITER, str(WRITTEN), *[str(part) for pair in pairs for part in pair]]
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env, cwd=REPO)
    try:
        assert child.stdout.readline().strip() == "written"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        child.stdout.close()
    sizes = {}
    for path, _ in pairs:
        current = path.with_name(f".{path.stem}.current{path.suffix}")
        assert current.exists() and settings_path(current).exists()
        sizes[path] = current.stat().st_size
    return sizes


@pytest.fixture(scope="module")
def killed(tmp_path_factory) -> dict[str, tuple[Path, int]]:
    """Each case's output folder after the writer's kill: {case id: (its output path, the unfinished segment's size)}."""
    base = tmp_path_factory.mktemp("killed")
    cases = {f"{name}-{fourcc}": base / f"{name}-{fourcc}" / "output" / name for name, fourcc in CASES}
    cases["unsalvageable"] = base / "unsalvageable" / "output" / UNSALVAGEABLE[0]
    fourccs = {**{f"{name}-{fourcc}": fourcc for name, fourcc in CASES}, "unsalvageable": UNSALVAGEABLE[1]}
    sizes = killed_mid_segment([(path, fourccs[case]) for case, path in cases.items()])
    return {case: (path, sizes[path]) for case, path in cases.items()}


@pytest.mark.parametrize(("name", "fourcc"), CASES)
def test_a_killed_segment_is_salvaged_up_to_its_last_complete_frame(killed, capfd, name, fourcc):
    path, _ = killed[f"{name}-{fourcc}"]
    capfd.readouterr()
    sink = VideoSink(path, fourcc=fourcc, fps=10.0, rotate=ONE_SEGMENT, retention=RETENTION)
    sink.open()  # the next run
    sink.close()
    (segment,) = finished_files(path)
    capture = cv2.VideoCapture(str(segment))
    count = int(capture.get(cv2.CAP_PROP_FRAME_COUNT))
    frames = []
    while (got := capture.read())[0]:
        frames.append(got[1])
    capture.release()
    assert 1 <= len(frames) == count == sink.salvaged_frames <= WRITTEN  # what the encoder had flushed, whole frames only
    # Each decoded frame's cells (the mean of each 10 x 10 block) against every written frame's: a frame is told from
    # the others by its cells, and the codec's noise within a cell averages out.
    written = np.stack([cells(k) for k in range(WRITTEN)]).astype(np.float32)
    for index, frame in enumerate(frames):  # each kept frame is the one written at its place, in order
        decoded = cv2.resize(frame, (32, 24), interpolation=cv2.INTER_AREA).astype(np.float32)
        errors = list(np.abs(written - decoded).mean(axis=(1, 2, 3)))
        assert int(np.argmin(errors)) == index and errors[index] < 0.3 * sorted(errors)[1]  # and by far
    err = capfd.readouterr().err
    assert f"{name}: the segment an earlier run did not finish was salvaged up to its last complete frame" in err
    assert f"{count} frame(s) kept as {segment.name}" in err
    assert sink.describe()["unsalvaged_segments"] == 0
    assert sorted(p.name for p in path.parent.iterdir()) == [segment.name]  # no settings file, no probe left


def test_a_segment_that_cannot_be_salvaged_is_deleted_and_counted(killed, capfd):
    path, size = killed["unsalvageable"]
    settings_path(path.with_name(".annotated.current.mp4")).unlink()  # a power cut before the settings reached the disk
    capfd.readouterr()
    sink = VideoSink(path, fourcc="mp4v", fps=10.0, rotate=ONE_SEGMENT, retention=RETENTION)
    sink.open()
    sink.close()
    assert finished_files(path) == [] and list(path.parent.iterdir()) == []
    assert (sink.salvaged_frames, sink.describe()["unsalvaged_segments"]) == (0, 1)
    err = capfd.readouterr().err
    assert f"annotated.mp4: the segment an earlier run did not finish ({size} bytes) cannot be salvaged (its settings file is missing" in err


def test_garbage_where_a_segment_was_is_deleted_and_counted(tmp_path, capfd):
    folder = tmp_path / "output"
    folder.mkdir()
    for name in (".annotated.current.avi", ".annotated.current.mp4"):
        (folder / name).write_bytes(b"RIFF\xff\xff\xff\xffAVI LIST" + os.urandom(5000) if name.endswith(".avi") else os.urandom(5000))
        sink = VideoSink(folder / name.replace(".current", "")[1:], fourcc="mp4v", fps=10.0, rotate=ONE_SEGMENT, retention=RETENTION)
        sink.open()
        assert (sink.salvaged_frames, sink.unsalvaged_segments) == (0, 1)
    assert list(folder.iterdir()) == [] and capfd.readouterr().err.count("cannot be salvaged") == 2
