"""The `source` section: which camera or recording, and how a recording is played back."""


from typing import Literal
from urllib.parse import parse_qsl

from pydantic import field_validator, model_validator

from sdk.spec.bounds import (
    MAX_REPLAY_FRAMES,
    MAX_SOURCE_PIXELS,
    REPLAY_FRAMES_HINT,
    Flag,
    Frozen,
    Int,
    Real,
    bounds_error,
    number,
    replay_frames_cost,
    shown,
)

SOURCE_SCHEMES = ("file", "images", "mcap", "rosbag2", "v4l2", "csi", "gst", "synthetic")
STAMPED_SCHEMES = ("mcap", "rosbag2")  # recordings whose frames carry their own stamps (`replay.pace: recorded`)
PIXEL_FORMATS = ("bgr", "nv12")  # `format=` of a source URI (sdk/sources/opencv_capture.py)
# synthetic:// takes its frame size from the URI: known at load, so its memory and crops are checked then.
SYNTHETIC_SIZE = {"width": 640, "height": 480}
SYNTHETIC_KINDS = ("boxes", "noise")  # synthetic://KIND (sdk/sources/synthetic.py draws them)
ReplayFrames = Int(
    1, MAX_REPLAY_FRAMES, "frames to play, then the run ends; each keeps a run record", over=replay_frames_cost, over_hint=REPLAY_FRAMES_HINT
)


class Replay(Frozen):
    """How a recorded source is played back: deterministic runs need all three."""

    loop: Flag = False
    frames: ReplayFrames | None = None
    rate_fps: Real("frames per second the recording is paced at; null: as fast as the pipeline goes", gt=0, le=1000) | None = None
    # keep: process every frame, lateness shows as latency (acceptance runs).
    # drop: the newest frame wins when the pipeline is behind; every skipped frame is counted.
    late_frames: Literal["keep", "drop"] = "keep"
    # rate: every frame one period of rate_fps after the one before (or as fast as the pipeline goes where rate_fps
    # is null). recorded: every frame when its recorded stamp says, counted from the first (mcap://, rosbag2://).
    pace: Literal["rate", "recorded"] = "rate"


class Reconnect(Frozen):
    """A live camera that vanishes (cable, driver reset) is reopened with a doubling backoff."""

    initial_backoff_s: Real("first wait before reopening, seconds", gt=0, le=60) = 0.1
    max_backoff_s: Real("longest wait between reopening attempts, seconds", gt=0, le=600) = 5.0


class Source(Frozen):
    uri: str
    replay: Replay = Replay()
    reconnect: Reconnect | None = Reconnect()  # live sources only; null: the stream ends with the camera

    @field_validator("uri")
    @classmethod
    def _known_scheme(cls, uri: str) -> str:
        scheme, sep, rest = uri.partition("://")
        if scheme == "synthetic" and sep and rest.partition("?")[0] not in SYNTHETIC_KINDS:
            kinds = ", ".join(f"synthetic://{kind}" for kind in SYNTHETIC_KINDS)
            raise ValueError(
                f"unknown synthetic kind {rest.partition('?')[0]!r} in {uri!r}; allowed: {kinds} (e.g. synthetic://boxes?width=640&height=480)"
            )
        if not sep or scheme not in SOURCE_SCHEMES or not rest:
            allowed = ", ".join(f"{s}://..." for s in SOURCE_SCHEMES)
            raise ValueError(f"unknown source URI {uri!r}; allowed: {allowed}")
        if scheme == "synthetic":
            synthetic_size(uri)
        if scheme in STAMPED_SCHEMES:
            topics = [v for k, v in parse_qsl(rest.partition("?")[2], keep_blank_values=True) if k == "topic"]
            if len(topics) != 1 or not topics[0]:
                raise ValueError(
                    f"{uri!r} names {len(topics)} topic(s); allowed: exactly one topic=, "
                    f"e.g. {scheme}://{rest.partition('?')[0]}?topic=/camera/image_raw "
                    "(`source:` takes several topic=, a camera each; under `sources:` a camera has one)"
                )  # refuses a frame size out of range
        if scheme != "gst":
            pixel_format = dict(parse_qsl(rest.partition("?")[2], keep_blank_values=True)).get("format")
            if pixel_format is not None and pixel_format not in PIXEL_FORMATS:
                raise ValueError(f"format={pixel_format!r} in {uri!r}; allowed: {', '.join(PIXEL_FORMATS)}")
            if pixel_format == "nv12" and scheme not in ("file", "csi"):
                raise ValueError(
                    f"format=nv12 in {uri!r}: NV12 frames come from file:// (replayed as NV12) and csi:// (Argus); gst:// takes it from its caps"
                )
        return uri

    @model_validator(mode="after")
    def _recorded_pace(self) -> "Source":
        if self.replay.pace != "recorded":
            return self
        scheme = self.uri.partition("://")[0]
        if scheme not in STAMPED_SCHEMES:
            raise ValueError(
                f"replay.pace recorded with a {scheme}:// source; allowed: pace recorded with {' or '.join(f'{s}://' for s in STAMPED_SCHEMES)} "
                "(their frames carry recorded stamps); other recordings are paced by replay.rate_fps"
            )
        if self.replay.rate_fps is not None:
            rate = self.replay.rate_fps
            raise ValueError(f"replay.pace recorded and replay.rate_fps {rate:g}; allowed: one of them (the recorded pace has no rate)")
        return self


def synthetic_size(uri: str) -> tuple[int, int]:
    """(width, height) of a synthetic:// source's frames, in range, or a bounds error naming the parameter."""
    params = dict(parse_qsl(uri.partition("?")[2], keep_blank_values=True))
    size = []
    for name, default in SYNTHETIC_SIZE.items():
        text = params.get(name)
        value = number(text) if text is not None else default
        if not isinstance(value, int) or not 1 <= value <= MAX_SOURCE_PIXELS:
            raise bounds_error(
                f"{name}={shown(text)} in {uri!r} is out of range; allowed: an integer from 1 to {MAX_SOURCE_PIXELS}",
                hint=f"a synthetic frame is width x height x 3 bytes; at most {MAX_SOURCE_PIXELS} pixels a side",
            )
        size.append(value)
    return size[0], size[1]


__all__ = ["SOURCE_SCHEMES", "STAMPED_SCHEMES", "Reconnect", "Replay", "Source", "synthetic_size"]
