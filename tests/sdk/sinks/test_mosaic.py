"""The mosaic video of several cameras (`sinks[].mosaic: true`): real recordings of two sizes tiled into one
file, one mosaic frame per round of the cameras, a camera that stops keeps its last picture marked late;
through the runner, one `annotated.mp4` instead of one file per camera."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from sdk.frame import Frame
from sdk.postprocess.detections import Detections
from sdk.sinks import create_sinks
from sdk.sinks.mosaic import grid
from sdk.spec.schema import VideoSink as VideoSpec

REPO = Path(__file__).resolve().parents[3]
VTEST = REPO / "pipelines" / "assets" / "vtest.avi"  # 768 x 576
TREE = REPO / "tests" / "integration" / "assets" / "tree.avi"  # 320 x 240


def frames_of(path: Path, count: int) -> list[np.ndarray]:
    capture = cv2.VideoCapture(str(path))
    try:
        return [capture.read()[1] for _ in range(count)]
    finally:
        capture.release()


def read_video(path: Path) -> list[np.ndarray]:
    capture = cv2.VideoCapture(str(path))
    frames = []
    while True:
        ok, image = capture.read()
        if not ok:
            break
        frames.append(image)
    capture.release()
    return frames


def letterboxed(image: np.ndarray, width: int, height: int) -> np.ndarray:
    """The tile a camera's frame should fill: written here from scratch, not with the sink's code."""
    scale = min(width / image.shape[1], height / image.shape[0])
    w, h = round(image.shape[1] * scale), round(image.shape[0] * scale)
    tile = np.zeros((height, width, 3), np.uint8)
    tile[(height - h) // 2 : (height - h) // 2 + h, (width - w) // 2 : (width - w) // 2 + w] = cv2.resize(image, (w, h), interpolation=cv2.INTER_AREA)
    return tile


@pytest.mark.parametrize(("cameras", "expected"), [(1, (1, 1)), (2, (2, 1)), (3, (2, 2)), (4, (2, 2)), (5, (3, 2)), (12, (4, 3))])
def test_the_grid_is_as_square_as_it_gets(cameras, expected):
    assert grid(cameras) == expected


def test_two_recordings_tile_into_one_video_and_a_stopped_camera_is_marked_late(tmp_path):
    front, rear = frames_of(VTEST, 8), frames_of(TREE, 3)  # the rear camera stops after 3 frames
    sinks = create_sinks((VideoSpec(kind="video", mosaic=True),), tmp_path, cameras={"front": 10.0, "rear": 15.0})
    empty = Detections(4, ("person",))
    with sinks:
        for index in range(8):  # rounds as the gatherer delivers them: front, then rear while it lasts
            sinks(Frame(index, 0, front[index], camera="front"), empty)
            if index < 3:
                sinks(Frame(index, 0, rear[index], camera="rear"), empty)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["annotated.mp4"]  # one file, no annotated-NAME.mp4
    video = read_video(tmp_path / "annotated.mp4")
    assert len(video) == 8  # one mosaic frame per round, the rounds without the rear camera too
    assert video[0].shape == (480, 1280, 3)  # two 640 x 480 tiles side by side (the front camera's 4:3)
    tile_w, tile_h = 640, 480
    for round_, mosaic in enumerate(video):
        want_front = letterboxed(front[round_], tile_w, tile_h)
        got_front = mosaic[:, :tile_w]
        body = (slice(30, tile_h - 30), slice(0, tile_w))  # away from the frame number and the camera label
        assert np.abs(got_front[body].astype(int) - want_front[body]).mean() < 6  # the encoder's loss only
        want_rear = letterboxed(rear[min(round_, 2)], tile_w, tile_h)  # after its last frame: that frame stays
        got_rear = mosaic[:, tile_w:]
        assert np.abs(got_rear[body].astype(int) - want_rear[body]).mean() < 6
    label = (slice(tile_h - 30, tile_h), slice(tile_w, 2 * tile_w))
    red = lambda image: int(((image[..., 2] > 150) & (image[..., 0] < 100) & (image[..., 1] < 100)).sum())  # noqa: E731
    assert red(video[2][label]) == 0  # the rear camera delivered this round
    assert red(video[4][label]) > 20  # it did not: its tile says so
    assert red(video[4][:, :tile_w][tile_h - 30 :]) == 0  # the front camera is never marked


@pytest.mark.slow
def test_a_two_camera_run_writes_one_mosaic(tmp_path):
    from tests.sdk.runtime.test_multicam import pedestrian, run

    path = pedestrian(
        tmp_path / "p", {"front": {"file": "vtest.avi"}, "rear": {"file": "tree.avi"}}, frames=6,
        sinks=[{"kind": "jsonl"}, {"kind": "video", "path": "cameras.mp4", "mosaic": True}],
    )  # fmt: skip
    result, report, lines = run(path, tmp_path / "out", tmp_path / "cache")
    assert report["frames"] == 12
    assert not list((tmp_path / "out").glob("cameras-*.mp4"))
    video = read_video(tmp_path / "out" / "cameras.mp4")
    assert len(video) == 6 and video[0].shape == (480, 1280, 3)  # a frame per round of the two cameras
    drawn = sum(len(line["detections"]) for line in lines if line["camera"] == "front")
    assert drawn > 0  # people on the walkway: boxes are drawn in the front tile
