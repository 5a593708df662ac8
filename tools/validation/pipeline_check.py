"""`sdk check PIPELINE [--target T] [--frames N]`: what a deploy would find wrong with a pipeline file, without a run.

In order: the file (schema, ranges, paths, sinks: the loader's checks); the model, prepared as a deploy prepares it
(cached); the decoder and the cascade steps bound to the prepared model's real tensors through ONNX Runtime on the CPU
(names, shapes, class counts, grids: the runtime's own checks, with no frame read); the frames the source gives; whether
each budget can be judged on them (a p99 needs 299 measured frames past the warm-up for a 95 % bound, a p99.9 2995);
and with --target, what this host can see of the target without connecting (tools/connect/local_checks.py).
A problem makes the exit code 1; warnings and notes do not.
"""

from __future__ import annotations

import math
from pathlib import Path

from sdk.errors import SdkError
from tools.connect.check_target import NOTE, OK, WARN, CheckResult

PROBLEM = "problem"  # the run cannot succeed or cannot be judged as the file stands
QUANTILES = {"p50_ms": 0.5, "p99_ms": 0.99, "p999_ms": 0.999, "p9999_ms": 0.9999}


def check_pipeline(
    path: Path, target: str | None = None, frames: int | None = None, labels: Path | None = None, images: Path | None = None
) -> CheckResult:
    from sdk.spec import load_pipeline

    result = CheckResult(str(path), f"target {target}" if target else "no target given")
    try:
        pipeline = load_pipeline(path)
    except SdkError as exc:
        result.add(PROBLEM, "pipeline file", exc.message, exc.hint)
        return result
    spec = pipeline.spec
    sinks = ", ".join(f"{s.kind} {getattr(s, 'path', None) or ''}".strip() for s in spec.sinks)
    result.add(OK, "pipeline file", f"valid: schema, ranges and paths; sinks {sinks}")
    _model_and_decoder(result, pipeline)
    _labels(result, pipeline, labels, images)
    available = _frames(result, pipeline, frames)
    _budgets(result, spec.budgets, available, len(spec.cameras))
    if target is not None:
        _target(result, target, spec)
    return result


def _model_and_decoder(result: CheckResult, pipeline) -> None:
    from sdk.backends import create_backend
    from sdk.cascade import create_cascade
    from sdk.postprocess.stage import create_decoding
    from sdk.preprocess.stage import create_preprocessing
    from sdk.runtime.cameras import batch_slots
    from sdk.runtime.constants import split_inputs
    from tools.models.prepare import PrepareModel
    from tools.state import cache_dir

    try:
        artifacts = PrepareModel(pipeline, cache_dir())()
    except SdkError as exc:
        result.add(PROBLEM, "model", exc.message, exc.hint)
        return
    model_path = artifacts.model_path
    try:
        with create_backend("onnxruntime", model_path, threads=1, batch=pipeline.spec.batch_size, spinning=False) as backend:
            inputs = ", ".join(s.describe() for s in backend.input_specs)
            outputs = ", ".join(s.describe() for s in backend.output_specs)
            result.add(OK, "model", f"prepared: {inputs} -> {outputs}")
            image_input, buffer = split_inputs(backend, dict(pipeline.spec.model.inputs), model_path)
            batch = batch_slots(pipeline, buffer, model_path)
            with create_preprocessing(pipeline, backend, image_input, batch) as preprocess:
                result.add(OK, "preprocess", f"{preprocess.describe()} -> {image_input!r}")
            tensors = artifacts.load_tensors()
            with create_decoding(pipeline, backend.outputs, tensors, batch) as decode:
                result.add(OK, "decoder", f"{decode.describe()}; its tensors and classes agree with the model")
            if pipeline.spec.cascade:
                with create_cascade(pipeline.spec.cascade, pipeline.folder, tensors):
                    result.add(OK, "cascade", ", ".join(f"{s.name}: {s.decoder.kind} on {s.model.path}" for s in pipeline.spec.cascade))
    except SdkError as exc:
        result.add(PROBLEM, "model and decoder", exc.message, exc.hint)


