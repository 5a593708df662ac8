"""A measuring run always writes the report contract's `detections.jsonl`, whatever the pipeline's own sinks."""

from __future__ import annotations

import json

import numpy as np

from sdk.frame import Frame
from sdk.postprocess.detections import Detections
from sdk.sinks import create_sinks
from sdk.spec.schema import JsonlSink, NullSink


def run_two_frames(specs, folder):
    detections = Detections(4, ("person",))
    image = np.zeros((8, 8, 3), np.uint8)
    with create_sinks(specs, folder, require_jsonl=True) as sinks:
        for index in range(2):
            sinks(Frame(index, 1000 + index, image), detections)


def test_a_jsonl_sink_with_its_own_path_still_gets_the_contracts_detections_jsonl(tmp_path):
    run_two_frames((JsonlSink(kind="jsonl", path="out/dets.jsonl"), NullSink(kind="null")), tmp_path)
    for path in (tmp_path / "detections.jsonl", tmp_path / "out" / "dets.jsonl"):
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        assert [line["frame"] for line in lines] == [0, 1], path


def test_the_default_jsonl_sink_is_not_written_twice(tmp_path):
    run_two_frames((JsonlSink(kind="jsonl"),), tmp_path)
    assert len((tmp_path / "detections.jsonl").read_text().splitlines()) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["detections.jsonl"]
