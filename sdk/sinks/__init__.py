"""Where detections go: JSONL, an annotated video, masks, an MCAP file for Foxglove, a live Foxglove view, or nowhere."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

from sdk.frame import Frame
from sdk.postprocess.detections import Detections
from sdk.spec.paths import confined_path
from sdk.spec.schema import FoxgloveSink as FoxgloveSpec
from sdk.spec.schema import JsonlSink as JsonlSpec
from sdk.spec.schema import MaskSink as MaskSpec
from sdk.spec.schema import McapSink as McapSpec
from sdk.spec.schema import NullSink as NullSpec
from sdk.spec.schema import VideoSink as VideoSpec
from sdk.spec.sinks import camera_path


class NullSink:
    name = "null"

    def open(self) -> None:
        pass

    def write(self, frame: Frame, detections: Detections) -> None:
        pass

    def close(self) -> None:
        pass


class SinkGroup:
    """All of a pipeline's sinks as one stage: opened, written and closed together.

    Every sink gets every frame even when one raises (the first error is raised afterwards). With
    `sync_interval_s` (a service) a thread of its own fsyncs the sinks that can be synced, so the
    frame loop never waits on the disk for durability."""

    name = "sink"

    def __init__(self, sinks: list, sync_interval_s: float | None = None) -> None:
        self.sinks = sinks
        self.sync_interval_s = sync_interval_s
        self._stop_sync = threading.Event()
        self._sync_thread: threading.Thread | None = None
        # The live view and the mcap sink's latency record: each frame's marks too (once they are complete).
        self.timed_sinks = [sink for sink in sinks if hasattr(sink, "timed") and getattr(sink, "takes_marks", True)]

    def timed(self, frame: Frame, marks: list[int]) -> None:
        """A frame's marks, complete after the sinks wrote it (the live view's latency topic)."""
        for sink in self.timed_sinks:
            try:
                sink.timed(frame, marks)
            except Exception:  # noqa: S112 - a view or a latency record never ends the run (a sink counts its own losses)
                continue

    def watch(self, status, deadlines: dict) -> None:
        """Hand the run's state (a callable) and each camera's deadline to the sinks that show them (the live view)."""
        for sink in self.timed_sinks:
            sink.watch(status, deadlines)

    def __enter__(self) -> SinkGroup:
        opened = []
        try:
            for sink in self.sinks:
                sink.open()
                opened.append(sink)
        except BaseException:
            close_all(reversed(opened))
            raise
        if self.sync_interval_s and any(hasattr(s, "sync") for s in self._each()):
            self._sync_thread = threading.Thread(target=self._sync_loop, name="sink-sync", daemon=True)
            self._sync_thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop_sync.set()
        if self._sync_thread is not None:
            self._sync_thread.join(timeout=10)
        close_all(reversed(self.sinks))

    def __call__(self, frame: Frame, detections: Detections) -> None:
        failure: Exception | None = None
        for sink in self.sinks:
            try:
                sink.write(frame, detections)
            except Exception as exc:
                failure = failure or exc
        if failure is not None:
            raise failure

    def _sync_loop(self) -> None:
        while not self._stop_sync.wait(self.sync_interval_s):
            for sink in self._each():
                sync = getattr(sink, "sync", None)
                if sync is not None:
                    try:
                        sync()
                    except Exception:  # noqa: S112 - a sink counts its own sync errors; the loop must go on
                        continue

    def describe(self) -> list[dict]:
        """Each output's counts (written, not written and why, newest synced frame, files): for the status."""
        return [sink.describe() for sink in self._each() if hasattr(sink, "describe")]

    def _each(self) -> list:
        """Every sink, a per-camera one's parts one by one."""
        return [part for sink in self.sinks for part in (sink.by_camera.values() if isinstance(sink, PerCamera) else (sink,))]

    def conditions(self) -> list[str]:
        """Why the service is DEGRADED on account of its outputs right now (frames not being written)."""
        found = []
        for sink in self._each():
            stats = getattr(sink, "stats", None)
            condition = stats.condition() if stats is not None else None
            if condition:
                found.append(condition)
        return found


class PerCamera:
    """One sink per camera (`annotated-NAME.mp4`): each frame goes to its own camera's."""

    def __init__(self, sinks: dict) -> None:
        self.by_camera = sinks
        self.name = next(iter(sinks.values())).name

    def open(self) -> None:
        opened = []
        try:
            for sink in self.by_camera.values():
                sink.open()
                opened.append(sink)
        except BaseException:
            close_all(reversed(opened))
            raise

    def write(self, frame: Frame, detections: Detections) -> None:
        self.by_camera[frame.camera].write(frame, detections)

    def close(self) -> None:
        close_all(reversed(list(self.by_camera.values())))


def close_all(sinks) -> None:
    """Close every sink, even when one fails; then raise the first failure (the others are chained to stderr)."""
    failures: list[BaseException] = []
    for sink in sinks:
        try:
            sink.close()
        except Exception as exc:
            failures.append(exc)
    if failures:
        for other in failures[1:]:
            sys.stderr.write(f"warning: closing a sink also failed: {type(other).__name__}: {other}\n")
        raise failures[0]


