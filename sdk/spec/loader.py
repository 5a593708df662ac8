"""Load a pipeline file once into frozen typed objects, or raise one clear ConfigError."""


import difflib
import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from sdk.errors import ConfigError
from sdk.spec.bounds import ERROR_TYPE
from sdk.spec.paths import confined_path
from sdk.spec.placeholders import find_placeholder
from sdk.spec.schema import Pipeline
from sdk.spec.yaml_source import YamlDocument, YamlPath, format_yaml_path, read_yaml

ONE_OF_REQUIRED = {"source": "sources"}  # top-level keys required unless their alternative is given


@dataclass(frozen=True)
class PipelineFile:
    """A validated pipeline and where it lives; relative paths resolve against its folder."""

    spec: Pipeline
    path: Path

    @property
    def folder(self) -> Path:
        return self.path.parent

    def resolve(self, relative: str, yaml_path: str) -> Path:
        return confined_path(self.folder, relative, where=f"{self.path}: {yaml_path}")

    @property
    def model_path(self) -> Path:
        return self.resolve(self.spec.model.path, "model.path")

    @property
    def reference_path(self) -> Path | None:
        """The original model an optimized one was made from (`model.reference`), or None."""
        return self.resolve(self.spec.model.reference, "model.reference") if self.spec.model.reference else None

    def source_file(self, camera: str | None = None) -> Path | None:
        """The file or folder a replay source reads (the first camera's unless named; a video, an image folder, an MCAP
        file, a rosbag2 folder), or None for live sources."""
        cameras = self.spec.cameras
        name = camera if camera is not None else next(iter(cameras))
        scheme, _, rest = cameras[name].uri.partition("://")
        if scheme in ("file", "images", "mcap", "rosbag2"):
            return self.resolve(rest.partition("?")[0], self.source_key(name))  # the file, without ?format=nv12, ?topic= and such
        return None

    def source_key(self, camera: str) -> str:
        """The YAML path of a camera's URI."""
        return f"sources.{camera}.uri" if self.spec.multi_camera else "source.uri"

    def calibration_source_file(self) -> Path | None:
        calibration = self.spec.calibration
        if calibration is None or calibration.source is None:
            return None
        return self.resolve(calibration.source.partition("://")[2], "calibration.source")

    def labels_file(self) -> Path | None:
        """The label file a classify or segment decoder names (decoder.labels), or None."""
        labels = getattr(self.spec.postprocess.decoder, "labels", None)
        return self.resolve(labels, "postprocess.decoder.labels") if labels is not None else None

    def class_names(self) -> tuple[str, ...]:
        """postprocess.classes, or the names the label file holds (read, and refused in one line, here)."""
        from sdk.spec.decoders import read_labels

        labels = self.labels_file()
        if labels is None:
            return self.spec.postprocess.classes
        return read_labels(labels, f"{self.path}: postprocess.decoder.labels")

    def plugin_folder(self) -> Path | None:
        """The folder a `kind: python` decoder imports its module from (decoder.path), or None."""
        folder = getattr(self.spec.postprocess.decoder, "path", None) if self.spec.postprocess.decoder.kind == "python" else None
        return self.resolve(folder, "postprocess.decoder.path") if folder is not None else None

    def cascade_files(self) -> list[tuple[Path, str]]:
        """The files the cascade steps read (models, character lists), with their YAML paths."""
        found = []
        for i, step in enumerate(self.spec.cascade):
            found.append((self.resolve(step.model.path, f"cascade[{i}].model.path"), f"cascade[{i}].model.path"))
            characters = getattr(step.decoder, "characters", None)
            if characters is not None:
                found.append((self.resolve(characters, f"cascade[{i}].decoder.characters"), f"cascade[{i}].decoder.characters"))
        return found

    def check_files(self) -> None:
        cameras = tuple((self.source_file(name), self.source_key(name)) for name in self.spec.cameras)
        files = (
            (self.model_path, "model.path"),
            (self.reference_path, "model.reference"),
            *cameras,
            (self.calibration_source_file(), "calibration.source"),
            (self.labels_file(), "postprocess.decoder.labels"),
            (self.plugin_folder(), "postprocess.decoder.path"),
            *self.cascade_files(),
        )
        for file, yaml_path in files:
            if file is not None and not file.exists():
                raise ConfigError(
                    f"{self.path}: {yaml_path}: {file} does not exist",
                    hint="paths are relative to the pipeline file's folder",
                )


