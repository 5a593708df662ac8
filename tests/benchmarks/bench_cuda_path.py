"""Report: bytes moved per frame by the runtime's CUDA path against the minimum and the CPU path, on paper for
AGX Orin (204.8 GB/s), and the host time per frame of the emulated wiring (SDK_CUDA_EMULATION=host).

Bytes per frame, from the plans (the example: 768x576 BGR -> 300x300 f32 NCHW, SSD 1917 anchors x 2 logits):
  minimum   the input frame read once + the tensor written once (the brief's floor); for an NV12 source
            the frame is 1.5 bytes a pixel (Y plane + interleaved U, V at half resolution) instead of 3;
  CUDA path the frame copied once into the pinned buffer (read + write), the fused kernel's modelled DRAM
            traffic (bench_cuda_traffic.py: tap sectors read + tensor written), the decode kernel reading the
            engine's outputs and the anchors, and the candidates (count + 24 bytes each) written and copied back;
            on a discrete GPU the pinned frame also crosses PCIe once (H2D); an NV12 frame that the
            source holds in memory the GPU reads (Nv12Image.device) is not copied at all;
  CPU path  (today's path with a TensorRT engine) OpenCV on the CPU: the frame read, the crop converted to
            float32 (written, read), the warped canvas written and read, the tensor written to pinned memory,
            copied to the device (read + write), the outputs copied back (read + write) and read by the decoder.
The engine's own traffic is the same in both and not counted. Orin us = bytes / 204.8 GB/s: a lower bound.

Host time: one frame through CudaPreprocessor + DeviceDecoder on the emulated device (buffers, bounds checks,
parameter blocks, events, copies, the twins, host NMS); the twins alone on the same parameter blocks; and the
stages with the twins replaced by no-ops = the wiring alone. Each the median of batches of frames.

    python tests/benchmarks/bench_cuda_path.py [--frames 40] [--smoke]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "benchmarks"))

from bench_cuda_traffic import ORIN_BYTES_PER_S, modelled_bytes  # noqa: E402

from sdk.gpu import reference  # noqa: E402
from sdk.gpu.decode import SsdDecodePlan  # noqa: E402
from sdk.gpu.plan import PreprocessPlan  # noqa: E402
from sdk.gpu.session import DeviceChoice  # noqa: E402
from sdk.postprocess.device import DeviceDecoder  # noqa: E402
from sdk.preprocess.cuda import CudaPreprocessor  # noqa: E402
from sdk.spec import load_pipeline  # noqa: E402

EXAMPLE = REPO / "pipelines" / "pedestrian.yaml"
ANCHORS, LOGITS, CANDIDATES = 1917, 2, 10


class HostBackend:
    """An engine's bindings as the ONNX Runtime backend holds them."""

    name = "onnxruntime"

    def __init__(self, spec) -> None:
        self.inputs = {"input": np.zeros(spec.preprocess.tensor_shape, np.float32)}
        self.outputs = {"concat:0": np.zeros((1, ANCHORS, 1, 4), np.float32), "concat_1:0": np.zeros((1, ANCHORS, LOGITS), np.float32)}


def traffic(plan: PreprocessPlan, nv12: PreprocessPlan) -> list[tuple[str, int]]:
    """Rows of (label, bytes per frame); `nv12` is the same pipeline fed NV12 frames of the same size."""
    frame, tensor = plan.source_bytes, plan.output_bytes
    outputs = ANCHORS * 4 * 4 + ANCHORS * LOGITS * 4
    candidates = 4 + CANDIDATES * 24
    g = plan.geometry
    canvas = g.out_width * g.out_height * 3 * 4
    crop_float = g.crop_width * g.crop_height * 3 * 4
    cuda = 2 * frame + modelled_bytes(plan) + outputs + ANCHORS * 16 + 2 * candidates + candidates
    cpu = frame + 2 * crop_float + 2 * canvas + tensor + 2 * tensor + 2 * outputs + outputs
    yuv = nv12.source_bytes + nv12.uv_bytes  # 1.5 bytes a pixel
    decode = outputs + ANCHORS * 16 + 2 * candidates + candidates
    nv12_kernel = modelled_bytes(nv12)
    return [
        ("minimum (frame read once, tensor written once)", frame + tensor),
        ("CUDA path, Jetson (mapped pinned frame)", cuda),
        ("CUDA path, discrete GPU (+ one H2D of the frame)", cuda + frame),
        ("CPU path (OpenCV, tensor and outputs copied)", cpu),
        ("minimum, NV12 source (1.5 B/px read, tensor written)", yuv + tensor),
        ("CUDA path, NV12 copied once into mapped pinned memory", 2 * yuv + nv12_kernel + decode),
        ("CUDA path, NV12 in the source's device memory (no copy)", nv12_kernel + decode),
        ("CUDA path, NV12, discrete GPU (+ one H2D of the planes)", 2 * yuv + nv12_kernel + decode + yuv),
        ("CPU path, NV12 (+ cvtColor: NV12 read, BGR written)", cpu + yuv + frame),
    ]


