"""No detection lost: a killed runtime's outputs are published by the next run, a full disk loses exactly
the frames it counts, the supervisor outlives a full disk, a video plays up to its last segment."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sdk.service.service_helpers import (
    copy_store,
    fill,
    jsonl_lines,
    mount_tmpfs,
    processes,
    read_json,
    reap,
    service,
    unmount,
    wait_for,
)

NO_FLOORS = ("  restart_backoff_s: 0.1\n", "  restart_backoff_s: 0.1\n  retention: {min_free_mb: 0, detections_min_free_mb: 0}\n")


@pytest.fixture()
def deployed(deployed_service) -> Path:
    return deployed_service


def runtimes(store) -> list[int]:
    return processes(str(store.root / "service"), "serve")


def jsonl_output(status: dict) -> dict:
    return next(o for o in status["outputs"] if o["output"] == "detections.jsonl")


def test_kill_9_of_the_runtime_loses_no_frame_it_wrote(deployed, tmp_path):
    store = copy_store(deployed, tmp_path / "store")
    folder = store.root / "service"
    try:
        service(store.root, "start", "--wait", "60")
        status = wait_for(lambda: (s := read_json(folder / "status.json")).get("frames", 0) >= 40 and s, 20, "frames")
        synced = jsonl_output(status)["synced_frame"]
        os.kill(status["pid"], signal.SIGKILL)
        wait_for(lambda: read_json(folder / "supervisor.json").get("restarts") == 1, 20, "the restart")
        wait_for(lambda: read_json(folder / "supervisor.json").get("state") == "running", 20, "running again")
        service(store.root, "stop")
    finally:
        reap(str(store.root))
    frames = [line["frame"] for line in jsonl_lines(folder / "output")]
    first_run = frames[: frames.index(0, 1)]  # the second run starts again at frame 0
    assert first_run == list(range(len(first_run)))  # whole, in order, no gap, no duplicate, no NUL
    assert synced is not None and synced < len(first_run) and len(first_run) >= status["frames"]
    log = (folder / "service.log").read_text()
    assert "was kept as detections.000001.jsonl" in log and len(runtimes(store)) == 0


@pytest.fixture()
def small_disk(deployed, tmp_path):
    """The store copy with its service folder on a 16 MiB tmpfs (status, log and outputs); unmounted afterwards."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    listener.bind(("127.0.0.1", 0))
    listener.settimeout(10)
    heartbeat = ("  status_interval_s: 0.2\n", f"  status_interval_s: 0.2\n  heartbeat_udp: 127.0.0.1:{listener.getsockname()[1]}\n")
    store = copy_store(deployed, tmp_path / "store", NO_FLOORS, heartbeat)
    folder = store.root / "service"
    mount_tmpfs(folder, "16m")
    try:
        yield store, folder, listener
    finally:
        reap(str(store.root))
        listener.close()
        unmount(folder)


def beat_until(listener: socket.socket, predicate, what: str, limit: int = 200) -> dict:
    for _ in range(limit):
        beat = json.loads(listener.recv(65536))
        if predicate(beat):
            return beat
    raise AssertionError(f"no heartbeat with {what}")


def test_a_full_disk_loses_exactly_the_frames_it_counts_and_writing_resumes(small_disk):
    store, folder, listener = small_disk
    service(store.root, "start", "--wait", "60")
    wait_for(lambda: read_json(folder / "status.json").get("frames", 0) >= 20, 20, "frames")
    filler = fill(folder)  # ENOSPC for every file in the folder: detections, status.json, service.log
    full = beat_until(listener, lambda b: b["state"] == "DEGRADED" and jsonl_output(b)["not_written"] >= 30, "frames not written")
    assert "detections.jsonl: frames not written (No space left on device)" in full["conditions"][0]
    filler.unlink()
    beat_until(listener, lambda b: b["state"] == "NOMINAL" and jsonl_output(b)["written"] > jsonl_output(full)["written"] + 10, "writes resumed")
    final = service(store.root, "stop")["runtime"]
    jsonl = jsonl_output(final)
    written = {line["frame"] for line in jsonl_lines(folder / "output")}
    assert jsonl["written"] + jsonl["not_written"] == final["frames"] and jsonl["not_written"] >= 30
    assert len(written) == jsonl["written"] and max(written) == final["frames"] - 1
    assert len(set(range(final["frames"])) - written) == jsonl["not_written"]  # lost: exactly the frames it says it lost
    assert final["status_writes"]["failed"] > 0  # and status.json says it could not be written for a while
    assert "cannot write status.json" in (folder / "service.log").read_text()


