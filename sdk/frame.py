"""A captured frame: its index in the stream and when it was captured."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sdk.pixels import Nv12Image


@dataclass
class Frame:
    index: int
    # time.monotonic_ns() when the frame arrived (live) or was due (paced replay).
    t_capture_ns: int
    # H x W x 3 BGR (OpenCV's order), H x W gray, uint8, or an NV12 frame (sdk.pixels.Nv12Image:
    # planes, pitches, YUV colour) where the source delivers NV12. Owned by the source: valid until
    # the next frame is read, so stages must not keep it.
    image: np.ndarray | Nv12Image
    # The camera's name in a pipeline with `sources:` (its frame numbers are its own); None with `source:`.
    camera: str | None = None
    # A recording's own stamp of the frame (the message header's, ns since its epoch) and its frame id (mcap://,
    # rosbag2://); None where the source has none (a video's frames carry no stamp of their own).
    stamp_ns: int | None = None
    frame_id: str | None = None
    # The image file the frame was read from (images://), so labels kept per file can find the frame's detections.
    file: str | None = None
