"""Calibration and held-out frames of a pipeline with several cameras: drawn from every camera, stratified.

A pipeline with `sources:` (and no `calibration.source`) calibrates on every camera's recording, each
through its own preprocessing (the shared section with the camera's `crop`), so the ranges cover what
every camera shows the model. The counts are shared out first, then drawn inside each camera's clip
(decision 0630):

- held-out frames: an equal share per camera, a camera giving at most half of its candidate frames;
- calibration frames: an equal share per camera of its candidates left;
- a camera with fewer candidates than its share gives all it has and the others split the rest equally
  (water-filling); the remainder of an uneven split goes to the cameras in the file's order;
- inside a clip, the camera's frames are evenly spaced over its candidates (every `stride`-th frame from
  `seed % stride`), and the held-out ones evenly spaced among those: no draw, the same file gives the same
  frames, and a camera's frames span its whole recording.

Frames are keyed `(camera, index)`. A one-camera pipeline (`source:`) keeps its seeded draw
(`tools.int8.calibrate.select_frames`) and its integer keys.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sdk.errors import ConfigError, ModelError
from sdk.preprocess import CpuPreprocessor, ResizeGeometry
from sdk.release import sha256_of
from sdk.sources import CorruptFrame, open_reader
from sdk.sources.uri import parse_source_uri
from sdk.spec.loader import PipelineFile
from sdk.spec.preprocess import Preprocess
from sdk.spec.schema import Calibration

RECORDED = ("file", "images")


@dataclass(frozen=True)
class CameraClip:
    """One camera's recording and the preprocessing the runtime gives its frames."""

    name: str
    uri: str
    preprocess: Preprocess


@dataclass(frozen=True)
class CameraSelection:
    """Per camera: the calibration and held-out frame indices (disjoint) and the frames its recording has."""

    calibration: dict[str, tuple[int, ...]]
    holdout: dict[str, tuple[int, ...]]
    source_frames: dict[str, int]

    def counts(self) -> dict[str, dict[str, int]]:
        """What ranges.json records per camera."""
        return {
            name: {"frames": len(self.calibration[name]), "holdout_frames": len(self.holdout[name]), "source_frames": total}
            for name, total in self.source_frames.items()
        }


def stratified(pipeline: PipelineFile) -> bool:
    """Frames from every camera: a `sources:` pipeline whose calibration names no recording of its own."""
    spec = pipeline.spec.calibration
    return pipeline.spec.multi_camera and not (spec is not None and spec.source)


def camera_clips(pipeline: PipelineFile) -> dict[str, CameraClip]:
    """Every camera's recording, in the file's order; a live camera is refused in one line."""
    clips = {}
    for name, camera in pipeline.spec.cameras.items():
        if camera.uri.partition("://")[0] not in RECORDED:
            raise ConfigError(
                f"{pipeline.path}: sources.{name}.uri: calibration draws frames from every camera and needs recordings "
                f"(file://, images://); camera {name} reads {camera.uri!r}",
                hint="set calibration.source to a recording to calibrate on it alone, or point the cameras at recordings",
            )
        clips[name] = CameraClip(name, camera.uri, pipeline.spec.preprocess_for(name))
    return clips


def share(need: int, room: dict[str, int]) -> dict[str, int]:
    """`need` split equally over the cameras, none above its `room`; what a full camera cannot take goes
    equally to the others, an uneven remainder to the first cameras in order. Less than `need` in all
    when the room runs out."""
    given = dict.fromkeys(room, 0)
    left = need
    while left > 0:
        open_ = [name for name in room if room[name] > given[name]]
        if not open_:
            break
        each, extra = divmod(left, len(open_))
        full = [name for name in open_ if room[name] - given[name] <= each]
        if full:  # these give what they have; the rest is shared again
            for name in full:
                left -= room[name] - given[name]
                given[name] = room[name]
            continue
        for position, name in enumerate(open_):
            given[name] += each + (1 if position < extra else 0)
        left = 0
    return given


def evenly(candidates: list[int], count: int) -> list[int]:
    """`count` of `candidates`, evenly spaced (the middle of each of `count` equal parts)."""
    return [candidates[int((i + 0.5) * len(candidates) / count)] for i in range(count)]


def draw_from_clip(total: int, frames: int, holdout: int, spec: Calibration) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """One camera's calibration and held-out frames: evenly spaced over its every `stride`-th frame."""
    candidates = list(range(spec.seed % spec.stride, total, spec.stride))
    picked = evenly(candidates, frames + holdout) if frames + holdout else []
    held = set(evenly(picked, holdout)) if holdout else set()
    return tuple(i for i in picked if i not in held), tuple(sorted(held))


