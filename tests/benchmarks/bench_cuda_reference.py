"""Report: max |host reference - OpenCV CPU path| per input format, output type and layout on real frames,
and the ptxas registers per kernel. Builds plugins_cuda (host reference + kernels) in a temporary folder.

    python tests/benchmarks/bench_cuda_reference.py [--frames 0,119,400,700] [--smoke]

Differences are in 8-bit input steps (LSB): the output difference divided by the largest gain
(scale / std); uint8 and int8 in output steps. `--smoke`: frame 0 and the first resize only, and only the host
reference library built (no kernels, no pp_run).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import cv2
import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from sdk.gpu.nvrtc import resource_usage  # noqa: E402
from sdk.gpu.plan import PreprocessPlan  # noqa: E402
from sdk.preprocess import CpuPreprocessor  # noqa: E402
from sdk.spec.schema import Preprocess  # noqa: E402
from tests.plugins_cuda.helpers import HostReference, nv12_to_bgr, to_nv12, to_yuyv, yuyv_to_bgr  # noqa: E402

IMAGENET = {"scale": 1 / 255, "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}
INT8_SCALE = 2.64 / 127
RESIZES = [
    {"width": 300, "height": 300, "coordinates": "asymmetric"},
    {"width": 640, "height": 640, "mode": "letterbox"},
    {"width": 1024, "height": 768, "coordinates": "align_corners"},
]


def video() -> Path:
    """The example's own copy of the real recording (pipelines/assets)."""
    return REPO / "pipelines" / "assets" / "vtest.avi"


def frames(indices: list[int]) -> list[np.ndarray]:
    capture = cv2.VideoCapture(str(video()))
    out = []
    for index in range(max(indices) + 1):
        ok, image = capture.read()
        if ok and index in indices:
            out.append(image)
    return out


def source_for(fmt: str, image: np.ndarray):
    if fmt == "nv12":
        y, uv = to_nv12(image)
        return y, uv, nv12_to_bgr(y, uv)
    if fmt == "yuyv":
        packed = to_yuyv(image)
        return packed, None, yuyv_to_bgr(packed)
    return (image if fmt == "bgr8" else np.ascontiguousarray(image[:, :, ::-1])), None, image


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--frames", default="0,119,400,700")
    parser.add_argument("--smoke", action="store_true", help="one short round with tiny sizes: proves the script runs (CI); its numbers mean nothing")
    args = parser.parse_args()
    resizes = RESIZES[:1] if args.smoke else RESIZES
    if args.smoke:
        args.frames = "0"
    with tempfile.TemporaryDirectory() as build:
        options = ["-DPLUGINS_CUDA_KERNELS=OFF"] if args.smoke else []  # smoke: the host reference only, no nvcc build
        subprocess.run(["cmake", "-S", str(REPO / "plugins_cuda"), "-B", build, *options], check=True, capture_output=True)
        only = ["--target", "pp_reference"] if args.smoke else []  # smoke: the library this script loads, not pp_run
        subprocess.run(["cmake", "--build", build, "-j", "2", *only], check=True, capture_output=True)
        reference = HostReference(Path(build) / "libpp_reference.so")
        worst: dict[tuple, float] = defaultdict(float)
        images = frames([int(i) for i in args.frames.split(",")])
        if not images:
            raise SystemExit(f"no frames read from {video()}")
        for image in images:
            h, w = image.shape[:2]
            for fmt in ("bgr8", "rgb8", "nv12", "yuyv"):
                src, uv, seen = source_for(fmt, image)
                for dtype in ("float32", "float16", "uint8", "int8"):
                    for layout in ("nchw", "nhwc"):
                        for resize in resizes:
                            spec_dtype = "float32" if dtype == "int8" else dtype
                            spec = Preprocess(resize=resize, layout=layout, dtype=spec_dtype, normalize=IMAGENET if dtype != "uint8" else {})
                            plan = PreprocessPlan.build(spec, fmt, w, h, int8_scale=INT8_SCALE if dtype == "int8" else None)
                            ours = reference.run(plan, src, uv).astype(np.float64)
                            cpu = np.zeros(spec.tensor_shape, spec.dtype)
                            CpuPreprocessor(spec, cpu)(seen)
                            if dtype == "int8":
                                cpu = np.clip(np.rint(cpu / np.float32(INT8_SCALE)), -128, 127)
                            diff = np.abs(ours - cpu.astype(np.float64)).max()
                            if dtype in ("float32", "float16"):
                                diff /= max(IMAGENET["scale"] / s for s in IMAGENET["std"])
                            worst[(fmt, dtype, layout)] = max(worst[(fmt, dtype, layout)], float(diff))
        print(f"{'format':6} {'dtype':8} {'layout':6} {'max diff':>10}  (float: 8-bit steps; uint8/int8: output steps)")
        for (fmt, dtype, layout), value in sorted(worst.items()):
            print(f"{fmt:6} {dtype:8} {layout:6} {value:>10.4f}")
        for arch in (87, 110):
            report = Path(build) / f"preprocess.sm_{arch}.ptxas.txt"
            if report.is_file():
                usage = resource_usage(report.read_text())
                by_format = defaultdict(list)
                for name, r in usage.items():
                    by_format[name.split("_")[1]].append(r.registers)
                spills = sum(r.spill_stores + r.spill_loads for r in usage.values())
                summary = ", ".join(f"{f} {min(v)}-{max(v)}" for f, v in sorted(by_format.items()))
                print(f"sm_{arch}: {len(usage)} kernels, registers {summary}; spill bytes {spills}")


if __name__ == "__main__":
    main()
