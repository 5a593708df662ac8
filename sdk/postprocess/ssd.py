"""SSD decoding: anchors + box encodings -> boxes (and keypoints), scores, NMS.

Two conventions, and everything between them: TF Object Detection API (anchor tensor, rows y, x, h, w,
log-space sizes: `exp`) and MediaPipe's TensorsToDetectionsCalculator (generated anchors, rows x, y,
w, h then keypoint pairs, sizes linear in the anchor: `linear`). For a row t divided by scale_factors
(in box_layout order): centre = t_centre * anchor size + anchor centre; size = exp(t_size) * anchor
size or t_size * anchor size; keypoint k = t_k * anchor size + anchor centre. All normalised to the
network input, then mapped to source pixels by the preprocessing's geometry.
"""

from __future__ import annotations

import math

import numpy as np

from sdk.anchors import CentreAnchors
from sdk.errors import ModelError
from sdk.geometry import ResizeGeometry
from sdk.postprocess.detections import Detections
from sdk.spec.schema import Postprocess, SsdDecoder
from sdk.stage import Stage


class SsdPostprocessor(Stage):
    name = "postprocess"

    def __init__(self, spec: Postprocess, anchors: CentreAnchors, outputs: dict[str, np.ndarray], net_size: tuple[int, int]) -> None:
        decoder = spec.decoder
        assert isinstance(decoder, SsdDecoder)
        self.spec, self.decoder = spec, decoder
        count = len(anchors)
        for name in (decoder.box_encodings, decoder.class_logits):
            if name not in outputs:
                raise ModelError(f"postprocess.decoder: the model has no output {name!r}; it has {sorted(outputs)}")
        self._keypoints = decoder.keypoints
        self._encodings = _rows(outputs[decoder.box_encodings], count, decoder)
        self._logits = outputs[decoder.class_logits].reshape(count, -1)
        first = 1 if decoder.background_class else 0
        classes = self._logits.shape[1] - first
        if classes != len(spec.classes):
            raise ModelError(
                f"postprocess.classes names {len(spec.classes)} class(es) but {decoder.class_logits!r} "
                f"scores {classes} (background_class: {decoder.background_class})"
            )
        self._first_class = first
        self._anchor_cx, self._anchor_cy, self._anchor_w, self._anchor_h = anchors.cx, anchors.cy, anchors.w, anchors.h
        self._scale = np.asarray(decoder.scale_factors, np.float32)
        # Which column of a row (and which scale) is the centre x, centre y, width, height.
        self._ix, self._iy, self._iw, self._ih = (1, 0, 3, 2) if decoder.box_layout == "yxhw" else (0, 1, 2, 3)
        self._exp = decoder.box_size == "exp"
        t = spec.score_threshold
        # sigmoid(x) > t  <=>  x > logit(t): threshold before any exp, on 1917 x C logits.
        # (MediaPipe clips logits to +-score_clipping_thresh first: sigmoid is monotonic and float32
        # sigmoid(100) is 1, so clipping changes no score that could pass a threshold.)
        self._logit_threshold = -math.inf if t <= 0 else math.inf if t >= 1 else math.log(t / (1 - t))
        self._net_w, self._net_h = net_size
        self.detections = Detections(spec.max_detections, spec.classes, keypoints=decoder.keypoints, class_agnostic=spec.class_agnostic)

    def describe(self) -> str:
        return f"SSD, {len(self._anchor_cx)} anchors; the SDK's NMS (IoU {self.spec.iou_threshold:g})"

    def __call__(self, geometry: ResizeGeometry) -> Detections:
        out = self.detections
        logits = self._logits
        if self.decoder.score_activation == "sigmoid":
            anchor_idx, class_idx = np.nonzero(logits[:, self._first_class :] > self._logit_threshold)
            scores = 1.0 / (1.0 + np.exp(-logits[anchor_idx, class_idx + self._first_class]))
        else:
            shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
            probs = shifted[:, self._first_class :] / shifted.sum(axis=1, keepdims=True)
            anchor_idx, class_idx = np.nonzero(probs > self.spec.score_threshold)
            scores = probs[anchor_idx, class_idx]
        if len(scores) == 0:
            out.count = 0
            return out
        boxes = self._decode(anchor_idx)
        points = self._decode_keypoints(anchor_idx) if self._keypoints else None
        if not self._exp:
            # A linear size can come out negative (or NaN): such a box is dropped, as MediaPipe drops it. (exp: never.)
            sized = (boxes[:, 2] >= boxes[:, 0]) & (boxes[:, 3] >= boxes[:, 1])
            boxes, scores, class_idx, anchor_idx = boxes[sized], scores[sized], class_idx[sized], anchor_idx[sized]
            if points is not None:
                points = points[sized]
        if self.decoder.clip_boxes:
            np.clip(boxes, 0.0, 1.0, out=boxes)
            nonempty = (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])
            boxes, scores, class_idx = boxes[nonempty], scores[nonempty], class_idx[nonempty]
            if points is not None:
                points = points[nonempty]
        # Normalised -> network-input pixels (x1, y1, x2, y2; keypoints x, y).
        boxes[:, 0::2] *= self._net_w
        boxes[:, 1::2] *= self._net_h
        if points is not None:
            points[..., 0] *= self._net_w
            points[..., 1] *= self._net_h
        return out.select(boxes, scores, class_idx, self.spec.iou_threshold, geometry, keypoints=points)

    def _decode(self, idx: np.ndarray) -> np.ndarray:
        """Normalised x1, y1, x2, y2 of the given anchors."""
        t = (self._encodings[idx, :4] / self._scale).T
        tx, ty, tw, th = t[self._ix], t[self._iy], t[self._iw], t[self._ih]
        if self._exp:
            h = np.exp(th) * self._anchor_h[idx]
            w = np.exp(tw) * self._anchor_w[idx]
        else:
            h = th * self._anchor_h[idx]
            w = tw * self._anchor_w[idx]
        cy = ty * self._anchor_h[idx] + self._anchor_cy[idx]
        cx = tx * self._anchor_w[idx] + self._anchor_cx[idx]
        return np.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], axis=1)

    def _decode_keypoints(self, idx: np.ndarray) -> np.ndarray:
        """[K, keypoints, 2] normalised x, y: each pair (in box_layout order) decoded like the box centre."""
        pairs = self._encodings[idx, 4:].reshape(len(idx), self._keypoints, 2)
        first_is_x = self._ix == 0
        raw_x, raw_y = (pairs[..., 0], pairs[..., 1]) if first_is_x else (pairs[..., 1], pairs[..., 0])
        points = np.empty(pairs.shape, np.float32)
        points[..., 0] = raw_x / self._scale[self._ix] * self._anchor_w[idx, None] + self._anchor_cx[idx, None]
        points[..., 1] = raw_y / self._scale[self._iy] * self._anchor_h[idx, None] + self._anchor_cy[idx, None]
        return points


