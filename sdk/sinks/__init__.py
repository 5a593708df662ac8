"""Where detections go: JSONL, an annotated video, or nowhere."""

from __future__ import annotations

import sys
from pathlib import Path

from sdk.frame import Frame
from sdk.postprocess.detections import Detections
from sdk.spec.paths import confined_path
from sdk.spec.schema import JsonlSink as JsonlSpec
from sdk.spec.schema import NullSink as NullSpec
from sdk.spec.schema import VideoSink as VideoSpec


class NullSink:
    name = "null"

    def open(self) -> None:
        pass

    def write(self, frame: Frame, detections: Detections) -> None:
        pass

    def close(self) -> None:
        pass


class SinkGroup:
    """All of a pipeline's sinks as one stage: opened, written and closed together."""

    name = "sink"

    def __init__(self, sinks: list) -> None:
        self.sinks = sinks

    def __enter__(self) -> SinkGroup:
        opened = []
        try:
            for sink in self.sinks:
                sink.open()
                opened.append(sink)
        except BaseException:
            close_all(reversed(opened))
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        close_all(reversed(self.sinks))

    def __call__(self, frame: Frame, detections: Detections) -> None:
        for sink in self.sinks:
            sink.write(frame, detections)


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


def create_sinks(specs: tuple, output_dir: Path, *, fps: float = 30.0, require_jsonl: bool = False) -> SinkGroup:
    """One sink per spec; paths stay inside `output_dir`.

    A measuring run promises `detections.jsonl` in its report folder (the report contract):
    `require_jsonl` adds it unless a JSONL sink of the pipeline already writes exactly that file
    (a sink with its own `path` still gets its file, beside the contract's).
    """
    sinks: list = []
    contract = JsonlSpec(kind="jsonl")
    if require_jsonl and not any(isinstance(spec, JsonlSpec) and Path(spec.path) == Path(contract.path) for spec in specs):
        specs = (*specs, contract)
    for index, spec in enumerate(specs):
        where = f"sinks[{index}].path"
        if isinstance(spec, JsonlSpec):
            from sdk.sinks.jsonl import JsonlSink

            sinks.append(JsonlSink(confined_path(output_dir, spec.path, where=where)))
        elif isinstance(spec, VideoSpec):
            from sdk.sinks.video import VideoSink

            sinks.append(VideoSink(confined_path(output_dir, spec.path, where=where), fourcc=spec.fourcc, fps=spec.fps or fps))
        elif isinstance(spec, NullSpec):
            sinks.append(NullSink())
    return SinkGroup(sinks)


__all__ = ["NullSink", "SinkGroup", "create_sinks"]
