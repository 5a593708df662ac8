"""`sdk init MODEL.onnx [--source URI]`: a commented pipeline file for a model, written beside it.

The model's inputs and outputs say which family it is (tools/models/families.py); the file names its tensors,
sizes, layout and classes, and runs with `deploy --target local` as written, except where the model cannot
tell a value: those are FILL-IN placeholders with the reason, and the file is refused at load until they are
filled in. An existing file is never overwritten.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from sdk.errors import ConfigError
from sdk.runtime.statistics import frames_needed
from sdk.sources.uri import RECORDING_SCHEMES
from sdk.spec.placeholders import PREFIX
from tools.models.families import Recognised, recognise
from tools.models.init_cascade import recogniser_alone, step, step_name
from tools.models.source_facts import DEFAULT_FPS, SourceFacts, source_facts

WARMUP_FRAMES = 10
RUN_FRAMES = WARMUP_FRAMES + frames_needed(0.99)  # enough for the written p99 budget to be backed (309)
DEFAULT_SOURCE = f"synthetic://boxes?width=640&height=480&frames={2 * RUN_FRAMES}"


@dataclass(frozen=True)
class InitResult:
    path: Path
    recognised: Recognised
    fill_in: list[tuple[str, str]]  # (YAML key, why) still to be filled in
    facts: SourceFacts | None = None  # what the source holds (frames, rate), as read when the file was written
    loops: bool = False  # the file plays the source in a loop (a still, or a clip shorter than RUN_FRAMES)


def _scalar(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (int,)):
        return str(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_scalar(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_scalar(v)}" for k, v in value.items()) + "}"
    text = str(value)
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", text) and text.lower() not in ("true", "false", "null", "yes", "no", "on", "off", "y", "n"):
        return text
    return json.dumps(text)  # a JSON string is a YAML string


def _block(mapping: dict, indent: int, lines: list[str], fill: list[tuple[str, str]], at: str) -> None:
    pad = " " * indent
    for key, value in mapping.items():
        here = f"{at}.{key}" if at else str(key)
        if isinstance(value, dict) and value:
            lines.append(f"{pad}{key}:")
            _block(value, indent + 2, lines, fill, here)
        elif isinstance(value, str) and value.startswith(PREFIX):
            fill.append((here, value[len(PREFIX) :]))
            lines.append(f"{pad}{_yaml_key(key)}: {_scalar(value)}  # FILL IN: the model cannot tell (the value says why)")
        else:
            lines.append(f"{pad}{_yaml_key(key)}: {_scalar(value)}")


def _yaml_key(key) -> str:
    text = str(key)
    return text if text.replace("_", "").isalnum() else json.dumps(text)


def _inside(model: Path, folder: Path, output: Path) -> str:
    """A model's path relative to the pipeline file's folder, which must hold it."""
    try:
        return model.resolve().relative_to(folder).as_posix()
    except ValueError:
        raise ConfigError(
            f"{model} is outside {folder}, the folder of the pipeline file {output}",
            hint="a pipeline's files live in its folder (they travel with the release): write the file beside the model",
        ) from None


def _relative_source(source: str, folder: Path) -> str:
    scheme, sep, rest = source.partition("://")
    if not sep or scheme not in ("file", "images", *RECORDING_SCHEMES):
        return source
    rest, question, query = rest.partition("?")  # mcap://drive.mcap?topic=...: the path, then its parameters
    path = Path(rest)
    if path.is_absolute() or (Path.cwd() / path).exists():
        full = (path if path.is_absolute() else Path.cwd() / path).resolve()
        if folder.resolve() not in full.parents:
            raise ConfigError(
                f"--source {source}: {full} is outside {folder.resolve()}, the folder of the pipeline file",
                hint="a pipeline's files live in its folder (they travel with the release): copy the clip there",
            )
        return f"{scheme}://{full.relative_to(folder.resolve()).as_posix()}{question}{query}"
    return source


def _check_source(uri: str, given: str | None, folder: Path) -> None:
    """--source as `sdk check` judges it: a scheme the runtime reads, its parameters in range, and a recorded source
    (file://, images://) that exists, relative to the pipeline file's folder. Refused before anything is written."""
    from pydantic import ValidationError

    from sdk.spec.source import Source

    if given is None:
        return
    try:
        Source(uri=uri)
    except ValidationError as exc:
        why = str(exc.errors()[0].get("msg", exc)).removeprefix("Value error, ")
        raise ConfigError(f"--source {given}: {why}", hint="e.g. --source file://clip.mp4 (beside the pipeline file) or v4l2:///dev/video0") from None
    scheme, _, rest = uri.partition("://")
    path = folder / rest.partition("?")[0]
    if scheme in ("file", "images") and not path.exists():
        raise ConfigError(
            f"--source {given}: {path} does not exist (a recorded source is read relative to the pipeline file's folder, {folder})",
            hint="copy the clip beside the pipeline file, or give its path",
        )


def _size_a_text_detector(r: Recognised, frame: tuple[int, int] | None) -> None:
    """A DB text detector of dynamic size runs at the source's size as PaddleOCR's DetResizeForTest makes it (the longer
    side at most 960, both sides multiples of 32), where the source's frame size is known."""
    if r.family != "text-detector" or frame is None or (isinstance(r.width, int) and isinstance(r.height, int)):
        return
    ratio = min(1.0, 960 / max(frame))
    r.width, r.height = (max(32, round(int(side * ratio) / 32) * 32) for side in frame)
    r.notes.append(f"sized for the source's {frame[0]}x{frame[1]} frames as PaddleOCR's detector resizes: longer side at most 960, multiples of 32")


def _axes(r: Recognised) -> list[tuple[str | None, int]]:
    """The image input's dimensions after the batch: (resize key, None) for height and width, (None, channels) for channels."""
    channels = r.image.shape[1] if r.layout == "nchw" else r.image.shape[3]
    channels = channels if isinstance(channels, int) else 3
    return [(None, channels), ("height", 0), ("width", 0)] if r.layout == "nchw" else [("height", 0), ("width", 0), (None, channels)]


def render(
    recognised: Recognised, model_rel: str, source: str, name: str, facts: SourceFacts | None = None, steps: list[dict] = ()
) -> tuple[str, list[tuple[str, str]]]:
    facts = facts or SourceFacts(DEFAULT_FPS, None, None)
    r, fill = recognised, []
    lines = [
        f"# Written by `sdk init` for {model_rel}: {r.summary}.",
        f"# Every key: docs/reference/pipeline.md. Check it: sdk check THIS_FILE. Run: deploy --target local THIS_FILE --frames {RUN_FRAMES}",
    ]
    if r.notes:
        lines += [f"# Note: {note}" for note in r.notes]
    lines += ["version: 1", f"name: {name}", "", "source:", f"  uri: {_scalar(source)}"]
    lines += _replay_lines(source, facts)
    if source == DEFAULT_SOURCE:
        lines.append("  # generated frames, so that the file runs anywhere: give a camera or a clip (file://clip.mp4, v4l2:///dev/video0)")
    resize = _preprocess_lines(r, lines, fill)
    _model_lines(r, resize, model_rel, lines, fill)
    _postprocess_lines(r, lines, fill, bool(steps))
    if steps:
        lines += ["", "cascade:  # models run on the crops of the detections: docs/guides/models.md, section Cascades"]
        for i, step in enumerate(steps):
            lines.append(f"  - name: {step['name']}  # the key of its results in detections.jsonl")
            _block({k: v for k, v in step.items() if k != "name"}, 4, lines, fill, f"cascade[{i}]")
    _output_lines(r, facts, lines)
    return "\n".join(lines), fill


def loops(source: str, facts: SourceFacts) -> bool:
    """A still image, or a recording with fewer frames than a backed p99 needs: played again from its start, so that
    `deploy --frames RUN_FRAMES` (and the health check's frames) run as written."""
    scheme = source.partition("://")[0]
    return scheme in ("file", "images", *RECORDING_SCHEMES) and facts.frames is not None and facts.frames < RUN_FRAMES


def _replay_lines(source: str, facts: SourceFacts) -> list[str]:
    recorded = source.partition("://")[0] in RECORDING_SCHEMES
    if not loops(source, facts):
        if recorded:
            return ["  replay: {pace: recorded}  # each frame when its recorded stamp says (null rate_fps and pace rate: as fast as it goes)"]
        return []
    replay = "{pace: recorded, loop: true}" if recorded else "{loop: true}"
    if facts.still:
        why = f"a still image: the same frame again and again, as fast as the pipeline goes ({RUN_FRAMES} frames measure it)"
    else:
        why = f"its {facts.frames} frame(s) are fewer than the {RUN_FRAMES} a backed p99 needs: played again from the start"
    return [f"  replay: {replay}  # {why}"]


def _preprocess_lines(r: Recognised, lines: list[str], fill: list[tuple[str, str]]) -> dict:
    pre = r.preprocess
    resize = {"width": r.width, "height": r.height, "mode": pre.get("resize_mode", "stretch")}
    if "coordinates" in pre:
        resize["coordinates"] = pre["coordinates"]
    if resize["mode"] == "letterbox":
        resize["pad_value"] = pre.get("pad_value", 114)
        if pre.get("align", "center") != "center":
            resize["align"] = pre["align"]
        if pre.get("content", "round") != "round":
            resize["content"] = pre["content"]
    dtype = r.image.dtype if r.image.dtype in ("float32", "float16", "uint8") else "float32"
    lines += ["", "preprocess:", f"  # the model's input {r.image.name!r} {list(r.image.shape)} {r.image.dtype}"]
    section: dict = {"resize": resize, "color": pre.get("color", "rgb")}
    if dtype != "uint8":
        section["normalize"] = pre.get("normalize", {})
    section.update({"layout": r.layout, "dtype": dtype})
    for key in ("width", "height"):
        if not isinstance(resize[key], int):
            resize[key] = PREFIX + f"the model's input {key} is dynamic ({resize[key]!r}): the size it was trained at"
    _block(section, 2, lines, fill, "preprocess")
    return resize


def _model_lines(r: Recognised, resize: dict, model_rel: str, lines: list[str], fill: list[tuple[str, str]]) -> None:
    model: dict = {"path": model_rel}
    if r.prepare is None and not r.image.static:  # a dynamic batch or size: the runtime binds static buffers once
        sized = all(isinstance(resize[k], int) for k in ("width", "height"))
        if sized:
            image = [1, *(resize[k] if k else c for k, c in _axes(r))]
        else:  # one more placeholder, listed like the others: the same sizes as preprocess.resize's
            template = ", ".join(["1", *(k if k else str(c) for k, c in _axes(r))])
            why = f"the static shape of the image input {r.image.name!r} {list(r.image.shape)}: [{template}] with preprocess.resize's sizes"
            image = PREFIX + why
        shapes = {r.image.name: image}
        for t in r.extra_inputs:  # a constant input's static shape (the cut keeps it an input)
            shapes[t.name] = list(t.shape) if t.static else PREFIX + f"the static shape of the constant input {t.name!r} {list(t.shape)}"
        r.prepare = {"inputs": shapes, "outputs": [o.name for o in r.outputs]}
    if r.prepare is not None:  # the convolutional core only (TensorRT and DLA cannot take the graph's Loops and NMS)
        model["prepare"] = r.prepare
    if r.extra_inputs:
        model["inputs"] = {
            t.name: PREFIX + f"the constant value of the extra input {t.name!r} {list(t.shape)} {t.dtype} (e.g. the input size or a scale factor)"
            for t in r.extra_inputs
        }
    model.update({"backend": "auto"})
    lines += ["", "model:"]
    _block(model, 2, lines, fill, "model")


def _postprocess_lines(r: Recognised, lines: list[str], fill: list[tuple[str, str]], cascaded: bool) -> None:
    lines += ["", "postprocess:", "  decoder:"]
    _block(r.decoder, 4, lines, fill, "postprocess.decoder")
    kind = r.decoder.get("kind")
    _block({"classes": r.classes}, 2, lines, fill, "postprocess")
    chosen = dict(r.thresholds or family_thresholds(kind))
    source = chosen.pop("source")
    for key, value in chosen.items():
        lines.append(f"  {key}: {_scalar(value)}  # {source}")
    if kind not in ("classify", "segment"):
        lines.append("  max_detections: 100")
    if kind not in ("classify", "segment") and not cascaded:  # detections: a second model can run on their crops
        lines += [
            "",
            "# cascade: models run on the crops of these detections (person -> face, plate -> characters), each with its",
            "# own preprocess and a decoder of kind classify, ctc or ssd: docs/guides/models.md, section Cascades.",
        ]


def _output_lines(r: Recognised, facts: SourceFacts, lines: list[str]) -> None:
    kind = r.decoder.get("kind")
    lines += ["", "sinks:", "  - {kind: jsonl, path: detections.jsonl}"]
    if kind == "segment":
        lines.append("  - {kind: mask, path: masks}  # masks/NNNNNN.png: an 8-bit PNG of class indices per frame")
    if kind != "classify":
        lines.append("  - {kind: video, path: annotated.mp4}  # the frames with what was found drawn on them")
    fps = facts.fps
    period = round(1000.0 / fps, 1)
    if facts.still:
        whose = f"# A still image has no frame rate: a {fps:g} fps camera's budgets (set your camera's rate):"
    elif not facts.fps_stated:
        whose = f"# The source states no frame rate: a {fps:g} fps camera's budgets (set your camera's rate):"
    else:
        whose = f"# A {fps:g} fps camera's budgets:"
    lines += [
        "",
        f"{whose} the median within one frame period, the 99th percentile within one and a half.",
        f"# A p99 is backed at 95 % confidence from {frames_needed(0.99)} measured frames on: run at least {RUN_FRAMES} (warm-up included).",
        "budgets:",
        f"  warmup_frames: {WARMUP_FRAMES}  # the first frames (model load, caches) are left out of the statistics",
        f"  end_to_end: {{p50_ms: {period:g}, p99_ms: {round(1500.0 / fps, 1):g}}}",
        "",
    ]


def family_thresholds(kind: str | None) -> dict:
    """The thresholds written where the family has none of its own (Recognised.thresholds overrides them)."""
    if kind == "classify":
        return {"score_threshold": 0.0, "source": "every class reported (top_k of them)"}
    if kind == "segment":
        return {"score_threshold": 0.3, "source": "not used by masks"}
    if kind == "nms_inside":
        return {"score_threshold": 0.3, "iou_threshold": 0.6, "source": "the model ran its own NMS: the score filters its output; IoU unused"}
    return {"score_threshold": 0.3, "iou_threshold": 0.6, "source": "a common start; the model's own code may use others"}


def init_pipeline(model: Path, *, source: str | None = None, output: Path | None = None, cascade: list[Path] = ()) -> InitResult:
    model = Path(model)
    if not model.is_file():
        raise ConfigError(f"{model}: no such model file", hint="give the path of an .onnx file")
    output = Path(output) if output is not None else model.with_suffix(".yaml")
    if output.exists():
        raise ConfigError(f"{output} exists; sdk init never overwrites a file", hint="remove it or give another --output")
    from tools.output_paths import check_output_file

    check_output_file(output, "--output", [(model, "the model"), *((Path(c), "a cascade model") for c in cascade)])  # before any work
    folder = output.resolve().parent
    model_rel = _inside(model, folder, output)
    recognised = recognise(model)
    if recognised.family == "text-recognizer":
        raise recogniser_alone(model, recognised)
    steps: list[dict] = []
    for extra in cascade:
        extra = Path(extra)
        if not extra.is_file():
            raise ConfigError(f"--cascade {extra}: no such model file", hint="give the path of an .onnx file beside the first model")
        step_model = recognise(extra)
        steps.append(
            step(
                step_model,
                extra,
                _inside(extra, folder, output),
                step_name(step_model, extra, {s["name"] for s in steps}),
                recognised,
                recognised.thresholds.get("score_threshold", 0.5),
            )
        )
    name = "".join(c if c.isalnum() or c in "._-" else "-" for c in output.stem).lstrip("._-")[:64] or "pipeline"
    uri = _relative_source(source or DEFAULT_SOURCE, folder)
    _check_source(uri, source, folder)
    facts = source_facts(uri, folder)
    _size_a_text_detector(recognised, facts.size)
    text, fill = render(recognised, model_rel, uri, name, facts, steps)
    partial = output.with_name(f".{output.name}.partial")
    try:
        partial.write_text(text)
        os.link(partial, output)  # fails if the file appeared meanwhile: never overwrite
    except FileExistsError:
        raise ConfigError(f"{output} exists; sdk init never overwrites a file", hint="remove it or give another --output") from None
    except OSError as exc:  # the disk filled since the check
        raise ConfigError(f"--output {output}: cannot be written ({exc.strerror or exc})", hint="free space or give another --output") from None
    finally:
        partial.unlink(missing_ok=True)
    return InitResult(output, recognised, fill, facts, loops(uri, facts))


__all__ = ["DEFAULT_SOURCE", "RUN_FRAMES", "InitResult", "family_thresholds", "init_pipeline", "render"]
