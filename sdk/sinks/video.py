"""An annotated video a person can watch: boxes, labels and scores drawn on the source frames.

A measuring run writes one file, published when complete. A service (`retention` given) writes
segments: the current one is finished (the encoder closed, so it plays) and published every
`rotate.max_age_s` seconds or `rotate.max_mb`, so after a kill -9 the recording plays up to its
last finished segment. The killed run's current segment is salvaged by the next run up to its last
complete frame where the container allows (sdk/sinks/salvage.py: an MP4's index rebuilt, an AVI
cut and indexed) and published; one that cannot be is deleted and counted (`unsalvaged_segments`),
with a note either way. OpenCV's writer does not
report a full disk, so the video sink never goes near one: below `retention.min_free_mb` free (the
floor the detections sink keeps writing under) it finishes its segment and stops, counting every
frame it does not write, and starts a new segment when space returns.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from sdk.errors import SdkError
from sdk.frame import Frame
from sdk.postprocess.detections import Detections
from sdk.sinks.files import MIB, FreeSpace, OutputStats, Presence, Segments, describe_output, partial_path, publish, recreate_folder
from sdk.sinks.salvage import Unsalvageable, read_settings, salvage, settings_path, write_settings

_COLOURS = ((0, 200, 255), (255, 120, 0), (60, 220, 60), (200, 60, 220), (0, 80, 255))
ENCODER_FLOOR_MB = 4.0  # the encoder's own buffers: never write a video with less free than this


class VideoSink:
    name = "video"

    def __init__(self, path: Path, *, fourcc: str = "mp4v", fps: float = 30.0, rotate=None, retention=None) -> None:
        self.path = Path(path)
        self.fourcc = fourcc
        self.fps = fps
        self.durable = retention is not None
        self.stats = OutputStats(self.path.name)
        self.segments: Segments | None = None
        # OpenCV picks the container from the suffix: keep it on the partial name.
        self._partial = partial_path(self.path).with_suffix(".partial" + self.path.suffix)
        if self.durable:
            segment_bytes = int((rotate.max_mb if rotate is not None else 256) * MIB)
            self.segments = Segments(
                self.path, max_files=retention.max_files, max_total_bytes=int(retention.max_total_mb * MIB), segment_bytes=segment_bytes
            )
            self._partial = self.segments.current
            self.max_age_s = rotate.max_age_s if rotate is not None else None
            self.floor_mb = max(retention.min_free_mb, ENCODER_FLOOR_MB)
            self._guard = min(64 * 1024, segment_bytes // 4)  # room left below max_mb: the encoder's buffer and the next frame
        self.free = FreeSpace(self.path.parent)
        self.presence = Presence()
        self.salvaged_frames = 0  # from the segment an earlier run was killed in
        self.unsalvaged_segments = 0
        self._writer = None
        self._frames_in_segment = 0
        self._opened_at = 0.0
        self._size: tuple[int, int] | None = None
        self._canvas: np.ndarray | None = None

    def open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.durable:
            self._recover()

    def _recover(self) -> None:
        """The segment a killed run did not finish: salvaged up to its last complete frame and published, or
        deleted and counted."""
        current = self.segments.current
        settings = read_settings(current)
        if current.exists():
            size = current.stat().st_size
            try:
                kept = salvage(current, settings)
            except (Unsalvageable, OSError) as exc:
                current.unlink(missing_ok=True)
                self.unsalvaged_segments += 1
                why = f"({size} bytes) cannot be salvaged ({exc}); deleted"
                sys.stderr.write(f"note: {self.path.name}: the segment an earlier run did not finish {why}\n")
            else:
                final = self.segments.publish_current()
                self.salvaged_frames += kept.frames
                torn = f"; {kept.cut_bytes} bytes of the frame it was writing cut off" if kept.cut_bytes else ""
                sys.stderr.write(
                    f"note: {self.path.name}: the segment an earlier run did not finish was salvaged up to its last complete frame "
                    f"({kept.how}): {kept.frames} frame(s) kept as {final.name}{torn}\n"
                )
        settings_path(current).unlink(missing_ok=True)

    def _start(self, image: np.ndarray) -> None:
        import cv2

        self._size = (image.shape[1], image.shape[0])
        self._canvas = np.empty((image.shape[0], image.shape[1], 3), np.uint8)
        self._writer = cv2.VideoWriter(str(self._partial), cv2.VideoWriter_fourcc(*self.fourcc), self.fps, self._size)
        if not self._writer.isOpened():
            self._writer = None
            raise SdkError(
                f"cannot write video {self.path} with codec {self.fourcc}",
                hint="try fourcc: mp4v with a .mp4 path, or MJPG with .avi",
            )
        self._frames_in_segment = 0
        self._opened_at = time.monotonic()
        self.presence.track(self._partial)
        if self.durable:  # what a salvage needs, should this segment be left unfinished
            try:
                write_settings(self._partial, self.fourcc, self.fps, *self._size)
            except OSError as exc:
                self.stats.last_error = f"cannot write the segment's settings file: {exc}"

    def _finish(self) -> None:
        """Close the encoder (the segment now plays) and publish it; a segment removed meanwhile is counted lost."""
        if self._writer is None:
            return
        self._writer.release()
        self._writer = None
        if self.presence.gone(now=True):
            self._lost_segment()
            return
        try:
            if not self.durable:
                publish(self._partial, self.path)
            elif self._frames_in_segment:
                self.segments.publish_current()
            else:
                self._partial.unlink(missing_ok=True)
        except FileNotFoundError:  # removed between the check and the publication
            self._lost_segment()
        if self.durable:
            settings_path(self._partial).unlink(missing_ok=True)

    def _lost_segment(self) -> None:
        """The segment being written is gone from its folder (removed, or the folder with it): its frames are lost."""
        lost, self._frames_in_segment = self._frames_in_segment, 0
        self.stats.unwritten(lost, f"{self._partial.name} was removed with {lost} frame(s) in it")
        where = self._partial.parent
        sys.stderr.write(f"warning: {self.path.name}: the segment being written was removed from {where}: {lost} frame(s) lost\n")

    def write(self, frame: Frame, detections: Detections) -> None:
        from sdk.pixels import as_bgr

        image = as_bgr(frame.image)  # NV12 frames are drawn on their BGR conversion
        if not self._ready(image):
            return
        # Draw on our own canvas (allocated once per size): the source owns the frame buffer.
        fit(image, self._canvas)
        annotate(self._canvas, frame.index, detections)
        self._emit(self._canvas)

    def write_image(self, image: np.ndarray) -> None:
        """A picture already drawn (the mosaic of several cameras), written as it is."""
        if self._ready(image):
            fit(image, self._canvas)
            self._emit(self._canvas)

    def _ready(self, image: np.ndarray) -> bool:
        """The encoder open for this frame (a new segment when one is due); False where the frame is not written."""
        if self.durable:
            if self.free.below(self.floor_mb):  # the video stops first; the detections sink goes on
                self._finish()
                self.stats.lost(f"free space {self.free.free_mb:.1f} MiB is below min_free_mb {self.floor_mb:g}")
                return False
            if self._writer is not None and self._frames_in_segment and self._due():
                try:
                    self._finish()
                except OSError as exc:
                    self.stats.last_error = f"cannot finish a segment: {exc}"
        if self._writer is not None and self.presence.gone():  # at most once a second: still in its folder?
            self._writer.release()  # into the removed file
            self._writer = None
            self._lost_segment()
        if self._writer is None:
            why = recreate_folder(self._partial.parent)
            if why is not None:
                self.stats.lost(why)
                return False
            self._start(image)
        return True

    def _emit(self, image: np.ndarray) -> None:
        self._writer.write(image)
        self._frames_in_segment += 1
        self.stats.ok()

    def _due(self) -> bool:
        if self.max_age_s is not None and time.monotonic() - self._opened_at >= self.max_age_s:
            return True
        try:
            return self._partial.stat().st_size + self._guard >= self.segments.segment_bytes
        except OSError:
            return False

    def close(self) -> None:
        self._finish()

    def describe(self) -> dict:
        info = describe_output(self.path, self.stats, self.segments)
        if self.durable:  # what became of the segment an earlier, killed run left unfinished
            info.update(salvaged_frames=self.salvaged_frames, unsalvaged_segments=self.unsalvaged_segments)
        return info


def fit(image: np.ndarray, canvas: np.ndarray) -> None:
    """`image` (BGR or gray) copied onto `canvas` (H x W x 3), resized where the sizes differ."""
    import cv2

    if image.shape[:2] == canvas.shape[:2] and image.ndim == 3:
        np.copyto(canvas, image)
    else:
        resized = cv2.resize(image, (canvas.shape[1], canvas.shape[0]))
        canvas[...] = resized[..., None] if resized.ndim == 2 else resized


def annotate(image: np.ndarray, index: int, detections: Detections) -> None:
    """Boxes, labels, scores (and track ids, keypoints, masks, classes) drawn on `image` in place, and the frame number."""
    import cv2

    draw = getattr(detections, "draw", None)
    if draw is not None:  # a segment mask blended over the frame, or a classifier's best classes
        draw(image)
    for d in detections:
        x1, y1, x2, y2 = (int(round(v)) for v in d.box)
        colour = _COLOURS[d.class_id % len(_COLOURS)]
        cv2.rectangle(image, (x1, y1), (x2, y2), colour, 2)
        text = f"{d.label} {d.score:.2f}" if d.track_id is None else f"#{d.track_id} {d.label} {d.score:.2f}"
        (tw, th), _ = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, 0.4, 1)
        top = max(0, y1 - th - 4)
        cv2.rectangle(image, (x1, top), (x1 + tw + 2, top + th + 4), colour, cv2.FILLED)
        cv2.putText(image, text, (x1 + 1, top + th + 1), cv2.FONT_HERSHEY_SIMPLEX, 0.4, (0, 0, 0), 1, cv2.LINE_AA)
        for x, y in d.keypoints:  # a face's landmarks, a text box's corners: a dot each, ringed so it shows on any colour
            centre = (int(round(x)), int(round(y)))
            cv2.circle(image, centre, 3, colour, cv2.FILLED, cv2.LINE_AA)
            cv2.circle(image, centre, 4, (0, 0, 0), 1, cv2.LINE_AA)
    cv2.putText(image, f"frame {index}", (8, 20), cv2.FONT_HERSHEY_SIMPLEX, 0.55, (255, 255, 255), 1, cv2.LINE_AA)
