"""Video files, V4L2 cameras, GStreamer pipelines and Jetson CSI cameras through cv2.VideoCapture."""

from __future__ import annotations

import numpy as np

from sdk.errors import SourceError
from sdk.pixels import Nv12Image, YuvColour
from sdk.sources.base import CorruptFrame, FrameReader
from sdk.sources.gst_caps import appsink_caps, caps_deliver_nv12, colour_from_colorimetry
from sdk.sources.uri import SourceUri
from sdk.spec.source import PIXEL_FORMATS


def argus_pipeline(sensor_id: int, width: int, height: int, fps: int, nv12: bool = False) -> str:
    """The Jetson Argus (CSI camera) pipeline: NVMM NV12 from the ISP, converted to BGR for appsink, or
    (`nv12`) copied out as NV12 by nvvidconv (the VIC, not the CPU) with its colorimetry pinned to
    BT.601 limited range, so the CUDA kernel converts it as OpenCV would and no CPU converts a pixel."""
    tail = (
        "nvvidconv ! video/x-raw,format=NV12,colorimetry=bt601 ! "
        if nv12
        else "nvvidconv ! video/x-raw,format=BGRx ! videoconvert ! video/x-raw,format=BGR ! "
    )
    return (
        f"nvarguscamerasrc sensor-id={sensor_id} ! "
        f"video/x-raw(memory:NVMM),width={width},height={height},framerate={fps}/1,format=NV12 ! "
        f"{tail}appsink drop=true max-buffers=1 sync=false"
    )