def select_camera_frames(totals: dict[str, int], spec: Calibration, where: str = "calibration") -> CameraSelection:
    """The stratified selection over cameras with these frame counts (module docstring)."""
    candidates = {name: len(range(spec.seed % spec.stride, total, spec.stride)) for name, total in totals.items()}
    held = share(spec.holdout_frames, {name: n // 2 for name, n in candidates.items()})
    calibration = share(spec.frames, {name: n - held[name] for name, n in candidates.items()})
    if sum(held.values()) < spec.holdout_frames or sum(calibration.values()) < spec.frames:
        have = ", ".join(f"{name} {totals[name]} ({candidates[name]} at stride {spec.stride})" for name in totals)
        raise ConfigError(
            f"{where}: frames ({spec.frames}) + holdout_frames ({spec.holdout_frames}) are drawn from every camera, a camera "
            f"giving at most half of its frames to the holdout; the cameras have {have}",
            hint="lower calibration.frames, holdout_frames or stride, or record longer clips",
        )
    drawn = {name: draw_from_clip(totals[name], calibration[name], held[name], spec) for name in totals}
    return CameraSelection({n: d[0] for n, d in drawn.items()}, {n: d[1] for n, d in drawn.items()}, dict(totals))


def count_clip_frames(pipeline: PipelineFile, clip: CameraClip) -> int:
    """Frames in a camera's recording, corrupt ones included (they keep their index). A recording file is counted
    once per process for its content (its SHA-256, 10 ms for the example's clip; counting decodes every frame, 0.6 s):
    the same bytes through the same decoder are the same count, wherever the file lies or whatever it is called."""
    parsed = parse_source_uri(clip.uri, pipeline.folder)
    path = Path(parsed.target)
    key = (parsed.scheme, sha256_of(path), tuple(sorted(parsed.params.items()))) if parsed.scheme == "file" and path.is_file() else None
    if key is not None and key in _COUNTED:
        return _COUNTED[key]
    count = 0
    with open_reader(clip.uri, pipeline.folder) as reader:
        while reader.skip():
            count += 1
    if key is not None:
        _COUNTED[key] = count
    return count


_COUNTED: dict[tuple, int] = {}  # (scheme, content hash, parameters) -> frames


def iter_clip_frames(
    pipeline: PipelineFile, uri: str, preprocess: Preprocess, indices: set[int], input_shape: tuple[int, ...]
) -> Iterator[tuple[int, np.ndarray]]:
    """The chosen frames of one recording in order, through the runtime's own preprocessing (the one code path)."""
    buffer = np.zeros(input_shape, preprocess.dtype)
    run = CpuPreprocessor(preprocess, buffer)
    delivered = 0
    with open_reader(uri, pipeline.folder) as reader:
        index = 0
        while delivered < len(indices):
            if index not in indices:
                if not reader.skip():  # not chosen: not decoded into an image
                    break
                index += 1
                continue
            try:
                image = reader.read()
            except CorruptFrame:
                index += 1
                continue
            if image is None:
                break
            run(image)
            delivered += 1
            yield index, buffer.copy()
            index += 1


def iter_camera_frames(
    pipeline: PipelineFile, chosen: dict[str, tuple[int, ...]], input_shape: tuple[int, ...]
) -> Iterator[tuple[tuple[str, int], np.ndarray]]:
    """The chosen frames of every camera, camera after camera, each through its own preprocessing."""
    for name, clip in camera_clips(pipeline).items():
        for index, tensor in iter_clip_frames(pipeline, clip.uri, clip.preprocess, set(chosen.get(name, ())), input_shape):
            yield (name, index), tensor


def clip_geometry(pipeline: PipelineFile, uri: str, preprocess: Preprocess) -> ResizeGeometry:
    """The resize geometry of a recording's frames under this preprocessing (boxes map back to its pixels)."""
    with open_reader(uri, pipeline.folder) as reader:
        while True:
            try:
                image = reader.read()
            except CorruptFrame:
                continue
            if image is None:
                raise ModelError(f"{pipeline.path}: the calibration recording {uri} has no readable frame")
            height, width = image.shape[:2]
            return ResizeGeometry.plan(width, height, preprocess.resize, preprocess.crop)


__all__ = [
    "CameraClip",
    "CameraSelection",
    "camera_clips",
    "clip_geometry",
    "count_clip_frames",
    "draw_from_clip",
    "iter_camera_frames",
    "iter_clip_frames",
    "select_camera_frames",
    "share",
    "stratified",
]


def source_uri(pipeline: PipelineFile) -> str:
    """The one recording a pipeline calibrates on: `calibration.source`, else its camera's (several cameras:
    `tools.int8.calibration_frames` draws from each)."""
    spec = pipeline.spec.calibration
    uri = (spec.source if spec and spec.source else None) or next(iter(pipeline.spec.cameras.values())).uri
    if uri.partition("://")[0] not in ("file", "images"):
        raise ConfigError(f"{pipeline.path}: calibration.source: calibration needs a recording (file://, images://), the pipeline reads {uri!r}")
    return uri


def source_geometry(pipeline: PipelineFile):
    """The resize geometry of the calibration source's frames (boxes map back to its pixels)."""
    return clip_geometry(pipeline, source_uri(pipeline), pipeline.spec.preprocess)
