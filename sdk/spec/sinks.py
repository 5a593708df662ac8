"""The `sinks` section: where each frame's results go, and what must hold for all of them together, at load.

Every output of a run lands in one folder (a measuring run's report folder, a service's output folder),
beside the files the runtime and the host write there themselves. So a pipeline file is refused at load,
on the host, before anything is sent, when an output's path leaves that folder or is a hidden name (the
sinks' own partial files are hidden names), when it is one of the run's own files (`RUN_FILES`), when two
outputs would write one path (a camera's own video `annotated-NAME.mp4`, a mask folder's PNGs and a
service's numbered segments included), or when a video's codec is not one the SDK writes or its container
not one that codec goes in (`VIDEO_CODECS`). Symbolic links can only be resolved where the run writes:
`create_sinks` confines each path again on the device.
"""


import posixpath
import re
from typing import Annotated, Literal, Union

from pydantic import Field

from sdk.spec.bounds import Flag, Frozen, Int, Real, bounds_error, shown

# What cv2.VideoWriter (FFmpeg backend) writes and reads back, by codec: the containers each goes in.
# mp4v, XVID, DIVX and FMP4 are MPEG-4 part 2 under four tags; MJPG is Motion JPEG. H.264 is not here:
# the PyPI OpenCV has no encoder for it, so a pipeline naming it would run on some devices only.
VIDEO_CODECS: dict[str, tuple[str, ...]] = {
    "mp4v": (".mp4", ".mov", ".mkv", ".avi"),
    "XVID": (".mp4", ".mov", ".mkv", ".avi"),
    "DIVX": (".mp4", ".mov", ".mkv", ".avi"),
    "FMP4": (".mp4", ".mov", ".mkv", ".avi"),
    "MJPG": (".avi", ".mkv", ".mov", ".mp4"),
}
Fourcc = Literal["mp4v", "XVID", "DIVX", "FMP4", "MJPG"]

# The files a run's folder holds besides its outputs: the runtime's (report.json, junit.xml, timeline.npz),
# the host's (report.html, device.json, the FP32 reference, the INT8 gate's reports) and a fleet's summary.
RUN_FILES = (
    "report.json",
    "junit.xml",
    "timeline.npz",
    "report.html",
    "device.json",
    "reference_detections.jsonl",
    "accuracy.json",
    "accuracy.png",
    "sensitivity.png",
    "precision.json",
    "fleet.json",
)
REPORT_DETECTIONS = "detections.jsonl"  # every measuring run writes it (the report contract): a JSONL sink's path only


class Rotate(Frozen):
    """When a service's output closes its current file and begins the next (`service.retention` prunes the finished ones).

    A finished file is whole (a video plays to its end); a kill loses at most the current one's
    unsynced tail. Measuring runs (deploy, validation) write one file and do not rotate."""

    max_mb: Real("MiB at which the current file is finished and the next begun", gt=0, le=65_536) = 64
    max_age_s: Real("seconds after which the current file is finished and the next begun; null: by size only", ge=1, le=86_400) | None = None


class JsonlSink(Frozen):
    kind: Literal["jsonl"]
    path: str = REPORT_DETECTIONS
    rotate: Rotate = Rotate()
    sync_interval_s: Real("seconds between fsyncs of the current file: a power cut loses at most this much", ge=0.05, le=60) = 1.0
    # true: boxes and scores with every digit (what an evaluation run on a target writes, scored as on the host);
    # false: boxes to 2 decimals, scores to 4
    exact: Flag = False


class VideoSink(Frozen):
    kind: Literal["video"]
    path: str = "annotated.mp4"
    fourcc: Fourcc = "mp4v"
    fps: Real("frame rate written in the file; null: the source's", gt=0, le=1000) | None = None
    rotate: Rotate = Rotate(max_mb=256, max_age_s=60)  # a kill loses at most the current segment (a minute)
    mosaic: Flag = False  # several cameras: one video of them all side by side at `path`, instead of annotated-NAME.mp4 each


class NullSink(Frozen):
    kind: Literal["null"]


