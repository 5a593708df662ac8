"""Classifiers: the top-k classes of a frame (softmax, sigmoid or the model's own probabilities), no boxes.

The result iterates as no detections (a box sink draws none); the JSONL sink writes `classes: [{label, score}]`,
best first, and the video sink writes the best class on the frame (decision 0502).
"""

from __future__ import annotations

import hashlib

import numpy as np

from sdk.errors import ModelError
from sdk.geometry import ResizeGeometry
from sdk.spec.decoders import ClassifyDecoder
from sdk.spec.schema import Postprocess
from sdk.stage import Stage


class Classes:
    """One frame's top-k classes, best first: preallocated, filled in place, valid until the next frame."""

    kind = "classify"

    def __init__(self, top_k: int, labels: tuple[str, ...]) -> None:
        self.labels = labels
        self.class_ids = np.zeros(top_k, np.int32)
        self.scores = np.zeros(top_k, np.float32)
        self.count = 0

    def __len__(self) -> int:
        return 0  # no detections: the classes are not boxes

    def __iter__(self):
        return iter(())

    def top(self) -> list[tuple[str, float]]:
        return [(self.labels[int(i)], float(s)) for i, s in zip(self.class_ids[: self.count], self.scores[: self.count], strict=True)]

    def jsonl_fields(self, decimals: int) -> dict:
        return {"classes": [{"label": label, "score": round(score, 4)} for label, score in self.top()]}

    def digest(self) -> int:
        h = hashlib.blake2b(self.class_ids[: self.count].data, digest_size=8)
        h.update(self.scores[: self.count].data)
        return int.from_bytes(h.digest(), "little")

    def draw(self, image: np.ndarray) -> None:
        import cv2

        for row, (label, score) in enumerate(self.top()[:3]):
            cv2.putText(image, f"{label} {score:.2f}", (8, 44 + 22 * row), cv2.FONT_HERSHEY_SIMPLEX, 0.6, (0, 255, 255), 2, cv2.LINE_AA)


class ClassifyPostprocessor(Stage):
    name = "postprocess"

    def __init__(self, spec: Postprocess, outputs: dict[str, np.ndarray], classes: tuple[str, ...]) -> None:
        decoder = spec.decoder
        assert isinstance(decoder, ClassifyDecoder)
        if decoder.output not in outputs:
            raise ModelError(f"postprocess.decoder.output: the model has no output {decoder.output!r}; it has {sorted(outputs)}")
        raw = outputs[decoder.output]
        if raw.size != max(raw.shape, default=0) or raw.size < 1:
            raise ModelError(f"postprocess.decoder.output: {decoder.output!r} is {list(raw.shape)}, expected one score per class ([1, C])")
        self._scores = raw.reshape(-1)
        if len(self._scores) != len(classes):
            raise ModelError(f"postprocess: {len(classes)} class name(s) but {decoder.output!r} {list(raw.shape)} scores {len(self._scores)} classes")
        self.decoder, self.spec = decoder, spec
        self._k = min(decoder.top_k, len(classes))
        self._probs = np.empty(len(classes), np.float32)
        self.result = Classes(self._k, classes)

    def describe(self) -> str:
        return f"classify, {len(self._scores)} classes, top {self._k} ({self.decoder.activation})"

    def __call__(self, geometry: ResizeGeometry) -> Classes:
        probs, activation = self._probs, self.decoder.activation
        if activation == "softmax":
            np.subtract(self._scores, self._scores.max(), out=probs)
            np.exp(probs, out=probs)
            probs /= probs.sum()
        elif activation == "sigmoid":
            np.negative(self._scores, out=probs)
            np.exp(probs, out=probs)
            probs += 1.0
            np.reciprocal(probs, out=probs)
        else:
            probs[:] = self._scores
        k = self._k
        top = np.argpartition(-probs, k - 1)[:k] if k < len(probs) else np.arange(len(probs))
        top = top[np.argsort(-probs[top], kind="stable")]
        top = top[probs[top] >= self.spec.score_threshold]  # classes below the threshold are not reported
        out = self.result
        n = len(top)
        out.class_ids[:n] = top
        out.scores[:n] = probs[top]
        out.count = n
        return out