def _labels(result: CheckResult, pipeline, labels: Path | None, images: Path | None) -> None:
    """The evaluation's class map: its keys name the model's classes; with --labels (else `evaluation.labels`), every
    class finds a category."""
    from tools.evaluate.classmap import check_keys
    from tools.evaluate.labelled_run import checked_labels
    from tools.evaluate.run import checked_inputs

    try:
        if labels is None:
            check_keys(tuple(pipeline.class_names()), dict(pipeline.spec.evaluation.classes), str(pipeline.path))
            checked = checked_labels(pipeline)
            if checked is None:
                return
            found, mapping = checked
        else:
            found, mapping = checked_inputs(pipeline, labels, images)
    except SdkError as exc:
        result.add(PROBLEM, "labels", exc.message, exc.hint)
        return
    unscored = f"; {len(mapping.unscored)} categories without a class are not scored" if mapping.unscored else ""
    crowd = found.regions
    labelled = f"{len(found.images)} images, {found.labels} labels" + (f" and {crowd} crowd regions" if crowd else "")
    result.add(OK, "labels", f"{labelled} ({found.format}); every class maps to a category{unscored}")


def _frames(result: CheckResult, pipeline, frames: int | None) -> int | None:
    """Frames per camera a run will have (None: as many as the run lasts), and a finding saying where from."""
    counts = []
    for name, camera in pipeline.spec.cameras.items():
        source = camera.uri.split("://", 1)[0]
        given = frames or camera.replay.frames
        try:
            has = _source_frames(pipeline, name, camera.uri)
        except SdkError as exc:  # a recording's topic or encoding the run would refuse
            result.add(PROBLEM, "source", exc.message, exc.hint)
            counts.append(None)
            continue
        has = None if camera.replay.loop else has
        loop = f"{pipeline.source_key(name).removesuffix('.uri')}.replay: {{loop: true}}"
        minimum = pipeline.spec.health.min_frames
        if has is not None and has < minimum:
            result.add(
                PROBLEM,
                "source",
                f"{camera.uri} holds {_frames_word(has)}, fewer than the {minimum} the health check needs (health.min_frames): "
                "a deploy's trial would fail and roll back",
                f"play it in a loop ({loop}){', a still image is the same frame again and again' if has == 1 else ''}; "
                "or lower health.min_frames",
            )
        if given and has is not None and has < given:
            result.add(
                WARN,
                "source",
                f"{camera.uri} holds {_frames_word(has)}, fewer than the {given} asked for ({'--frames' if frames else 'replay.frames'}): "
                f"the run ends after {has}",
                f"play it in a loop ({loop}), or ask for at most {has}",
            )
        count = min(c for c in (given, has) if c is not None) if (given or has is not None) else None
        counts.append(count)
        told = ("1 frame" if count == 1 else f"{count} frames") if count is not None else "frames until it is stopped (a live or looping source)"
        why = "--frames" if frames else "replay.frames" if camera.replay.frames else f"the {source} source"
        result.add(NOTE, "source", f"{camera.uri}: {told} ({why})")
    known = [c for c in counts if c is not None]
    return min(known) if len(known) == len(counts) else None


def _frames_word(count: int) -> str:
    return "1 frame (a still image)" if count == 1 else f"{count} frames"


