"""DB (Differentiable Binarization) text detectors, PaddleOCR's among them: the network's text probability map ->
one detection per text region, as PaddleOCR's DBPostProcess makes them (its "fast" score):

1. pixels whose probability is above `threshold` are text (with `dilation`, grown by a 2x2 dilation first);
2. each outer-or-inner contour of the text pixels (OpenCV, RETR_LIST) gives its minimum-area rectangle; one shorter
   than `min_size` is dropped;
3. its score is the mean probability over the rectangle's pixels; below postprocess.score_threshold it is dropped;
4. the rectangle grows by d = area x unclip_ratio / perimeter on every side (PaddleOCR offsets the polygon by d with
   round joins and takes the minimum-area rectangle of that, which is this one); shorter than min_size + 2: dropped.

A detection is the grown rectangle's axis-aligned box, its four corners (top-left first, clockwise) as keypoints, both
in source pixels; class 0 (`postprocess.classes`, e.g. [text]). No NMS: regions of one map do not overlap.
"""

from __future__ import annotations

import numpy as np

from sdk.errors import ModelError
from sdk.geometry import ResizeGeometry
from sdk.postprocess.detections import Detections
from sdk.spec.decoders import DbDecoder
from sdk.spec.schema import Postprocess
from sdk.stage import Stage


class DbPostprocessor(Stage):
    name = "postprocess"

    def __init__(self, spec: Postprocess, outputs: dict[str, np.ndarray]) -> None:
        decoder = spec.decoder
        assert isinstance(decoder, DbDecoder)
        if decoder.output not in outputs:
            raise ModelError(f"postprocess.decoder.output: the model has no output {decoder.output!r}; it has {sorted(outputs)}")
        probability = outputs[decoder.output]
        if probability.ndim != 4 or probability.shape[:2] != (1, 1):
            raise ModelError(
                f"postprocess.decoder: {decoder.output!r} is {list(probability.shape)}, expected [1, 1, H, W] (a text probability per pixel)",
                hint="kind db reads a DB text detector's probability map (PaddleOCR's text detector ends in it)",
            )
        self.spec, self.decoder = spec, decoder
        self._map = probability[0, 0]
        self._text = np.empty(self._map.shape, np.uint8)
        self.detections = Detections(spec.max_detections, spec.classes, keypoints=4)

    def describe(self) -> str:
        height, width = self._map.shape
        settings = f"threshold {self.decoder.threshold:g}, unclip {self.decoder.unclip_ratio:g}"
        return f"DB text regions on a {width}x{height} probability map ({settings}); no NMS"

    def __call__(self, geometry: ResizeGeometry) -> Detections:
        import cv2

        decoder, probability, out = self.decoder, self._map, self.detections
        np.greater(probability, decoder.threshold, out=self._text)
        text = cv2.dilate(self._text, np.ones((2, 2), np.uint8)) if decoder.dilation else self._text
        contours, _ = cv2.findContours(text, cv2.RETR_LIST, cv2.CHAIN_APPROX_SIMPLE)
        found: list[tuple[float, np.ndarray]] = []
        for contour in contours[: decoder.max_candidates]:
            (cx, cy), (w, h), angle = cv2.minAreaRect(contour)
            if min(w, h) < decoder.min_size:
                continue
            score = _mean_inside(probability, cv2.boxPoints(((cx, cy), (w, h), angle)))
            if score < self.spec.score_threshold:
                continue
            grow = w * h * decoder.unclip_ratio / (2.0 * (w + h)) if w + h > 0 else 0.0
            w, h = w + 2 * grow, h + 2 * grow
            if min(w, h) < decoder.min_size + 2:
                continue
            found.append((score, _clockwise(cv2.boxPoints(((cx, cy), (w, h), angle)))))
        found.sort(key=lambda item: -item[0])
        n = min(len(found), len(out.scores))
        for i, (score, corners) in enumerate(found[:n]):
            out.keypoints[i] = corners
            out.boxes[i] = (corners[:, 0].min(), corners[:, 1].min(), corners[:, 0].max(), corners[:, 1].max())
            out.scores[i] = score
        out.class_ids[:n] = 0
        out.count = n
        geometry.boxes_to_source(out.boxes[:n])
        geometry.points_to_source(out.keypoints[:n].reshape(-1, 2))
        return out


def _mean_inside(probability: np.ndarray, corners: np.ndarray) -> float:
    """The mean probability over the pixels of a quadrilateral (its corners truncated to pixels, as PaddleOCR's box_score_fast)."""
    import cv2

    height, width = probability.shape
    x0 = int(np.clip(np.floor(corners[:, 0].min()), 0, width - 1))
    x1 = int(np.clip(np.ceil(corners[:, 0].max()), 0, width - 1))
    y0 = int(np.clip(np.floor(corners[:, 1].min()), 0, height - 1))
    y1 = int(np.clip(np.ceil(corners[:, 1].max()), 0, height - 1))
    mask = np.zeros((y1 - y0 + 1, x1 - x0 + 1), np.uint8)
    cv2.fillPoly(mask, [(corners - (x0, y0)).astype(np.int32)], 1)
    return float(cv2.mean(probability[y0 : y1 + 1, x0 : x1 + 1], mask)[0])


def _clockwise(corners: np.ndarray) -> np.ndarray:
    """Top-left, top-right, bottom-right, bottom-left (image axes: y down)."""
    by_x = corners[np.argsort(corners[:, 0], kind="stable")]
    left, right = by_x[:2][np.argsort(by_x[:2, 1], kind="stable")], by_x[2:][np.argsort(by_x[2:, 1], kind="stable")]
    return np.array([left[0], right[0], right[1], left[1]], np.float32)
