"""`sdk init MODEL.onnx [--source URI]`: a commented pipeline file for a model, written beside it.

The model's inputs and outputs say which family it is (tools/model_families.py); the file names its tensors,
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
from sdk.spec.placeholders import PREFIX
from tools.model_families import Recognised, recognise

DEFAULT_SOURCE = "synthetic://boxes?width=640&height=480&frames=300"


@dataclass(frozen=True)
class InitResult:
    path: Path
    recognised: Recognised
    fill_in: list[tuple[str, str]]  # (YAML key, why) still to be filled in


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
            lines.append(f"{pad}{key}: {_scalar(value)}  # FILL IN: the model cannot tell (the value says why)")
        else:
            lines.append(f"{pad}{_yaml_key(key)}: {_scalar(value)}")


def _yaml_key(key) -> str:
    text = str(key)
    return text if text.replace("_", "").isalnum() else json.dumps(text)


def _relative_source(source: str, folder: Path) -> str:
    scheme, sep, rest = source.partition("://")
    if not sep or scheme not in ("file", "images"):
        return source
    path = Path(rest)
    if path.is_absolute() or (Path.cwd() / path).exists():
        full = (path if path.is_absolute() else Path.cwd() / path).resolve()
        if folder.resolve() not in full.parents:
            raise ConfigError(
                f"--source {source}: {full} is outside {folder.resolve()}, the folder of the pipeline file",
                hint="a pipeline's files live in its folder (they travel with the release): copy the clip there",
            )
        return f"{scheme}://{full.relative_to(folder.resolve()).as_posix()}"
    return source


def _axes(r: Recognised) -> list[tuple[str | None, int]]:
    """The image input's dimensions after the batch: (resize key, None) for height and width, (None, channels) for channels."""
    channels = r.image.shape[1] if r.layout == "nchw" else r.image.shape[3]
    channels = channels if isinstance(channels, int) else 3
    return [(None, channels), ("height", 0), ("width", 0)] if r.layout == "nchw" else [("height", 0), ("width", 0), (None, channels)]


def render(recognised: Recognised, model_rel: str, source: str, name: str) -> tuple[str, list[tuple[str, str]]]:
    r, fill = recognised, []
    lines = [
        f"# Written by `sdk init` for {model_rel}: {r.summary}.",
        "# Every key: docs/reference/pipeline.md. Run: deploy --target local THIS_FILE --frames 30",
    ]
    if r.notes:
        lines += [f"# Note: {note}" for note in r.notes]
    lines += ["version: 1", f"name: {name}", "", "source:", f"  uri: {_scalar(source)}"]
    if source == DEFAULT_SOURCE:
        lines.append("  # generated frames, so that the file runs anywhere: give a camera or a clip (file://clip.mp4, v4l2:///dev/video0)")
    pre = r.preprocess
    resize = {"width": r.width, "height": r.height, "mode": pre.get("resize_mode", "stretch")}
    if "coordinates" in pre:
        resize["coordinates"] = pre["coordinates"]
    if resize["mode"] == "letterbox":
        resize["pad_value"] = pre.get("pad_value", 114)
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
    model: dict = {"path": model_rel}
    if r.prepare is None and not r.image.static:  # a dynamic batch or size: the runtime binds static buffers once
        shapes = {r.image.name: [1, *(resize[k] if k else c for k, c in _axes(r))]}
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
    lines += ["", "postprocess:", "  decoder:"]
    _block(r.decoder, 4, lines, fill, "postprocess.decoder")
    kind = r.decoder.get("kind")
    _block({"classes": r.classes}, 2, lines, fill, "postprocess")
    if kind == "classify":
        lines.append("  score_threshold: 0.0  # classes below it are not reported")
    elif kind == "segment":
        lines.append("  score_threshold: 0.3")
    else:
        lines += ["  score_threshold: 0.3", "  iou_threshold: 0.6" + ("  # not used: the model runs its own NMS" if kind == "nms_inside" else "")]
        lines.append("  max_detections: 100")
    lines += ["", "sinks:", "  - {kind: jsonl, path: detections.jsonl}"]
    if kind == "segment":
        lines.append("  - {kind: mask, path: masks}  # masks/NNNNNN.png: an 8-bit PNG of class indices per frame")
    if kind not in ("classify", "segment"):  # detections: a second model can run on their crops
        lines += [
            "",
            "# cascade: models run on the crops of these detections (person -> face, plate -> characters), each with its",
            "# own preprocess and a decoder of kind classify, ctc or ssd: docs/guides/models.md, section Cascades.",
        ]
    lines += [
        "",
        "# budgets: without any, a run is INCONCLUSIVE (exit 4). For example:",
        "# budgets:",
        "#   end_to_end: {p99_ms: 50.0}",
        "#   stages: {infer: {p99_ms: 40.0}}",
        "",
    ]
    return "\n".join(lines), fill


def init_pipeline(model: Path, *, source: str | None = None, output: Path | None = None) -> InitResult:
    model = Path(model)
    if not model.is_file():
        raise ConfigError(f"{model}: no such model file", hint="give the path of an .onnx file")
    output = Path(output) if output is not None else model.with_suffix(".yaml")
    if output.exists():
        raise ConfigError(f"{output} exists; sdk init never overwrites a file", hint="remove it or give another --output")
    folder = output.resolve().parent
    try:
        model_rel = model.resolve().relative_to(folder).as_posix()
    except ValueError:
        raise ConfigError(
            f"{model} is outside {folder}, the folder of the pipeline file {output}",
            hint="a pipeline's files live in its folder (they travel with the release): write the file beside the model",
        ) from None
    recognised = recognise(model)
    name = "".join(c if c.isalnum() or c in "._-" else "-" for c in output.stem).lstrip("._-")[:64] or "pipeline"
    text, fill = render(recognised, model_rel, _relative_source(source or DEFAULT_SOURCE, folder), name)
    partial = output.with_name(output.name + ".partial")
    partial.write_text(text)
    try:
        os.link(partial, output)  # fails if the file appeared meanwhile: never overwrite
    except FileExistsError:
        raise ConfigError(f"{output} exists; sdk init never overwrites a file", hint="remove it or give another --output") from None
    finally:
        partial.unlink()
    return InitResult(output, recognised, fill)


__all__ = ["DEFAULT_SOURCE", "InitResult", "init_pipeline", "render"]