def per_frame_ms(function, frames: int, batches: int = 5) -> float:
    times = []
    for _ in range(batches):
        started = time.perf_counter()
        for _ in range(frames):
            function()
        times.append((time.perf_counter() - started) / frames * 1e3)
    return float(np.median(times))


def wiring(frames: int) -> tuple[float, float, float]:
    """ms per frame: the emulated stages, the twins alone, the stages with no-op kernels (the wiring)."""
    import cv2

    pipeline = load_pipeline(EXAMPLE, check_files=False)
    spec = pipeline.spec
    capture = cv2.VideoCapture(str(REPO / "pipelines" / "assets" / "vtest.avi"))
    ok, image = capture.read()
    capture.release()
    assert ok
    backend = HostBackend(spec)
    rng = np.random.default_rng(0)
    backend.outputs["concat:0"][...] = rng.normal(0, 1, backend.outputs["concat:0"].shape)
    backend.outputs["concat_1:0"][...] = rng.normal(-6, 2, backend.outputs["concat_1:0"].shape)
    corners = np.sort(rng.uniform(0, 1, (ANCHORS, 4)).astype(np.float32), axis=1)
    pre = CudaPreprocessor(spec.preprocess, backend, DeviceChoice("cuda", "benchmark", emulated=True))
    plan = SsdDecodePlan.build(spec.postprocess, corners, LOGITS, (300, 300))
    post = DeviceDecoder(spec.postprocess, plan, pre.session, {"encodings": "concat:0", "logits": "concat_1:0"})
    post(pre(image))
    stages = per_frame_ms(lambda: post(pre(image)), frames)
    src, dst = image.copy(), np.empty(spec.preprocess.tensor_shape, np.float32)
    pp = pre.plan.bound(src.ctypes.data, dst.ctypes.data)
    out = plan.output_buffers()
    anchors = plan.anchors
    sp = plan.bound(
        backend.outputs["concat:0"].ctypes.data, backend.outputs["concat_1:0"].ctypes.data, anchors.ctypes.data,
        out["boxes"].ctypes.data, out["scores"].ctypes.data, out["classes"].ctypes.data, out["count"].ctypes.data,
    )  # fmt: skip

    def twins_alone() -> None:
        reference.preprocess(pp, "bgr8", "f32", "nchw")
        out["count"][0] = 0
        reference.ssd_decode(sp)

    twins = per_frame_ms(twins_alone, frames)
    from sdk.pixels import Nv12Image

    nv12 = Nv12Image.from_bgr(image)
    pre_nv12 = CudaPreprocessor(spec.preprocess, HostBackend(spec), DeviceChoice("cuda", "benchmark", emulated=True))
    kernels = reference.preprocess, reference.ssd_decode
    reference.preprocess = reference.ssd_decode = lambda *args: None
    try:
        alone = per_frame_ms(lambda: post(pre(image)), frames)
        pre_nv12(nv12)
        alone_nv12 = per_frame_ms(lambda: pre_nv12(nv12), frames)
        alone_bgr = per_frame_ms(lambda: pre(image), frames)
    finally:
        reference.preprocess, reference.ssd_decode = kernels
    pre.close()
    pre_nv12.close()
    return stages, twins, alone, alone_bgr, alone_nv12


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--frames", type=int, default=40)
    parser.add_argument("--smoke", action="store_true", help="a few frames: proves the script runs (CI); its times mean nothing")
    args = parser.parse_args()
    spec = load_pipeline(EXAMPLE, check_files=False).spec
    plan = PreprocessPlan.build(spec.preprocess, "bgr8", 768, 576)
    print(f"bytes per frame, example pipeline ({CANDIDATES} candidates); Orin at {ORIN_BYTES_PER_S / 1e9:.1f} GB/s")
    rows = traffic(plan, PreprocessPlan.build(spec.preprocess, "nv12", 768, 576))
    floor = rows[0][1]
    for label, nbytes in rows:
        print(f"  {label:58} {nbytes:>11,} B  {nbytes / floor:>5.2f} x minimum  {nbytes / ORIN_BYTES_PER_S * 1e6:>7.1f} us")
    stages, twins, alone, alone_bgr, alone_nv12 = wiring(2 if args.smoke else args.frames)
    print(
        f"emulated CUDA path, host ms per frame: stages {stages:.3f}; the kernels' twins alone {twins:.3f}; "
        f"the wiring alone (no-op kernels) {alone:.3f}; the preprocessing stage's wiring alone: BGR frame {alone_bgr:.3f}, "
        f"NV12 frame {alone_nv12:.3f}"
    )


if __name__ == "__main__":
    main()
