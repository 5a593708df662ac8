"""The model's detections on labelled images, through the stages a deploy runs.

The images are decoded as the `images://` source decodes them (`sdk.sources.images.read_image`), a video's frames
(MOTChallenge labels) by the `file://` source's reader, in order; then preprocessed,
inferred and decoded by the runtime's own stage factories (`create_backend`, `create_preprocessing`,
`create_decoding`): the same geometry, resize, colour, normalisation and decoder as a deploy. Only the decoder's
thresholds are the evaluation's (`evaluation:` in the pipeline file: a low score floor, its own NMS, at most 100 a
image), never the deployment's. The labels never enter the stages: each image's detections are kept under the image's
id, beside its labels. On `--target local` the backend is ONNX Runtime on this CPU with the prepared model.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sdk.artifacts import ModelArtifacts
from sdk.runtime.evaluation_run import with_evaluation_thresholds
from sdk.sources.base import CorruptFrame
from sdk.spec.loader import PipelineFile
from tools.evaluate.classmap import ClassMap
from tools.evaluate.labelset import LabelledImage, LabelSet
from tools.progress import Progress, SilentProgress


@dataclass
class DetectionRun:
    detections: list[dict] = field(default_factory=list)  # COCO results: image_id, category_id, bbox [x, y, w, h], score
    not_decoded: list[tuple[str, str]] = field(default_factory=list)  # (file name, why)
    size_mismatch: list[str] = field(default_factory=list)  # images whose pixels are not the size the labels say
    backend: str = ""
    postprocess: str = ""


def evaluation_pipeline(pipeline: PipelineFile) -> PipelineFile:
    """The pipeline with the evaluation's detection settings in place of the deployment's thresholds (the same change a
    target's evaluation run makes: sdk.runtime.evaluation_run), preprocessed on this CPU."""
    spec = with_evaluation_thresholds(pipeline.spec)
    preprocess = spec.preprocess.model_copy(update={"device": "cpu", "cuda_graph": False})  # the local target: this CPU
    return PipelineFile(spec.model_copy(update={"preprocess": preprocess}), pipeline.path)


def detect(
    pipeline: PipelineFile,
    artifacts: ModelArtifacts,
    labels: LabelSet,
    classes: ClassMap,
    progress: Progress | None = None,
    model: Path | None = None,
) -> DetectionRun:
    """The detections on every labelled image; `model`: another ONNX model of the same graph's inputs and outputs (an INT8
    Q/DQ model, an optimized candidate) in place of the pipeline's own."""
    from sdk.backends import create_backend
    from sdk.postprocess.stage import create_decoding
    from sdk.preprocess.stage import create_preprocessing
    from sdk.runtime.cameras import batch_slots
    from sdk.runtime.constants import split_inputs

    progress = progress or SilentProgress()
    run = DetectionRun()
    evaluated = evaluation_pipeline(pipeline)
    spec = evaluated.spec
    model_path = model if model is not None else artifacts.model_for(spec.model.precision)
    with ExitStack() as stack:
        backend = stack.enter_context(create_backend("onnxruntime", model_path, threads=spec.model.threads, batch=1, spinning=False))
        image_input, input_buffer = split_inputs(backend, dict(spec.model.inputs), model_path)
        batch = batch_slots(evaluated, input_buffer, model_path)
        preprocess = stack.enter_context(create_preprocessing(evaluated, backend, image_input, batch))
        decode = stack.enter_context(create_decoding(evaluated, backend.outputs, artifacts.load_tensors(), batch, preprocess.session))
        preprocessor, decoder = preprocess.by_camera[0], decode.by_slot[0]
        run.backend, run.postprocess = backend.describe(), decode.describe()
        task = progress.task(f"detecting on {len(labels.images)} labelled images", total=len(labels.images))
        for image, pixels in _frames(labels):
            if isinstance(pixels, str):
                run.not_decoded.append((image.name, pixels))
                task.advance()
                continue
            if (pixels.shape[1], pixels.shape[0]) != (image.width, image.height):
                run.size_mismatch.append(image.name)
            geometry = preprocessor(pixels)
            backend.infer()
            for found in decoder(geometry):
                category = classes.to_category.get(found.class_id)
                if category is None:
                    continue
                x1, y1, x2, y2 = (float(v) for v in found.box)
                run.detections.append(
                    {"image_id": image.id, "category_id": category, "bbox": [x1, y1, x2 - x1, y2 - y1], "score": float(found.score)}
                )
            task.advance()
        task.done()
    return run


def _frames(labels: LabelSet) -> Iterator[tuple[LabelledImage, np.ndarray | str]]:
    """Each labelled image with its pixels (or why it did not decode): image files by the `images://` source's
    decoder, a video's frames in order by the `file://` source's."""
    from sdk.sources.images import read_image

    videos = {image.path for image in labels.images if image.frame is not None}
    if not videos:
        for image in labels.images:
            try:
                yield image, read_image(image.path)
            except CorruptFrame as exc:
                yield image, str(exc)
        return
    from sdk.sources import open_reader

    (video,) = videos  # a label set holds one video (MOTChallenge: one sequence)
    with open_reader(f"file://{video.name}", base=video.parent) as reader:
        ended, position = False, 0  # position: the frame the reader gives next (a shard starts mid-video)
        for image in labels.images:
            pixels: np.ndarray | str | None = None
            while not ended and position <= image.frame:
                try:
                    pixels = reader.read()
                except CorruptFrame as exc:
                    pixels = f"{image.name}: {exc}"
                ended, position = pixels is None, position + 1
            if pixels is None:
                ended = True
                pixels = f"{image.name}: the video ended before this frame"
            yield image, pixels


__all__ = ["DetectionRun", "detect", "evaluation_pipeline"]