def load_pipeline(path: str | Path, *, check_files: bool = True) -> "PipelineFile":
    path = Path(path)
    document = read_yaml(path)
    left = find_placeholder(document.data)
    if left is not None:  # `sdk init` could not tell this value from the model: say which and why, before any type error
        where, reason = left
        raise ConfigError(
            f"{document.where(where)}: still the placeholder `sdk init` wrote ({reason}); allowed: the model's real value",
            hint="fill in every FILL-IN value (the comments in the file say where to find each), then run again",
        )
    try:
        spec = Pipeline.model_validate(document.data)
    except ValidationError as exc:
        raise config_error(document, exc) from None
    pipeline = PipelineFile(spec=spec, path=path.resolve())
    # Paths are confined even when files are not checked (on the device).
    pipeline.model_path  # noqa: B018
    pipeline.reference_path  # noqa: B018
    for camera in spec.cameras:
        pipeline.source_file(camera)
    pipeline.calibration_source_file()
    pipeline.labels_file()
    if check_files:
        pipeline.check_files()
        pipeline.class_names()  # a label file that names nothing is refused at load, not at the first frame
    _check_budget_classes(document, pipeline, check_files)
    return pipeline


def _check_budget_classes(document: YamlDocument, pipeline: PipelineFile, check_files: bool) -> None:
    """budgets.accuracy.min_recall_at_precision is keyed by the model's class names (from a label file only when files
    are read)."""
    from sdk.spec.budgets import RECALL_AT_PRECISION

    accuracy = pipeline.spec.budgets.accuracy
    wanted = accuracy.min_recall_at_precision if accuracy is not None else {}
    classes = pipeline.class_names() if check_files else pipeline.spec.postprocess.classes
    if not wanted or not classes:
        return
    for name in wanted:
        if name not in classes:
            close = difflib.get_close_matches(name, classes, n=1, cutoff=0.6)
            suggestion = f"; did you mean {close[0]!r}?" if close else ""
            shown = ", ".join(classes[:12]) + (f" and {len(classes) - 12} more" if len(classes) > 12 else "")
            raise ConfigError(
                f"{document.where(('budgets', 'accuracy', RECALL_AT_PRECISION, name))}: {name!r} is not a class of the model{suggestion} "
                f"allowed: {shown}",
                hint="the keys are the model's class names (postprocess.classes or the decoder's label file)",
            )