class MaskSink(Frozen):
    """A segment decoder's masks as PNGs (class index per pixel, source size; 255 outside the crop), `path/NNNNNN.png`."""

    kind: Literal["mask"]
    path: str = "masks"
    every: Int(1, 100_000, "write the mask of every n-th frame (the JSONL sink names the file of those frames)") = 1
    keep: Int(1, 1_000_000, "the newest masks kept; older ones are deleted (a service runs for days)") = 10_000


TOPIC = r"^/[A-Za-z0-9_/]{1,127}$"


class McapSink(Frozen):
    """Each frame's detections in an MCAP file (sdk/sinks/mcap_sink.py): foxglove.ImageAnnotations for Foxglove, or
    vision_msgs/msg/Detection2DArray (`messages: vision_msgs`) for a ROS 2 stack."""

    kind: Literal["mcap"]
    path: str = "detections.mcap"
    messages: Annotated[
        Literal["foxglove", "vision_msgs"],
        Field(
            description="foxglove: foxglove.ImageAnnotations, drawn over the camera by Foxglove; vision_msgs: ROS 2 "
            "vision_msgs/msg/Detection2DArray (CDR) for `ros2 bag play`, images as sensor_msgs/msg/CompressedImage"
        ),
    ] = "foxglove"
    latency: Flag = False  # also each frame's latency by stage against its deadline, JSON on /latency (messages: foxglove)
    topic: Annotated[str, Field(pattern=TOPIC, description="the annotations' topic; several cameras: TOPIC/NAME each")] = "/detections"
    images: Flag = False  # also each frame as a JPEG foxglove.CompressedImage on image_topic, so the file opens alone
    image_topic: Annotated[str, Field(pattern=TOPIC, description="the images' topic (images: true); several cameras: TOPIC/NAME each")] = (
        "/camera/image/compressed"
    )


class FoxgloveSink(Frozen):
    """The live view: a Foxglove WebSocket server of detections and the camera (sdk/sinks/live_view.py)."""

    kind: Literal["foxglove"]
    host: Annotated[str, Field(pattern=r"^[0-9A-Za-z.:-]{1,253}$", description="the address the server binds (127.0.0.1: this machine only)")] = (
        "127.0.0.1"
    )
    port: Int(0, 65_535, "the WebSocket port Foxglove connects to (0: any free port, told in the log)") = 8765
    image_fps: Real("camera images a second sent to clients, downscaled (0: none, detections only)", ge=0, le=60) = 5.0
    image_width: Int(32, 4096, "width of the images sent, pixels (never wider than the frame)") = 640


Sink = Annotated[Union[JsonlSink, VideoSink, NullSink, MaskSink, McapSink, FoxgloveSink], Field(discriminator="kind")]  # noqa: UP007

PATH_RULE = "a relative path inside the run's folder, no part of it hidden (starting with '.')"


def camera_path(path: str, camera: str) -> str:
    """annotated.mp4 -> annotated-front.mp4"""
    stem, dot, suffix = path.rpartition(".")
    return f"{stem}-{camera}.{suffix}" if dot and "/" not in suffix else f"{path}-{camera}"


def path_problem(path: str) -> str | None:
    """Why `path` cannot name an output inside a run's folder, or None."""
    if not path or "\x00" in path:
        return "is empty or holds a NUL byte"
    if path.startswith("/"):
        return "is absolute"
    normal = posixpath.normpath(path)
    if normal == "." or normal == ".." or normal.startswith("../"):
        return "leaves the run's folder" if normal != "." else "is the run's folder itself"
    if any(part.startswith(".") for part in normal.split("/")):
        return "is a hidden name (the sinks' partial and current files are hidden names)"
    return None