def test_the_supervisor_outlives_a_full_disk_at_its_state_write_and_logs_it(small_disk):
    store, folder, _ = small_disk
    started = service(store.root, "start", "--wait", "60")
    wait_for(lambda: read_json(folder / "status.json").get("frames", 0) >= 20, 20, "frames")
    filler = fill(folder)
    os.kill(started["runtime_pid"], signal.SIGKILL)  # the supervisor must now write its state: the disk is full
    wait_for(lambda: (r := runtimes(store)) and r != [started["runtime_pid"]], 20, "a new runtime")
    assert processes(str(folder), "supervise") == [started["supervisor_pid"]]  # alive
    filler.unlink()
    state = wait_for(lambda: (s := read_json(folder / "supervisor.json")).get("restarts") == 1 and s.get("state") == "running" and s, 20, "state")
    assert state["state_write_failures"] > 0
    log = (folder / "service.log").read_text()
    assert "cannot write supervisor.json (disk full)" in log and "supervisor.json written again after" in log
    assert "ended: killed by SIGKILL" in log
    service(store.root, "stop")
    frames = [line["frame"] for line in jsonl_lines(folder / "output")]
    first_run = frames[: frames.index(0, 1)]
    assert first_run == list(range(len(first_run))) and len(first_run) >= 20  # the killed run's file was kept whole


VIDEO = (
    "  - {kind: null}\n",
    "  - {kind: null}\n  - {kind: video, path: annotated.avi, fourcc: MJPG, rotate: {max_mb: 8, max_age_s: 1}}\n",
)


