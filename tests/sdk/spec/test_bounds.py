"""Every number of a pipeline file is finite, of its kind and in a documented range; memory caps are named.

Each bad value gets one error line naming the file's line, the YAML path, the value as written
and what is allowed, and a hint; nothing is allocated for it.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from sdk.errors import ConfigError
from sdk.spec import load_pipeline
from sdk.spec.bounds import MAX_HELD_FRAMES_BYTES, MAX_REPLAY_FRAMES
from sdk.spec.schema import Pipeline

REPO = Path(__file__).resolve().parents[3]
EXAMPLE_TEXT = (REPO / "pipelines" / "pedestrian.yaml").read_text()
RATE = "    rate_fps: 30 "


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    (tmp_path / "assets").mkdir()
    for name in ("vtest.avi", "ssdlite_pedestrian.onnx"):
        (tmp_path / "assets" / name).write_bytes(b"stand-in: the loader only checks that files exist")
    return tmp_path


def edited(old: str, new: str) -> str:
    assert old in EXAMPLE_TEXT, old
    return EXAMPLE_TEXT.replace(old, new, 1)


def with_frames(value: str) -> str:
    return edited(RATE, f"    frames: {value}\n{RATE}")


def with_crop(uri: str, crop: str) -> str:
    return edited("file://assets/vtest.avi", uri).replace("  color: rgb\n", f"  crop: {crop}\n  color: rgb\n", 1)


def failure(folder: Path, text: str) -> ConfigError:
    path = folder / "p.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_pipeline(path)
    return info.value


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


# (file text, the line's marker, YAML path, the value as shown, what is allowed)
BAD = {
    "frames-1e8": (
        with_frames("1e8"),
        "frames:",
        "source.replay.frames",
        "1e8 = 100000000 frames would take 5.96 GiB",
        "an integer from 1 to 1000000",
    ),
    "frames-1e30": (with_frames("1e30"), "frames:", "source.replay.frames", "1e30 frames would take", "an integer from 1 to 1000000"),
    "frames-float": (with_frames("1.0e+8"), "frames:", "source.replay.frames", "100000000.0 = 100000000 frames", "from 1 to 1000000"),
    "frames-digits": (with_frames("100000000"), "frames:", "source.replay.frames", "100000000 frames would take", "the replay cap"),
    "frames-fraction": (with_frames("2.5"), "frames:", "source.replay.frames", "2.5 is not a whole number", "an integer from 1"),
    "nan": (
        edited("score_threshold: 0.3", "score_threshold: .nan"),
        "score_threshold",
        "postprocess.score_threshold",
        ".nan is not a finite number",
        "a number from 0 to 1",
    ),
    "inf": (
        edited("rate_fps: 30 ", "rate_fps: .inf "),
        "rate_fps",
        "source.replay.rate_fps",
        ".inf is not a finite number",
        "above 0 and at most 1000",
    ),
    "minus-inf": (edited("p50_ms: 33.3", "p50_ms: -.inf"), "p50_ms", "budgets.end_to_end.p50_ms", "-.inf is not a finite number", "at most 3600000"),
    "nan-in-a-list": (
        edited("mean: [0.5, 0.5, 0.5]", "mean: [0.5, .NaN, 0.5]"),
        "mean:",
        "preprocess.normalize.mean[1]",
        ".nan is not",
        "a number from",
    ),
    "threads-true": (
        edited("threads: 2", "threads: true"),
        "threads",
        "model.threads",
        "true is a boolean, not an integer",
        "an integer from 1 to 256",
    ),
    "loop-1": (edited(RATE, f"    loop: 1\n{RATE}"), "loop:", "source.replay.loop", "1 is not a boolean", "true or false"),
    "string-for-a-number": (
        edited("iou_threshold: 0.6", "iou_threshold: high"),
        "iou_threshold",
        "postprocess.iou_threshold",
        "'high' is not a number",
        "above 0 and at most 1",
    ),
    "string-for-an-integer": (
        edited("max_detections: 100", "max_detections: many"),
        "max_detections",
        "postprocess.max_detections",
        "'many' is not an integer",
        "from 1 to 10000",
    ),
    "out-of-range": (
        edited("iou_threshold: 0.6", "iou_threshold: 2"),
        "iou_threshold",
        "postprocess.iou_threshold",
        "2 is out of range",
        "at most 1",
    ),
    "negative-seed": (edited("seed: 0", "seed: -1"), "seed:", "calibration.seed", "-1 is out of range", "from 0 to 4294967295"),
    "version-true": (edited("version: 1", "version: true"), "version", "version", "true is not a known version", "allowed: 1"),
    "negative-crop": (
        with_crop("file://assets/vtest.avi", "{x: -4, y: 0, width: 10, height: 10}"),
        "crop:",
        "preprocess.crop.x",
        "-4 is out of range",
        "from 0 to",
    ),
    "empty-crop": (
        with_crop("file://assets/vtest.avi", "{x: 0, y: 0, width: 0, height: 10}"),
        "crop:",
        "preprocess.crop.width",
        "0 is out of range",
        "from 1 to",
    ),
    "crop-outside-the-image": (
        with_crop("synthetic://boxes?width=640&height=480", "{x: 700, y: 0, width: 100, height: 100}"),
        "crop:",
        "preprocess.crop.x",
        "700 is outside the 640x480 frame",
        "x from 0 to 639",
    ),
    "crop-below-the-default-synthetic-image": (
        with_crop("synthetic://boxes", "{x: 0, y: 480, width: 100, height: 100}"),
        "crop:",
        "preprocess.crop.y",
        "480 is outside the 640x480 frame",
        "y from 0 to 479",
    ),
    "synthetic-frame-too-large": (
        edited("file://assets/vtest.avi", "synthetic://boxes?width=100000&height=100000"),
        "uri:",
        "source.uri",
        "width=100000",
        "an integer from 1 to 8192",
    ),
    "held-out-frames": (
        edited("holdout_frames: 50 ", "holdout_frames: 90000 "),
        "holdout_frames",
        "calibration.holdout_frames",
        "90000 frames of 1x3x300x300 float32 would take 90.5 GiB",
        "at most 3976 frames or 4 GiB",
    ),
    "heartbeat-port": (
        EXAMPLE_TEXT + "service:\n  heartbeat_udp: host:99999\n",
        "heartbeat_udp",
        "service.heartbeat_udp",
        "'host:99999'",
        "from 1 to 65535",
    ),
    "boolean-cpu": (
        EXAMPLE_TEXT + "service:\n  cpu_affinity: [0, false]\n",
        "cpu_affinity",
        "service.cpu_affinity[1]",
        "false is a boolean",
        "from 0 to 1023",
    ),
}


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_a_bad_number_gets_one_line_naming_the_path_the_value_and_what_is_allowed(folder, case):
    text, marker, yaml_path, value, allowed = BAD[case]
    error = failure(folder, text)
    assert "\n" not in error.message and error.hint and "\n" not in error.hint
    assert f"p.yaml:{line_of(text, marker)}: {yaml_path}: " in error.message, error.message
    assert value in error.message, error.message
    assert "allowed: " in error.message and allowed in error.message, error.message
    assert "more problem" not in error.message, error.message


def test_the_replay_cap_says_how_to_do_without(folder):
    error = failure(folder, with_frames("1e8"))
    assert "run records" in error.message and "61 MiB" in error.message
    assert "leave replay.frames out" in error.hint


@pytest.mark.parametrize(
    ("written", "value"),
    [("1e3", 1000), ("1_000", 1000), ("1.0e+3", 1000), (str(MAX_REPLAY_FRAMES), MAX_REPLAY_FRAMES)],
)
def test_an_integer_may_be_written_as_any_whole_number(folder, written, value):
    path = folder / "p.yaml"
    path.write_text(with_frames(written))
    frames = load_pipeline(path).spec.source.replay.frames
    assert frames == value and type(frames) is int


def test_a_number_may_be_written_in_exponent_form(folder):
    # YAML 1.1 (PyYAML) reads 1e-1 as a string, YAML 1.2 as a float: both mean 0.1.
    path = folder / "p.yaml"
    path.write_text(edited("score_threshold: 0.3", "score_threshold: 1e-1"))
    assert load_pipeline(path).spec.postprocess.score_threshold == 0.1


def test_a_crop_inside_a_known_frame_loads(folder):
    path = folder / "p.yaml"
    path.write_text(with_crop("synthetic://boxes?width=640&height=480", "{x: 600, y: 400, width: 100, height: 100}"))
    assert load_pipeline(path).spec.preprocess.crop.x == 600  # runs past the edge: clipped when run, as before


def test_held_out_frames_under_the_cap_load(folder):
    path = folder / "p.yaml"
    path.write_text(edited("holdout_frames: 50 ", "holdout_frames: 3976 "))
    assert load_pipeline(path).spec.calibration.holdout_frames * 300 * 300 * 3 * 4 <= MAX_HELD_FRAMES_BYTES


def _numbers(schema: dict, at: str, defs: dict):
    """(path, schema) of every integer or number in a JSON schema."""
    if "$ref" in schema:
        yield from _numbers(defs[schema["$ref"].rsplit("/", 1)[1]], at, defs)
        return
    if schema.get("type") in ("integer", "number") and "const" not in schema and "enum" not in schema:
        yield at, schema
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        for i, member in enumerate(schema.get(key, [])):
            yield from _numbers(member, f"{at}[{i}]" if key == "prefixItems" else at, defs)
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            yield from _numbers(schema[key], f"{at}[]", defs)
    for name, member in schema.get("properties", {}).items():
        yield from _numbers(member, f"{at}.{name}" if at else name, defs)


def test_every_number_in_the_schema_has_a_documented_finite_range():
    schema = Pipeline.model_json_schema()
    found = dict(_numbers(schema, "", schema.get("$defs", {})))
    assert "source.replay.frames" in found and "preprocess.normalize.mean[0]" in found and len(found) > 60
    for path, number in found.items():
        low = number.get("minimum", number.get("exclusiveMinimum"))
        high = number.get("maximum", number.get("exclusiveMaximum"))
        assert low is not None and high is not None, f"{path} has no range: {number}"
        assert math.isfinite(low) and math.isfinite(high) and low < high, path
        assert number.get("description"), f"{path} has no description"
