"""The kernels' numpy twins: what plugins_cuda's kernels compute, driven by the same bound parameter blocks.

Used by the emulated device (sdk/gpu/emulation.py) when no CMake-built host reference library is
given. Each twin reads its inputs and writes its outputs at the addresses the parameter block holds,
as the kernel does, so a wrong address, stride or size in the wiring gives wrong results here too.
The arithmetic follows plugins_cuda/include/pp_math.cuh and ssd_decode.cuh step for step in float32;
each fused multiply-add is computed in float64 and rounded once (exact where the product fits 53 bits,
else off by at most one float32 ulp, against the C++ reference: tests/plugins_cuda/test_reference_twin.py).
Every source format: bgr8, rgb8, and nv12 / yuyv converted with the block's YUV coefficients (pp_yuv_to_bgr).
"""

from __future__ import annotations

import ctypes

import numpy as np

from sdk.errors import BackendError
from sdk.gpu.decode import SsdParams, YoloParams
from sdk.gpu.params import PpParams
from sdk.pixels import yuv_to_bgr

_DTYPES = {"f32": np.float32, "f16": np.float16, "u8": np.uint8, "i8": np.int8}
F32 = np.float32


def memory(address: int, nbytes: int, dtype=np.uint8) -> np.ndarray:
    """The bytes at a host address as a writable numpy array (an emulated device pointer's contents)."""
    if not address:
        raise BackendError("a kernel was given a null pointer")
    return np.frombuffer((ctypes.c_ubyte * nbytes).from_address(address), dtype)


def _fma(a, b, c) -> np.ndarray:
    """a * b + c in float64 (the inputs cast exactly, inside the ufuncs: no float64 copies of them), rounded once."""
    return np.add(np.multiply(a, b, dtype=np.float64), c, dtype=np.float64).astype(F32)