def config_error(document: YamlDocument, exc: ValidationError, root: type[BaseModel] = Pipeline) -> ConfigError:
    errors = exc.errors(include_url=False)
    first = errors[0]
    if first["type"] == "missing":
        # A misspelt required key is both missing and unknown: the unknown one says "did you mean".
        first = next((e for e in errors if e["type"] == "extra_forbidden" and tuple(e["loc"][:-1]) == tuple(first["loc"][:-1])), first)
    context = first.get("ctx", {})
    yaml_path = _yaml_path(document.data, tuple(first["loc"]))
    if first["type"] == ERROR_TYPE and context.get("path") is not None:
        yaml_path = tuple(context["path"])  # a cross-field check names the key it is about
        found = _yaml_path(document.data, tuple(first["loc"]))
        if yaml_path[:2] == ("postprocess", "decoder") and found[:1] == ("cascade",) and len(found) >= 2:
            yaml_path = (*found[:2], *yaml_path[1:])  # a decoder check (sdk.spec.ssd) that fired in a cascade step's decoder
    where = document.where(yaml_path)
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    if first["type"] == ERROR_TYPE:
        # Bounds errors say the value and what is allowed themselves (sdk.spec.bounds).
        return ConfigError(f"{where}: {context['message']}{more}", hint=context.get("hint"))
    if first["type"] == "extra_forbidden":
        key = yaml_path[-1]
        allowed = _allowed_keys(root, yaml_path[:-1], document.data)
        close = difflib.get_close_matches(str(key), allowed, n=1, cutoff=0.6)
        suggestion = f"; did you mean {close[0]!r}?" if close else ""
        missing = {_yaml_path(document.data, tuple(e["loc"])) for e in errors if e["type"] == "missing"}
        # `source` is required unless `sources` is given (one of the two): a misspelt one is missing too.
        top = document.data if isinstance(document.data, dict) else {}
        missing |= {(key,) for key, other in ONE_OF_REQUIRED.items() if not yaml_path[:-1] and key not in top and other not in top}
        if close and (*yaml_path[:-1], close[0]) in missing:
            suggestion += f" ({close[0]!r} is required and missing)"
        return ConfigError(
            f"{where}: unknown key {key!r}{suggestion} allowed here: {', '.join(allowed)}{more}",
            hint="remove or rename the key",
        )
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "missing":
        return ConfigError(f"{where}: required key is missing{more}", hint="add the key; docs/reference/pipeline.md lists every key")
    got = first.get("input")
    shown = "" if isinstance(got, (dict, list)) or got is None else f" (got {got!r})"
    expected = re.findall(r"'([^']*)'", str(first.get("ctx", {}).get("expected", "")))
    close = difflib.get_close_matches(str(got), expected, n=1, cutoff=0.5) if expected else []
    suggestion = f"; did you mean {close[0]!r}?" if close else ""
    return ConfigError(f"{where}: {message}{shown}{suggestion}{more}")


def _yaml_path(data: Any, loc: tuple[Any, ...]) -> YamlPath:
    """pydantic's location minus the discriminator tags it inserts for tagged unions."""
    path: list[Any] = []
    node = data
    for part in loc:
        if part == "[key]":
            continue  # pydantic's marker for "the key itself is wrong"; the path already names it
        if isinstance(node, dict) and part not in node and node.get("kind") == part:
            continue  # the union member pydantic tried, not a key of the file
        path.append(part)
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
        else:
            node = None
    return tuple(path)


def _allowed_keys(root: type[BaseModel], at: YamlPath, data: Any) -> list[str]:
    model: Any = root
    node = data
    for part in at:
        model = _member_type(model, part, node)
        node = node.get(part) if isinstance(node, dict) else node[part] if isinstance(node, list) else None
        if model is None:
            return []
    model = _pick_model(model, node)
    return list(model.model_fields) if model is not None else []


def _member_type(model: Any, part: Any, node: Any) -> Any:
    model = _pick_model(model, node)
    if model is None:
        return None
    if isinstance(model, type) and issubclass(model, BaseModel):
        field = model.model_fields.get(part)
        return field.annotation if field else None
    origin = typing.get_origin(model)
    args = typing.get_args(model)
    if origin in (tuple, list) and args:
        return args[0]
    if origin is dict and len(args) == 2:
        return args[1]
    return None


def _pick_model(annotation: Any, node: Any) -> Any:
    """Strip Optional/Annotated and choose the union member a YAML mapping's `kind` selects."""
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    args = typing.get_args(annotation)
    if args and typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = [a for a in args if a is not type(None)]
        members = [_pick_model(a, node) for a in members]
        if len(members) == 1:
            return members[0]
        models = [m for m in members if isinstance(m, type) and issubclass(m, BaseModel)]
        if len(models) == 1 and isinstance(node, dict):
            return models[0]  # a name or a mapping (postprocess.decoder.anchors): a mapping is the model
        kind = node.get("kind") if isinstance(node, dict) else None
        for member in members:
            if isinstance(member, type) and issubclass(member, BaseModel):
                kind_field = member.model_fields.get("kind")
                if kind_field is not None and kind in typing.get_args(kind_field.annotation):
                    return member
        return None
    return annotation


__all__ = ["PipelineFile", "format_yaml_path", "load_pipeline"]