def check_outputs(sinks: tuple, cameras: list[str]) -> None:
    """Refuse (one bounds error naming sinks[i].path) outputs that leave the folder, take a run file's name, use a
    codec in a container it does not go in, or share a path; `cameras`: the names of several cameras, else []."""
    claims: list[tuple[int, str, str]] = []  # (sink index, normal path, kind)
    for index, sink in enumerate(sinks):
        if isinstance(sink, (NullSink, FoxgloveSink)):  # no file
            continue
        at = ("sinks", index, "path")
        problem = path_problem(sink.path)
        if problem is not None:
            raise bounds_error(f"{shown(sink.path)} {problem}; allowed: {PATH_RULE}", hint="name a file (or folder) inside the run's folder", path=at)
        normal = posixpath.normpath(sink.path)
        names = [camera_path(normal, c) for c in cameras] if isinstance(sink, VideoSink) and cameras and not sink.mosaic else [normal]
        for name in names:
            label = shown(sink.path) if name == normal else f"{shown(sink.path)} (its camera's file {shown(name)})"
            first = name.split("/")[0].casefold()
            if first in RUN_FILES:
                raise bounds_error(
                    f"{label} is one of the run's own files; allowed: any name but {', '.join(RUN_FILES)}",
                    hint="the runtime and the host write those into the same folder: give the output another name",
                    path=at,
                )
            if name.casefold() == REPORT_DETECTIONS and not isinstance(sink, JsonlSink):
                raise bounds_error(
                    f"{label} is the report's detections file; allowed: {REPORT_DETECTIONS} for a jsonl sink only",
                    hint="every measuring run writes detections.jsonl: give this output another name",
                    path=at,
                )
            for other, taken, kind in claims:
                clash = _clash(name, taken, kind, sinks[other])
                if clash is not None:
                    raise bounds_error(
                        f"{label} {clash} sinks[{other}] ({kind}, {shown(taken)}); allowed: a path of its own for each output",
                        hint="two outputs on one path overwrite each other: give each sink its own path",
                        path=at,
                    )
            claims.append((index, name, sink.kind))
        if isinstance(sink, McapSink) and posixpath.splitext(normal)[1].lower() != ".mcap":
            raise bounds_error(f"{shown(sink.path)} for an mcap sink; allowed: a .mcap file", hint="e.g. path: detections.mcap", path=at)
        if isinstance(sink, McapSink) and sink.latency and sink.messages == "vision_msgs":
            raise bounds_error(
                "latency: true with messages: vision_msgs; allowed: the latency record with messages: foxglove",
                hint="vision_msgs has no latency message: write a second mcap sink with messages: foxglove and latency: true",
                path=("sinks", index, "latency"),
            )
        if isinstance(sink, VideoSink):
            suffix = posixpath.splitext(normal)[1]
            containers = VIDEO_CODECS[sink.fourcc]
            if suffix.lower() not in containers:
                raise bounds_error(
                    f"{shown(sink.path)} with fourcc {sink.fourcc}; allowed: a {_or(containers)} file for {sink.fourcc}",
                    hint="the container comes from the suffix: e.g. annotated.mp4 with mp4v, annotated.avi with MJPG",
                    path=at,
                )


def _or(items) -> str:
    return f"{', '.join(items[:-1])} or {items[-1]}" if len(items) > 1 else items[0]


def _clash(name: str, taken: str, kind: str, owner) -> str | None:
    """How output `name` collides with the output `taken` of `owner` (None: it does not). Compared without case: a
    run's folder may be copied to a file system that ignores it."""
    a, b = name.casefold(), taken.casefold()
    if a == b:
        return "is also the path of"
    if a.startswith(b + "/"):
        return "is inside the folder of" if kind == "mask" else "needs a folder where there is the file of"
    if b.startswith(a + "/"):
        return "is a file where there is a folder of"
    rotate = getattr(owner, "rotate", None)
    if rotate is not None:  # a service numbers its segments: detections.000001.jsonl
        folder, leaf = posixpath.split(b)
        stem, suffix = posixpath.splitext(leaf)
        if posixpath.dirname(a) == folder and re.fullmatch(re.escape(stem) + r"\.\d{6,}" + re.escape(suffix), posixpath.basename(a)):
            return "is the name of a numbered segment (in a service) of"
    return None


__all__ = [
    "REPORT_DETECTIONS",
    "RUN_FILES",
    "VIDEO_CODECS",
    "FoxgloveSink",
    "JsonlSink",
    "MaskSink",
    "McapSink",
    "NullSink",
    "Rotate",
    "Sink",
    "VideoSink",
    "camera_path",
    "check_outputs",
    "path_problem",
]