def live_view_sinks(specs: tuple, port: int | None) -> tuple:
    """A measuring run's sinks (deploy): the pipeline's live view is the service's, not served unless asked (`port`,
    deploy --live-view: then on that port, with the pipeline's other live-view keys where it has the sink)."""
    views = [spec for spec in specs if isinstance(spec, FoxgloveSpec)]
    kept = tuple(spec for spec in specs if not isinstance(spec, FoxgloveSpec))
    if port is None:
        return kept
    view = views[0].model_copy(update={"port": port}) if views else FoxgloveSpec(kind="foxglove", port=port)
    return (*kept, view)


def create_sinks(
    specs: tuple, output_dir: Path, *, fps: float = 30.0, require_jsonl: bool = False, retention=None, cameras: dict[str, float] | None = None
) -> SinkGroup:
    """One sink per spec; paths stay inside `output_dir`.

    `retention` (a service's `service.retention`): the sinks write rotating segments (each spec's
    `rotate`), keep the free-space floors and are fsynced every `sync_interval_s` by the group.

    A measuring run promises `detections.jsonl` in its report folder (the report contract):
    `require_jsonl` adds it unless a JSONL sink of the pipeline already writes exactly that file
    (a sink with its own `path` still gets its file, beside the contract's).

    `cameras` (several cameras: name -> frame rate): the JSONL lines name their camera; a video sink
    writes one file per camera, `annotated-NAME.mp4`, at that camera's rate, or with `mosaic: true` one
    video of every camera side by side (sdk/sinks/mosaic.py).
    """
    cameras = cameras if cameras is not None and len(cameras) > 1 else None  # one camera: its outputs as they always were
    sinks: list = []
    contract = JsonlSpec(kind="jsonl")
    if require_jsonl and not any(isinstance(spec, JsonlSpec) and Path(spec.path) == Path(contract.path) for spec in specs):
        specs = (*specs, contract)
    masks = next((spec for spec in specs if isinstance(spec, MaskSpec)), None)  # the JSONL lines name its files
    for index, spec in enumerate(specs):
        where = f"sinks[{index}].path"
        if isinstance(spec, JsonlSpec):
            from sdk.sinks.jsonl import JsonlSink

            path = confined_path(output_dir, spec.path, where=where)
            decimals = None if spec.exact else 2
            sink = JsonlSink(path, decimals=decimals, rotate=spec.rotate, retention=retention, sync_interval_s=spec.sync_interval_s)
            if masks is not None:
                sink.masks = (masks.path, masks.every)
            sinks.append(sink)
        elif isinstance(spec, MaskSpec):
            from sdk.sinks.mask import MaskSink

            sinks.append(MaskSink(confined_path(output_dir, spec.path, where=where), every=spec.every, keep=spec.keep))
        elif isinstance(spec, VideoSpec):
            from sdk.sinks.video import VideoSink

            if cameras and spec.mosaic:
                from sdk.sinks.mosaic import MosaicSink

                path = confined_path(output_dir, spec.path, where=where)
                rate = spec.fps or max(cameras.values())  # a mosaic frame a round: the fastest camera's pace
                video = VideoSink(path, fourcc=spec.fourcc, fps=rate, rotate=spec.rotate, retention=retention)
                sinks.append(MosaicSink(video, list(cameras)))
                continue
            if cameras:
                per_camera = {}
                for camera, rate in cameras.items():
                    path = confined_path(output_dir, camera_path(spec.path, camera), where=where)
                    per_camera[camera] = VideoSink(path, fourcc=spec.fourcc, fps=spec.fps or rate, rotate=spec.rotate, retention=retention)
                sinks.append(PerCamera(per_camera))
                continue
            path = confined_path(output_dir, spec.path, where=where)
            sinks.append(VideoSink(path, fourcc=spec.fourcc, fps=spec.fps or fps, rotate=spec.rotate, retention=retention))
        elif isinstance(spec, McapSpec):
            from sdk.sinks.mcap_sink import McapSink

            path = confined_path(output_dir, spec.path, where=where)
            named = list(cameras or [])
            keys = {"images": spec.images, "image_topic": spec.image_topic, "messages": spec.messages, "latency": spec.latency}
            sinks.append(McapSink(path, topic=spec.topic, cameras=named, **keys))
        elif isinstance(spec, FoxgloveSpec):
            from sdk.sinks.live_view import LiveView

            cameras_named = list(cameras or [])
            sinks.append(LiveView(host=spec.host, port=spec.port, image_fps=spec.image_fps, image_width=spec.image_width, cameras=cameras_named))
        elif isinstance(spec, NullSpec):
            sinks.append(NullSink())
    intervals = [s.sync_interval_s for s in sinks if getattr(s, "sync_interval_s", None)]  # JSONL sinks: never per camera
    return SinkGroup(sinks, sync_interval_s=min(intervals) if retention is not None and intervals else None)


__all__ = ["NullSink", "SinkGroup", "create_sinks", "live_view_sinks"]