def _source_frames(pipeline, camera: str, uri: str) -> int | None:
    from urllib.parse import parse_qs, urlsplit

    from sdk.sources.synthetic import DEFAULT_FRAMES

    scheme = uri.split("://", 1)[0]
    if scheme == "synthetic":
        return int(parse_qs(urlsplit(uri).query).get("frames", [str(DEFAULT_FRAMES)])[0])
    path = pipeline.source_file(camera)
    if path is None:
        return None
    if scheme in ("mcap", "rosbag2"):
        return _recorded_frames(pipeline, camera, uri)
    from tools.models.source_facts import IMAGE_SUFFIXES, file_frames

    if scheme == "images":
        return sum(1 for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    return file_frames(path)


def _recorded_frames(pipeline, camera: str, uri: str) -> int | None:
    """The frames of a recording's camera topic, as its index counts them; the topic and its first message checked
    as a run opens them (a topic not in the recording lists the image topics that are; an encoding not read is named)."""
    from sdk.sources import open_reader

    reader = open_reader(uri, pipeline.folder)
    try:
        reader.open()
    except SdkError as exc:
        raise SdkError(f"{pipeline.path}: {pipeline.source_key(camera)}: {exc.message}", hint=exc.hint) from None
    try:
        return reader.frame_count
    finally:
        reader.close()


def _needed(key: str) -> int:
    from sdk.runtime.statistics import frames_needed

    return frames_needed(QUANTILES[key]) if key in QUANTILES else 1


def _budgets(result: CheckResult, budgets, frames: int | None, cameras: int) -> None:
    if budgets is None or not _any_budget(budgets):
        result.add(WARN, "budgets", "none: a run is INCONCLUSIVE (exit 4), nothing is judged", "add budgets (docs/reference/pipeline.md, budgets)")
        return
    limits = [(f"end_to_end.{k}", k) for k, _ in (budgets.end_to_end.items() if budgets.end_to_end else [])]
    limits += [(f"stages.{s}.{k}", k) for s, limit in budgets.stages.items() for k, _ in limit.items()]
    limits += [(f"cascade.{s}.{k}", k) for s, limit in budgets.cascade.items() for k, _ in limit.items()]
    limits += [(f"cameras.{c}.end_to_end.{k}", k) for c, b in budgets.cameras.items() if b.end_to_end for k, _ in b.end_to_end.items()]
    needs = [(name, _needed(key)) for name, key in limits]
    if budgets.max_miss_ratio is not None:
        needs.append(("max_miss_ratio", _frames_for_ratio(budgets.max_miss_ratio)))
    if not needs:
        result.add(OK, "budgets", "no percentile to back: judged on any number of frames")
        return
    name, most = max(needs, key=lambda item: item[1])
    total = most + budgets.warmup_frames
    if frames is None:
        result.add(OK, "budgets", f"{name} needs {most} measured frames after {budgets.warmup_frames} warm-up: run at least {total}")
        return
    short = [(n, k) for n, k in needs if frames - budgets.warmup_frames < k]
    if not short:
        result.add(OK, "budgets", f"every budget can be judged on {frames} frames ({name} needs {total} with the warm-up)")
        return
    names = ", ".join(n for n, _ in short)
    measured = max(0, frames - budgets.warmup_frames)
    result.add(
        PROBLEM,
        "budgets",
        f"{names}: {measured} measured frames ({frames} less {budgets.warmup_frames} warm-up) cannot back a PASS at 95 % "
        f"({name} needs {most}): the verdict can be FAIL or INCONCLUSIVE, never PASS",
        f"run at least {total} frames (--frames, replay.frames or a longer source), or budget a lower percentile",
    )


def _any_budget(budgets) -> bool:
    fields = budgets.model_dump(exclude={"warmup_frames"}, exclude_none=True)
    return any(value not in ({}, [], None) for value in fields.values())


def _frames_for_ratio(ratio: float) -> int:
    """The fewest frames whose 95 % upper bound on a miss ratio, with no miss seen, is within `ratio`."""
    if ratio <= 0:
        return 1
    return math.ceil(math.log(0.05) / math.log1p(-ratio)) if ratio < 1 else 1


def _target(result: CheckResult, name: str, spec) -> None:
    from tools.connect.local_checks import local_findings
    from tools.targets import LocalTarget, resolve_target

    try:
        target = resolve_target(name)
    except SdkError as exc:
        result.add(PROBLEM, "target", exc.message, exc.hint)
        return
    if isinstance(target, LocalTarget):
        note = "; model.backend tensorrt needs a TensorRT engine and a GPU here" if spec.model.backend == "tensorrt" else ""
        result.add(OK, "target", f"local: this machine, ONNX Runtime on the CPU{note}")
        return
    result.add(OK, "target", f"{name}: {target.spec.user}@{target.spec.host}:{target.spec.port}, {target.spec.platform} (not contacted)")
    for status, what, detail, hint in local_findings(target):
        result.add(PROBLEM if status == "blocked" else status, what, detail, hint)


__all__ = ["PROBLEM", "check_pipeline"]