def test_after_kill_9_the_video_plays_up_to_its_last_finished_segment(deployed, tmp_path):
    import cv2

    store = copy_store(deployed, tmp_path / "store", VIDEO, NO_FLOORS)
    release = store.release_dir(store.committed())
    status_dir = tmp_path / "status"
    command = [sys.executable, "-m", "sdk", "serve", "--release", str(release), "--status-dir", str(status_dir)]
    child = subprocess.Popen(command, cwd=release, stderr=subprocess.PIPE, text=True)
    try:
        video = lambda: next((o for o in read_json(status_dir / "status.json").get("outputs", []) if o["output"] == "annotated.avi"), {})  # noqa: E731
        wait_for(lambda: video().get("files_published_count", 0) >= 2, 30, "two finished segments")
        child.kill()
        child.wait()
    finally:
        child.kill()
        child.wait()
    output = status_dir / "output"
    segments = sorted(output.glob("annotated.*.avi"))
    assert len(segments) >= 2 and (output / ".annotated.current.avi").exists()  # the killed run's current segment
    for segment in segments:
        capture = cv2.VideoCapture(str(segment))
        count = int(capture.get(cv2.CAP_PROP_FRAME_COUNT))
        ok, image = capture.read()
        capture.release()
        assert ok and image.shape == (48, 64, 3) and count >= 10, segment.name  # a second at 30 fps, give or take
    done = subprocess.run([*command, "--frames", "3"], cwd=release, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "annotated.avi: the segment an earlier run did not finish" in done.stderr  # salvaged, or deleted and counted: said
    assert not (output / ".annotated.current.avi").exists()


ONE_SEGMENT_VIDEO = (
    "  - {kind: null}\n",
    "  - {kind: null}\n  - {kind: video, path: annotated.avi, fourcc: MJPG, rotate: {max_mb: 64, max_age_s: null}}\n",
)


def test_an_output_folder_removed_mid_run_is_recreated_its_lost_frames_counted_and_stop_is_clean(deployed, tmp_path):
    import shutil

    import cv2

    store = copy_store(deployed, tmp_path / "store", ONE_SEGMENT_VIDEO, NO_FLOORS)
    folder = store.root / "service"
    output = folder / "output"
    try:
        service(store.root, "start", "--wait", "60")
        before = wait_for(lambda: (s := read_json(folder / "status.json")).get("frames", 0) >= 20 and s, 20, "frames")
        shutil.rmtree(output)  # everything the run wrote so far is gone (nothing was published: one segment each)
        wait_for(lambda: read_json(folder / "status.json").get("frames", 0) >= before["frames"] + 40 and output.is_dir(), 30, "a new folder")
        stopped = service(store.root, "stop", check=False)
    finally:
        reap(str(store.root))
    log = (folder / "service.log").read_text()
    assert stopped["returncode"] == 0 and "Traceback" not in stopped["stderr"] + log and "FileNotFoundError" not in log
    final = stopped["runtime"]
    assert final["state"] == "STOPPED"
    jsonl = jsonl_output(final)
    written = [line["frame"] for line in jsonl_lines(output)]
    assert len(written) == jsonl["written"] and jsonl["written"] + jsonl["not_written"] == final["frames"]
    assert jsonl["not_written"] >= before["frames"]  # every frame of the removed file is counted lost, none as written
    assert written == list(range(final["frames"] - len(written), final["frames"]))  # and the new file holds the rest, whole
    video = next(o for o in final["outputs"] if o["output"] == "annotated.avi")
    segments = sorted(output.glob("annotated.*.avi"))
    on_disk = sum(int(cv2.VideoCapture(str(s)).get(cv2.CAP_PROP_FRAME_COUNT)) for s in segments)
    assert on_disk == video["written"] and video["written"] + video["not_written"] == final["frames"] and video["not_written"] >= before["frames"]
    assert "removed" in log


def test_a_killed_runs_video_segment_is_salvaged_by_the_next_run(deployed, tmp_path):
    import cv2

    video = (ONE_SEGMENT_VIDEO[0], ONE_SEGMENT_VIDEO[1].replace("path: annotated.avi, fourcc: MJPG", "path: annotated.mp4, fourcc: mp4v"))
    fast = ("replay: {rate_fps: 30}", "replay: {rate_fps: 300}")  # the encoder's first flushes sooner
    store = copy_store(deployed, tmp_path / "store", video, NO_FLOORS, fast)
    release = store.release_dir(store.committed())
    status_dir = tmp_path / "status"
    current = status_dir / "output" / ".annotated.current.mp4"
    command = [sys.executable, "-m", "sdk", "serve", "--release", str(release), "--status-dir", str(status_dir)]
    child = subprocess.Popen(command, cwd=release, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: current.exists() and current.stat().st_size >= 40 * 1024, 60, "the encoder to flush 40 KiB")  # a 32 KiB flush at least
        child.kill()
        child.wait()
    finally:
        child.kill()
        child.wait()
    done = subprocess.run([*command, "--frames", "3"], cwd=release, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    said = next(line for line in done.stderr.splitlines() if "annotated.mp4: the segment an earlier run did not finish" in line)
    assert "was salvaged up to its last complete frame (MP4 index rebuilt after its last complete frame)" in said
    capture = cv2.VideoCapture(str(status_dir / "output" / "annotated.000001.mp4"))  # the killed run's frames
    count = int(capture.get(cv2.CAP_PROP_FRAME_COUNT))
    assert capture.read()[0] and count >= 1 and f": {count} frame(s) kept as annotated.000001.mp4" in said
    capture.release()
    video_output = next(o for o in read_json(status_dir / "status.json")["outputs"] if o["output"] == "annotated.mp4")
    assert (video_output["salvaged_frames"], video_output["unsalvaged_segments"]) == (count, 0)