def _rows(encodings: np.ndarray, count: int, decoder: SsdDecoder) -> np.ndarray:
    """The box encodings as a [count, 4 + 2 * keypoints] view of the backend's output buffer.

    A tensor of exactly count x (4 + 2 * keypoints) values is read row by row whatever its shape (as before
    keypoints existed). A tensor of one row per anchor holding more values per row ([1, count, W]) is read from
    the start of each row: the keypoints not asked for (BlazeFace's six with `keypoints: 0`) are left unread.
    """
    width = 4 + 2 * decoder.keypoints
    name = decoder.box_encodings
    shape = list(encodings.shape)
    if encodings.size == count * width:
        return encodings.reshape(count, width)
    held = shape[-1] if shape else 0
    if held > width and math.prod(shape[:-1]) == count:
        return encodings.reshape(count, held)[:, :width]
    if held > 4 and math.prod(shape[:-1]) == count and (held - 4) % 2 == 0:
        raise ModelError(
            f"postprocess.decoder.box_encodings: {name!r} {shape} holds {held} values per anchor, but keypoints: {decoder.keypoints} reads {width}",
            hint=f"{held} values are 4 box values and {(held - 4) // 2} keypoints: set postprocess.decoder.keypoints to at most {(held - 4) // 2}",
        )
    raise ModelError(
        f"postprocess.decoder.box_encodings: {name!r} {shape} holds {encodings.size // width} boxes but there are {count} anchors",
        hint="the anchors (tensor or generate options) must be those the model was trained with, one per box",
    )
