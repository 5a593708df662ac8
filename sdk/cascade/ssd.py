"""The `ssd` decoder of a cascade step: the top-level SSD decoder (sdk.postprocess.ssd) run on each crop's outputs.

One `SsdPostprocessor` per crop slot, bound once to that slot's rows of preallocated output buffers (the crops of a
frame come back from ONNX Runtime as one batch and are copied in); each decodes its crop with the crop's own
preprocessing geometry (letterbox or stretch of the crop to the step's input), so its boxes and keypoints come out
in crop pixels, and are then moved by the crop's corner into source-frame pixels. Boxes end inside the crop (as the
top-level decoder's end inside the frame); keypoints are not clipped.

Result per parent detection: `{"detections": [{label, score, box, keypoints?}, ...]}`, best first, at most
`max_detections`; an empty list when the crop holds nothing above `score_threshold`.
"""

from __future__ import annotations

import numpy as np

from sdk.anchors import CentreAnchors, from_corners, generate
from sdk.errors import ModelError
from sdk.geometry import ResizeGeometry
from sdk.postprocess.ssd import SsdPostprocessor
from sdk.spec.cascade import CascadeSsdDecoder
from sdk.spec.schema import GeneratedAnchors, Postprocess


def cascade_tensor_key(step: str, name: str) -> str:
    """The key under which the host's preparation stores a cascade step's anchor tensor in the release's tensors.npz."""
    return f"cascade/{step}/{name}"


def _in_step(text: str) -> str:
    return text.replace("postprocess.decoder.", "decoder.").replace("postprocess.", "decoder.")


class CascadeSsd:
    def __init__(self, spec: CascadeSsdDecoder, step: str, session, capacity: int, net_size: tuple[int, int], tensors: dict, where: str) -> None:
        self.names = (spec.box_encodings, spec.class_logits)
        shapes = dict(session.outputs)
        self.outputs: dict[str, np.ndarray] = {}
        for key, name in zip(("box_encodings", "class_logits"), self.names, strict=True):
            if name not in shapes:
                raise ModelError(f"{where}.decoder.{key}: the step's model has no output {name!r}; it has {sorted(shapes)}")
            rest = shapes[name][1:]
            if not all(isinstance(d, int) for d in rest):
                raise ModelError(
                    f"{where}.decoder.{key}: output {name!r} has the shape {shapes[name]}; a cascade SSD needs every axis but the batch fixed",
                    hint="export the step's model with a static input size (the anchors are laid on it)",
                )
            self.outputs[name] = np.zeros((capacity, *rest), np.float32)
        self.anchors = self._anchors(spec, step, tensors, where)
        post = Postprocess.model_construct(
            decoder=spec,
            classes=spec.classes,
            score_threshold=spec.score_threshold,
            iou_threshold=spec.iou_threshold,
            max_detections=spec.max_detections,
        )  # the step's values, validated at load: the top-level decoder reads its settings from this shape
        try:
            self.slots = [
                SsdPostprocessor(post, self.anchors, {name: array[k : k + 1] for name, array in self.outputs.items()}, net_size)
                for k in range(capacity)
            ]
        except ModelError as exc:  # its message names postprocess.decoder.*: say which step's decoder it is
            raise ModelError(f"{where}: {_in_step(exc.message)}", hint=_in_step(exc.hint)) from None

    @staticmethod
    def _anchors(spec: CascadeSsdDecoder, step: str, tensors: dict, where: str) -> CentreAnchors:
        if isinstance(spec.anchors, GeneratedAnchors):
            return generate(spec.anchors.generate)
        key = cascade_tensor_key(step, spec.anchors)
        if key not in tensors:
            raise ModelError(
                f"{where}.decoder.anchors: tensor {spec.anchors!r} of the step's model was not extracted",
                hint="run `sdk prepare PIPELINE` (deploy does): the anchors must be a constant tensor of the step's model",
            )
        return from_corners(tensors[key], spec.anchor_layout)

    def __call__(self, outputs: list[np.ndarray], crops: list[tuple[tuple[int, int, int, int], ResizeGeometry]]) -> list[dict]:
        """`outputs`: the batch's box encodings and class logits (in `names` order); `crops`: per crop, its rectangle in the
        frame and the geometry its preprocessing used. One result a crop."""
        n = len(crops)
        for name, output in zip(self.names, outputs, strict=True):
            target = self.outputs[name]
            if output.shape[1:] != target.shape[1:] or len(output) != n:
                raise ModelError(
                    f"cascade decoder ssd: output {name!r} is {list(output.shape)}, expected [{n}, {', '.join(map(str, target.shape[1:]))}]"
                )
            np.copyto(target[:n], output, casting="same_kind")
        results = []
        for slot, ((x1, y1, _, _), geometry) in zip(self.slots, crops, strict=False):
            found = []
            for d in slot(geometry):
                record = {
                    "label": d.label,
                    "score": round(d.score, 4),
                    "box": [round(d.box[0] + x1, 2), round(d.box[1] + y1, 2), round(d.box[2] + x1, 2), round(d.box[3] + y1, 2)],
                }
                if d.keypoints:
                    record["keypoints"] = [[round(x + x1, 2), round(y + y1, 2)] for x, y in d.keypoints]
                found.append(record)
            results.append({"detections": found})
        return results


__all__ = ["CascadeSsd", "cascade_tensor_key"]