def _axis(scale: float, offset: float, size: int, crop: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    s = _fma(F32(scale), np.arange(size, dtype=F32), F32(offset))
    first = np.floor(s)
    weight = (s - first).astype(F32)
    first = first.astype(np.int64)
    return np.clip(first, 0, crop - 1), np.clip(first + 1, 0, crop - 1), weight


def _crop_bgr(p: PpParams, source_format: str) -> np.ndarray:
    """The crop's pixels as uint8 B, G, R (pp_fetch for every pixel of the crop), read at the block's addresses."""
    rows = p.crop_y + p.crop_h
    x_end = p.crop_x + p.crop_w
    if source_format in ("bgr8", "rgb8"):
        source = memory(p.src, rows * p.src_pitch).reshape(rows, p.src_pitch)
        crop = source[p.crop_y :, 3 * p.crop_x : 3 * x_end].reshape(p.crop_h, p.crop_w, 3)
        return crop[..., ::-1] if source_format == "rgb8" else crop
    ys = np.arange(p.crop_y, rows)
    xs = np.arange(p.crop_x, x_end)
    if source_format == "nv12":
        luma = memory(p.src, (rows - 1) * p.src_pitch + x_end)
        chroma_rows = (rows + 1) // 2
        chroma = memory(p.src_uv, (chroma_rows - 1) * p.uv_pitch + 2 * ((x_end + 1) // 2))
        y = luma[ys[:, None] * p.src_pitch + xs[None, :]]
        pair = (ys[:, None] >> 1) * p.uv_pitch + 2 * (xs[None, :] >> 1)
        u, v = chroma[pair], chroma[pair + 1]
    elif source_format == "yuyv":
        packed = memory(p.src, (rows - 1) * p.src_pitch + 4 * ((x_end + 1) // 2))
        macro = ys[:, None] * p.src_pitch + 4 * (xs[None, :] >> 1)
        y, u, v = packed[macro + 2 * (xs[None, :] & 1)], packed[macro + 1], packed[macro + 3]
    else:
        raise BackendError(f"the numpy twin of the preprocessing kernel has no source format {source_format!r}")
    return yuv_to_bgr(y, u, v, p.yuv[:])


def preprocess(p: PpParams, source_format: str, dtype: str, layout: str) -> None:
    """pp_<format>_<dtype>_<layout> over every output pixel."""
    crop = _crop_bgr(p, source_format)
    x0, x1, fx = _axis(p.ax, p.bx, p.content_w, p.crop_w)
    y0, y1, fy = _axis(p.ay, p.by, p.content_h, p.crop_h)
    fx, fy = fx[None, :, None], fy[:, None, None]
    top_rows, bottom_rows = crop[y0], crop[y1]  # gathered as bytes, converted after: only the sampled pixels
    c00, c01, c10, c11 = (rows[:, cols].astype(F32) for rows, cols in ((top_rows, x0), (top_rows, x1), (bottom_rows, x0), (bottom_rows, x1)))
    top = _fma(fx, c01 - c00, c00)
    bottom = _fma(fx, c11 - c10, c10)
    sampled = _fma(fy, bottom - top, top)  # B, G, R
    canvas = np.full((p.out_h, p.out_w, 3), F32(p.pad_value), F32)  # B, G, R
    canvas[p.pad_y : p.pad_y + p.content_h, p.pad_x : p.pad_x + p.content_w] = sampled
    if p.channels == 1:  # OpenCV's float BGR2GRAY weights, as pp_pixel
        b, g, r = canvas[..., 0], canvas[..., 1], canvas[..., 2]
        planes = [_fma(F32(0.299), r, _fma(F32(0.587), g, F32(0.114) * b))]
    else:
        planes = [canvas[..., p.pick[c]] for c in range(3)]
    out_type = _DTYPES[dtype]
    n = p.channels * p.out_h * p.out_w
    dst = memory(p.dst, n * np.dtype(out_type).itemsize, out_type)
    dst = dst.reshape(p.channels, p.out_h, p.out_w) if layout == "nchw" else dst.reshape(p.out_h, p.out_w, p.channels)
    for c, value in enumerate(planes):
        if dtype == "u8":
            stored = (value + F32(0.5)).astype(np.uint8)
        else:
            normalised = _fma(value, F32(p.gain[c]), F32(p.offset[c]))
            if dtype == "f32":
                stored = normalised
            elif dtype == "f16":
                stored = normalised.astype(np.float16)
            else:  # QuantizeLinear, zero point 0: round half to even, saturate
                stored = np.clip(np.rint(normalised / F32(p.quant_scale)), -128, 127).astype(np.int8)
        if layout == "nchw":
            dst[c] = stored
        else:
            dst[:, :, c] = stored


def _append(count_address: int, capacity: int, outputs: tuple[int, int, int], boxes, scores, classes) -> None:
    """Candidates claimed in order (pp_claim): the counter counts every one, the lists keep those below capacity."""
    counter = memory(count_address, 4, np.uint32)
    start = int(counter[0])
    counter[0] = start + len(scores)
    room = max(0, min(len(scores), capacity - start))
    if room:
        box_out = memory(outputs[0], 16 * capacity, F32).reshape(capacity, 4)
        box_out[start : start + room] = boxes[:room]
        memory(outputs[1], 4 * capacity, F32)[start : start + room] = scores[:room]
        memory(outputs[2], 4 * capacity, np.int32)[start : start + room] = classes[:room]


def ssd_decode(p: SsdParams) -> None:
    """ssd_anchor over every anchor, in anchor order then class order (the host reference's claim order)."""
    n, k = p.count, p.classes
    logits = memory(p.logits, 4 * n * k, F32).reshape(n, k)
    encodings = memory(p.encodings, 16 * n, F32).reshape(n, 4)
    anchors = memory(p.anchors, 16 * n, F32).reshape(n, 4)
    threshold = F32(p.threshold)
    first = p.first_class
    with np.errstate(over="ignore", invalid="ignore"):
        if p.softmax:
            top = logits.max(axis=1, keepdims=True)
            shifted = np.exp(logits - top)
            denominator = np.cumsum(shifted, axis=1, dtype=F32)[:, -1:]  # summed in class order
            probabilities = (shifted / denominator).astype(F32)
            anchor, cls = np.nonzero(probabilities[:, first:] > threshold)
            scores = probabilities[anchor, cls + first]
        else:
            anchor, cls = np.nonzero(logits[:, first:] > threshold)
            scores = (F32(1) / (F32(1) + np.exp(-logits[anchor, cls + first]))).astype(F32)
        scale = np.array(p.scale[:], F32)
        e, a = encodings[anchor], anchors[anchor]
        t = (e / scale).astype(F32)
        h, w = (np.exp(t[:, 2]) * a[:, 2]).astype(F32), (np.exp(t[:, 3]) * a[:, 3]).astype(F32)
        cy, cx = t[:, 0] * a[:, 2] + a[:, 0], t[:, 1] * a[:, 3] + a[:, 1]
        half_w, half_h = F32(0.5) * w, F32(0.5) * h
        boxes = np.stack([cx - half_w, cy - half_h, cx + half_w, cy + half_h], axis=1).astype(F32)
    if p.clip:
        np.clip(boxes, 0, 1, out=boxes)
        kept = (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])
        boxes, scores, cls = boxes[kept], scores[kept], cls[kept]
    boxes[:, 0::2] *= F32(p.net_w)
    boxes[:, 1::2] *= F32(p.net_h)
    _append(p.out_count, p.capacity, (p.out_boxes, p.out_scores, p.out_classes), boxes, scores, cls.astype(np.int32))


def yolo_decode(p: YoloParams) -> None:
    """yolo_row over every candidate row, in row order."""
    width = p.head + p.classes
    flat = memory(p.rows, 4 * p.count * width, F32)
    rows = np.lib.stride_tricks.as_strided(flat, (p.count, width), (4 * p.row_stride, 4 * p.col_stride), writeable=False)
    class_scores = rows[:, p.head :]
    best = class_scores.argmax(axis=1)  # the first of equal maxima, as the kernel's strict >
    scores = class_scores[np.arange(p.count), best]
    if p.objectness:
        scores = (scores * rows[:, 4]).astype(F32)
    keep = np.nonzero(scores > F32(p.threshold))[0]
    chosen = rows[keep]
    half_w, half_h = F32(0.5) * chosen[:, 2], F32(0.5) * chosen[:, 3]
    boxes = np.stack([chosen[:, 0] - half_w, chosen[:, 1] - half_h, chosen[:, 0] + half_w, chosen[:, 1] + half_h], axis=1).astype(F32)
    _append(p.out_count, p.capacity, (p.out_boxes, p.out_scores, p.out_classes), boxes, scores[keep].astype(F32), best[keep].astype(np.int32))