class OpenCvCapture(FrameReader):
    def __init__(self, uri: SourceUri) -> None:
        self.uri = uri
        self.live = uri.live
        self._capture = None
        self._buffer: np.ndarray | None = None
        self._log = None  # file sources: FFmpeg's messages (sdk/sources/decoder_log.py) tell a damaged frame
        self._logged = 0
        self._skipped = False  # frames skipped since the decoder log's last checkpoint: their lines are not the next read's
        self._gaps = None  # file sources: frames the recording promised that never arrived (sdk/sources/frame_gaps.py)
        self._pos_msec = 0
        self._position = 0
        # What read() hands out: "bgr" (BGR or gray arrays) or "nv12" (sdk.pixels.Nv12Image).
        self.pixel_format = self._pixel_format()
        self._nv12: Nv12Image | None = None
        self._colour: YuvColour | None = None

    def _pixel_format(self) -> str:
        if self.uri.scheme == "gst":
            return "nv12" if caps_deliver_nv12(self.uri.target) else "bgr"
        wanted = self.uri.params.get("format", "bgr")
        if wanted not in PIXEL_FORMATS:
            raise SourceError(f"source {self.uri.scheme}://: format={wanted!r}; allowed: {', '.join(PIXEL_FORMATS)}")
        if wanted == "nv12" and self.uri.scheme not in ("file", "csi"):
            raise SourceError(
                f"source {self.uri.scheme}://: format=nv12 is offered by file:// (replayed as NV12) and csi:// (Argus)",
                hint="a gst:// pipeline delivers NV12 when the caps before its appsink say format=NV12",
            )
        return wanted

    def _describe(self) -> tuple[object, int, str]:
        import cv2

        if self.uri.scheme == "file":
            return self.uri.target, cv2.CAP_ANY, f"video file {self.uri.target}"
        if self.uri.scheme == "v4l2":
            return self.uri.target, cv2.CAP_V4L2, f"V4L2 device {self.uri.target}"
        if self.uri.scheme == "csi":
            try:
                sensor = int(self.uri.target)
            except ValueError:
                raise SourceError(f"csi://{self.uri.target}: the sensor id must be a number, e.g. csi://0") from None
            pipeline = argus_pipeline(
                sensor,
                self.uri.int_param("width", 1920),
                self.uri.int_param("height", 1080),
                self.uri.int_param("fps", 30),
                nv12=self.pixel_format == "nv12",
            )
            return pipeline, cv2.CAP_GSTREAMER, f"CSI camera {sensor} (Argus)"
        return self.uri.target, cv2.CAP_GSTREAMER, f"GStreamer pipeline {self.uri.target!r}"

    def open(self) -> None:
        import cv2

        target, api, what = self._describe()
        if api == cv2.CAP_GSTREAMER and not _opencv_has_gstreamer():
            raise SourceError(
                f"cannot open {what}: this OpenCV build has no GStreamer support",
                hint="on Jetson use JetPack's OpenCV (python3-opencv), not the PyPI wheel",
            )
        if self.uri.scheme == "file" and self._log is None:
            from sdk.sources.decoder_log import DecoderLog

            self._log = DecoderLog.acquire()
            self._logged = self._log.checkpoint() if self._log is not None else 0
        self._position = 0
        self._skipped = False
        capture = cv2.VideoCapture(target, api)
        if not capture.isOpened():
            capture.release()
            self.close()  # and the decoder log's tap: a source that did not open holds nothing
            raise SourceError(f"cannot open {what}")
        if self.uri.scheme == "v4l2":
            for prop, name in (
                (cv2.CAP_PROP_FRAME_WIDTH, "width"),
                (cv2.CAP_PROP_FRAME_HEIGHT, "height"),
                (cv2.CAP_PROP_FPS, "fps"),
            ):
                if name in self.uri.params:
                    capture.set(prop, self.uri.int_param(name, 0))
        self._capture = capture
        if self.uri.scheme == "file":
            from sdk.sources.frame_gaps import FrameGaps

            self._gaps = self._gaps or FrameGaps()  # kept across a loop's passes: each pass counts
            self._gaps.start_pass(capture.get(cv2.CAP_PROP_FPS), capture.get(cv2.CAP_PROP_FRAME_COUNT))
            self._pos_msec = cv2.CAP_PROP_POS_MSEC

    @property
    def lost_frames(self) -> int:
        return self._gaps.lost if self._gaps is not None else 0

    @property
    def lost_last(self) -> str | None:
        return self._gaps.last if self._gaps is not None else None

    def _arrived(self, ok: bool, corrupt: bool = False) -> None:
        """Tell the gap count what this read or grab brought: a frame and its time, a corrupt one, or the end."""
        if ok:
            self._gaps.frame(self._capture.get(self._pos_msec))
        elif corrupt:
            self._gaps.frame(None)
        else:
            self._gaps.end()

    def read(self) -> np.ndarray | None:
        if self._capture is None:
            raise SourceError("read() before open()")
        if self._skipped:  # what the decoder logged while it made the skipped frames is theirs, not this frame's
            self._logged = self._log.checkpoint()
            self._skipped = False
        # Decoding into the same buffer each time: the steady state allocates no image.
        ok, image = self._capture.read(self._buffer)
        index = self._position
        self._position += 1
        logged = self._log.checkpoint() if self._log is not None else self._logged
        if self._gaps is not None:
            self._arrived(ok and image is not None, corrupt=logged > self._logged)
        if self._log is not None and logged > self._logged:  # the decoder reported damage while it made this frame
            self._logged = logged
            if ok and image is not None:
                self._buffer = image
            raise CorruptFrame(f"frame {index}: {self._log.last}")
        if not ok or image is None:
            return None
        self._buffer = image
        if self.pixel_format == "nv12":
            return self._as_nv12(image)
        return image

    def _as_nv12(self, image: np.ndarray) -> Nv12Image:
        """A file replayed as NV12 (BGR converted by OpenCV, BT.601 limited range, as a camera delivers it),
        or the (H*3/2) x W buffer OpenCV's GStreamer backend returns for NV12 caps (views, no copy)."""
        if self.uri.scheme == "file":
            self._nv12 = Nv12Image.from_bgr(image, out=self._nv12)
            return self._nv12
        if self._colour is None:
            caps = appsink_caps(self._describe()[0])
            self._colour = colour_from_colorimetry(caps.get("colorimetry"), image.shape[0] * 2 // 3, f"source {self.uri.scheme}://")
        return Nv12Image.from_opencv(image, self._colour)

    def skip(self) -> bool:
        if self._capture is None:
            raise SourceError("skip() before open()")
        grabbed = bool(self._capture.grab())  # demuxes and decodes, without the copy out (0.4 ms of 0.7 here)
        self._position += 1
        if self._gaps is not None:
            self._arrived(grabbed)
        # A skipped frame's damage is not the next frame's: the next read() takes the log's count before it decodes,
        # once for a run of skips (a checkpoint a frame, a round trip through the log's pump thread, cost a third
        # of skipping through a recording).
        self._skipped = self._log is not None
        return grabbed

    def close(self) -> None:
        if self._capture is not None:
            self._capture.release()
            self._capture = None
        if self._log is not None:
            from sdk.sources.decoder_log import DecoderLog

            self._log = None
            DecoderLog.release()

    @property
    def nominal_fps(self) -> float | None:
        import cv2

        if self._capture is None:
            return None
        fps = self._capture.get(cv2.CAP_PROP_FPS)
        return fps if fps and fps > 0 else None


def _opencv_has_gstreamer() -> bool:
    import cv2

    for line in cv2.getBuildInformation().splitlines():
        if "GStreamer" in line:
            return "YES" in line
    return False
