"""Helpers of the plugins_cuda tests: the host reference through ctypes, and camera pixel formats made with OpenCV."""

from __future__ import annotations

import ctypes
from pathlib import Path

import cv2
import numpy as np

from sdk.gpu.decode import SsdDecodePlan, YoloDecodePlan
from sdk.gpu.plan import PreprocessPlan


class HostReference:
    """The kernels' per-pixel code on the CPU, driven by the same parameter block the GPU gets."""

    def __init__(self, library: Path) -> None:
        self.lib = ctypes.CDLL(str(library))
        self.lib.pp_reference.restype = ctypes.c_int
        self.lib.pp_reference.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int]
        self.lib.pp_half.restype = ctypes.c_ushort
        self.lib.pp_half.argtypes = [ctypes.c_float]
        self.lib.pp_params_layout.restype = ctypes.c_int
        self.lib.pp_params_layout.argtypes = [ctypes.POINTER(ctypes.c_uint), ctypes.c_int]

    def run(self, plan: PreprocessPlan, source: np.ndarray, uv: np.ndarray | None = None) -> np.ndarray:
        source = np.ascontiguousarray(source)
        assert source.nbytes >= plan.source_bytes, (source.nbytes, plan.source_bytes)
        if uv is not None:
            uv = np.ascontiguousarray(uv)
            assert uv.nbytes >= plan.uv_bytes
        out = np.full(plan.output_shape, 77, plan.numpy_dtype)  # a value no path writes everywhere
        params = plan.bound(source.ctypes.data, out.ctypes.data, uv.ctypes.data if uv is not None else 0)
        assert self.lib.pp_reference(ctypes.byref(params), plan.format_id, plan.dtype_id, plan.layout_id) == 0
        return out


def to_nv12(bgr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Y plane and interleaved UV plane (2x2 chroma) of an even-sized BGR image, as a camera delivers them."""
    h, w = bgr.shape[:2]
    i420 = cv2.cvtColor(bgr, cv2.COLOR_BGR2YUV_I420).reshape(-1)  # Y, then U and V planes of (h/2) x (w/2)
    quarter = (h // 2) * (w // 2)
    y = i420[: h * w].reshape(h, w)
    u = i420[h * w : h * w + quarter].reshape(h // 2, w // 2)
    v = i420[h * w + quarter :].reshape(h // 2, w // 2)
    return np.ascontiguousarray(y), np.ascontiguousarray(np.stack([u, v], axis=2).reshape(h // 2, w))


def to_yuyv(bgr: np.ndarray) -> np.ndarray:
    """Packed 4:2:2 (Y0 U Y1 V) of an even-width BGR image: chroma of each pixel pair averaged."""
    yuv = cv2.cvtColor(bgr, cv2.COLOR_BGR2YUV).astype(np.uint16)
    h, w = bgr.shape[:2]
    packed = np.empty((h, w // 2, 4), np.uint8)
    packed[..., 0] = yuv[:, 0::2, 0]
    packed[..., 2] = yuv[:, 1::2, 0]
    packed[..., 1] = (yuv[:, 0::2, 1] + yuv[:, 1::2, 1] + 1) // 2
    packed[..., 3] = (yuv[:, 0::2, 2] + yuv[:, 1::2, 2] + 1) // 2
    return packed.reshape(h, 2 * w)


def nv12_to_bgr(y: np.ndarray, uv: np.ndarray) -> np.ndarray:
    return cv2.cvtColor(np.concatenate([y, uv.reshape(y.shape[0] // 2, y.shape[1])]), cv2.COLOR_YUV2BGR_NV12)


def yuyv_to_bgr(packed: np.ndarray) -> np.ndarray:
    h, w2 = packed.shape
    return cv2.cvtColor(packed.reshape(h, w2 // 2, 2), cv2.COLOR_YUV2BGR_YUYV)


def host_decode(reference, plan: SsdDecodePlan, encodings: np.ndarray, logits: np.ndarray):
    """Candidates from the host reference: (boxes, scores, classes, found)."""
    reference.lib.ssd_reference.argtypes = [ctypes.c_void_p]
    encodings, logits = np.ascontiguousarray(encodings, np.float32), np.ascontiguousarray(logits, np.float32)
    out = plan.output_buffers()
    params = plan.bound(
        encodings.ctypes.data, logits.ctypes.data, plan.anchors.ctypes.data,
        out["boxes"].ctypes.data, out["scores"].ctypes.data, out["classes"].ctypes.data, out["count"].ctypes.data,
    )  # fmt: skip
    reference.lib.ssd_reference(ctypes.byref(params))
    found = int(out["count"][0])
    n = min(found, plan.capacity)
    return out["boxes"][:n], out["scores"][:n], out["classes"][:n], found


def host_yolo(reference, plan: YoloDecodePlan, output: np.ndarray):
    """Candidates of the YOLO decode's host build: (boxes, scores, classes, found)."""
    reference.lib.yolo_reference.argtypes = [ctypes.c_void_p]
    output = np.ascontiguousarray(output, np.float32)
    out = plan.output_buffers()
    params = plan.bound(output.ctypes.data, out["boxes"].ctypes.data, out["scores"].ctypes.data, out["classes"].ctypes.data, out["count"].ctypes.data)
    reference.lib.yolo_reference(ctypes.byref(params))
    found = int(out["count"][0])
    n = min(found, plan.capacity)
    return out["boxes"][:n], out["scores"][:n], out["classes"][:n], found


def yolo_outputs(layout: str, rows: int = 8400, classes: int = 80) -> np.ndarray:
    """Mostly background, some confident rows, tied best classes, and scores at the 0.25 threshold's edge."""
    rng = np.random.default_rng(11)
    head = 5 if layout == "v5" else 4
    out = np.empty((rows, head + classes), np.float32)
    out[:, 0:2] = rng.uniform(0, 640, (rows, 2))
    out[:, 2:4] = rng.uniform(4, 300, (rows, 2))
    out[:, head:] = rng.uniform(0, 0.2, (rows, classes))
    hot = rng.choice(rows, 400, replace=False)
    out[hot, head + rng.integers(0, classes, 400)] = rng.uniform(0.3, 1.0, 400)
    out[hot[:50], head + 7] = out[hot[:50], head + 3] = 0.9  # ties: the first class wins
    if layout == "v5":
        out[:, 4] = rng.uniform(0.5, 1.0, rows)
        out[hot[50:100], 4] = 1.0
    out[hot[50:75], head:] = np.float32(0.25)  # at the edge: not above the threshold
    out[hot[75:100], head + 1] = np.nextafter(np.float32(0.25), np.float32(1))
    return np.ascontiguousarray(out[None] if layout == "v5" else out.T[None])
