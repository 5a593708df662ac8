"""`sdk init DETECTOR.onnx --cascade MODEL.onnx`: the `cascade:` steps of a pipeline file, one per model run on the
crops of the detector's boxes (docs/guides/models.md, section Cascades).

A CTC text recogniser becomes a `ctc` step (its character list written beside it from the model's own metadata where
it carries one, as PaddleOCR's do); a classifier a `classify` step. Anything else is refused with what it was taken for.
What the model cannot tell is a FILL-IN placeholder, listed like the first model's.
"""

from __future__ import annotations

import re
from pathlib import Path

from sdk.errors import ConfigError
from tools.models.tensors import Recognised

STEP_FAMILIES = ("text-recognizer", "classifier")


def recogniser_alone(model: Path, recognised: Recognised) -> ConfigError:
    """A recogniser given as the first model: it reads crops, so it is offered as a cascade step."""
    return ConfigError(
        f"{model}: {recognised.summary}: it reads crops of text lines, so it runs as a cascade step after a text detector, "
        "not as a pipeline's first model",
        hint=f"sdk init DETECTOR.onnx --cascade {model.name} (DETECTOR: a text detector such as PaddleOCR's, in the same folder)",
    )


def step_name(recognised: Recognised, model: Path, taken: set[str]) -> str:
    base = "text" if recognised.family == "text-recognizer" else re.sub(r"[^a-z0-9_]", "_", model.stem.lower()).strip("_") or "step"
    base = base if base[0].isalpha() else f"s_{base}"
    name, n = base[:32], 2
    while name in taken:
        name, n = f"{base[:29]}_{n}", n + 1
    return name


def write_characters(recognised: Recognised, model: Path) -> str:
    """The model's symbols, one a line, in `MODEL.characters.txt` beside it (kept when it already holds them)."""
    path = model.with_name(f"{model.stem}.characters.txt")
    text = "".join(f"{c}\n" for c in recognised.characters or ())
    if path.exists() and path.read_text(encoding="utf-8") != text:
        raise ConfigError(f"{path} exists and holds other characters; sdk init never overwrites a file", hint="remove it or rename the model")
    if not path.exists():
        path.write_text(text, encoding="utf-8")
    return path.name


def step(recognised: Recognised, model: Path, model_rel: str, name: str, parent: Recognised, min_score: float) -> dict:
    """One step's mapping (placeholders kept as they are: the renderer lists them)."""
    if recognised.family not in STEP_FAMILIES:
        raise ConfigError(
            f"--cascade {model}: {recognised.summary}; a cascade step is a text recogniser (CTC) or a classifier",
            hint="a detector on the crops is a step of kind ssd: write it by hand (docs/guides/models.md, section Cascades)",
        )
    pre = recognised.preprocess
    resize = {"width": recognised.width, "height": recognised.height, "mode": pre.get("resize_mode", "letterbox")}
    if resize["mode"] == "letterbox":
        resize["pad_value"] = pre.get("pad_value", 114)
    for key in ("width", "height"):
        if not isinstance(resize[key], int):
            from sdk.spec.placeholders import PREFIX

            resize[key] = PREFIX + f"the crop size the model reads ({key} of its input is dynamic: the size it was trained at)"
    preprocess = {"resize": resize, "color": pre.get("color", "rgb"), "normalize": pre.get("normalize", {})}
    if recognised.layout != "nchw":
        preprocess["layout"] = recognised.layout
    if recognised.family == "text-recognizer":
        decoder = dict(recognised.decoder)
        if recognised.characters:
            decoder = {"kind": "ctc", "characters": write_characters(recognised, model), "space": decoder["space"]}
    else:
        decoder = {"kind": "classify", "labels": recognised.classes, "activation": recognised.decoder["activation"], "top_k": 1}
    takes = {"min_score": min_score, "max_per_frame": 8}
    if parent.family == "text-detector":
        takes = {"classes": ["text"], **takes}
    return {
        "name": name,
        "model": {"path": model_rel},
        "takes": takes,
        "crop": {"padding": 0.0, "min_size": 4},
        "preprocess": preprocess,
        "decoder": decoder,
    }


__all__ = ["STEP_FAMILIES", "recogniser_alone", "step", "step_name"]
