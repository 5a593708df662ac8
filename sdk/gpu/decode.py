"""The decode kernels' plans (SSD, YOLO): parameter blocks, launch geometry, buffers.

The kernels (plugins_cuda/include/ssd_decode.cuh) turn the model's outputs into candidates
(network-pixel boxes, scores, classes) on the GPU; NMS and the mapping to source pixels stay in
sdk/postprocess (Detections.select), so the GPU and CPU decoders end in the same code.
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass

import numpy as np

from sdk.errors import ModelError
from sdk.gpu.plan import BLOCK_THREADS
from sdk.spec.schema import Postprocess, SsdDecoder, YoloDecoder

DECODE_KERNELS = ("ssd_decode", "yolo_decode")


# The candidates' outputs and counts: the same fields at the same place of both kernels' C parameter structs.
_OUTPUTS = [
    ("out_boxes", ctypes.c_uint64),
    ("out_scores", ctypes.c_uint64),
    ("out_classes", ctypes.c_uint64),
    ("out_count", ctypes.c_uint64),
    ("count", ctypes.c_int32),
    ("classes", ctypes.c_int32),
]


class SsdParams(ctypes.Structure):
    _fields_ = [
        ("encodings", ctypes.c_uint64),
        ("logits", ctypes.c_uint64),
        ("anchors", ctypes.c_uint64),
        *_OUTPUTS,
        ("first_class", ctypes.c_int32),
        ("capacity", ctypes.c_int32),
        ("softmax", ctypes.c_int32),
        ("clip", ctypes.c_int32),
        ("scale", ctypes.c_float * 4),
        ("net_w", ctypes.c_float),
        ("net_h", ctypes.c_float),
        ("threshold", ctypes.c_double),
    ]


class YoloParams(ctypes.Structure):
    _fields_ = [
        ("rows", ctypes.c_uint64),
        *_OUTPUTS,
        ("head", ctypes.c_int32),
        ("row_stride", ctypes.c_int32),
        ("col_stride", ctypes.c_int32),
        ("capacity", ctypes.c_int32),
        ("objectness", ctypes.c_int32),
        ("threshold", ctypes.c_float),
    ]


def candidate_buffers(capacity: int) -> dict[str, np.ndarray]:
    """Host arrays shaped as a decode kernel's outputs (boxes, scores, classes, count)."""
    return {
        "boxes": np.zeros((capacity, 4), np.float32),
        "scores": np.zeros(capacity, np.float32),
        "classes": np.zeros(capacity, np.int32),
        "count": np.zeros(1, np.uint32),
    }


def centre_anchors(anchors: np.ndarray, layout: str) -> np.ndarray:
    """[N, 4] float32 centre y, centre x, height, width: computed as SsdPostprocessor computes them."""
    from sdk.anchors import from_corners

    centre = from_corners(anchors, layout)
    return np.ascontiguousarray(np.stack([centre.cy, centre.cx, centre.h, centre.w], axis=1), np.float32)


@dataclass(frozen=True)
class SsdDecodePlan:
    anchors: np.ndarray  # centre form, to upload once
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    capacity: int
    params: SsdParams
    kernel: str = "ssd_decode"

    @classmethod
    def build(cls, spec: Postprocess, anchors: np.ndarray, classes_per_anchor: int, net_size: tuple[int, int], capacity: int = 4096) -> SsdDecodePlan:
        decoder = spec.decoder
        assert isinstance(decoder, SsdDecoder)
        if (decoder.box_layout, decoder.box_size, decoder.keypoints) != ("yxhw", "exp", 0):
            # The kernel knows TF's coding only; MediaPipe-style heads decode on the CPU (sdk/postprocess/ssd.py).
            raise ModelError(
                f"the CUDA SSD decoder takes box_layout yxhw, box_size exp and no keypoints, not {decoder.box_layout}, "
                f"{decoder.box_size}, {decoder.keypoints} keypoint(s)",
                hint="decode this model on the CPU",
            )
        centre = centre_anchors(anchors, decoder.anchor_layout)
        count = centre.shape[0]
        softmax = decoder.score_activation != "sigmoid"
        t = spec.score_threshold
        # As the CPU decoder: sigmoid(x) > t  <=>  x > logit(t); softmax compares the probability.
        threshold = t if softmax else (-math.inf if t <= 0 else math.inf if t >= 1 else math.log(t / (1 - t)))
        params = SsdParams(
            count=count,
            classes=classes_per_anchor,
            first_class=1 if decoder.background_class else 0,
            capacity=capacity,
            softmax=int(softmax),
            clip=int(decoder.clip_boxes),
            net_w=float(net_size[0]),
            net_h=float(net_size[1]),
            threshold=threshold,
        )
        params.scale[:] = [float(np.float32(s)) for s in decoder.scale_factors]
        grid = (-(-count // BLOCK_THREADS), 1, 1)
        return cls(centre, grid, (BLOCK_THREADS, 1, 1), capacity, params)

    def output_buffers(self) -> dict[str, np.ndarray]:
        return candidate_buffers(self.capacity)

    def bound(self, encodings: int, logits: int, anchors: int, boxes: int, scores: int, classes: int, count: int) -> SsdParams:
        params = SsdParams.from_buffer_copy(self.params)
        params.encodings, params.logits, params.anchors = encodings, logits, anchors
        params.out_boxes, params.out_scores, params.out_classes, params.out_count = boxes, scores, classes, count
        return params


@dataclass(frozen=True)
class YoloDecodePlan:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    capacity: int
    input_bytes: int
    params: YoloParams
    kernel: str = "yolo_decode"

    @classmethod
    def build(cls, spec: Postprocess, output_shape: tuple[int, ...], capacity: int = 4096) -> YoloDecodePlan:
        decoder = spec.decoder
        assert isinstance(decoder, YoloDecoder)
        if decoder.layout == "yolox" or decoder.anchors is not None:
            # The kernel reads decoded rows (v5, v8); grid-decoded heads decode on the CPU (sdk/postprocess/yolo.py).
            what = "YOLOX" if decoder.layout == "yolox" else "a v5 raw head with anchors"
            raise ModelError(f"the CUDA YOLO decoder takes decoded v5 and v8 rows, not {what}", hint="decode this model on the CPU")
        _, a, b = output_shape
        v5 = decoder.layout == "v5"
        count, width = (a, b) if v5 else (b, a)  # v5 [1, N, 5 + C]; v8 [1, 4 + C, N]
        head = 5 if v5 else 4
        params = YoloParams(
            count=count,
            classes=width - head,
            head=head,
            row_stride=width if v5 else 1,
            col_stride=1 if v5 else count,
            capacity=capacity,
            objectness=int(v5),
            threshold=spec.score_threshold,  # float32, as numpy compares the float32 scores
        )
        grid = (-(-count // BLOCK_THREADS), 1, 1)
        return cls(grid, (BLOCK_THREADS, 1, 1), capacity, 4 * a * b, params)

    def output_buffers(self) -> dict[str, np.ndarray]:
        return candidate_buffers(self.capacity)

    def bound(self, rows: int, boxes: int, scores: int, classes: int, count: int) -> YoloParams:
        params = YoloParams.from_buffer_copy(self.params)
        params.rows, params.out_boxes, params.out_scores, params.out_classes, params.out_count = rows, boxes, scores, classes, count
        return params
