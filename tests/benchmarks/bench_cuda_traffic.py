"""Report: DRAM bytes per frame of the fused preprocessing kernel vs the minimum, and the predicted time on AGX Orin.

minimum   = read the cropped source once + write the output once (PreprocessPlan.minimum_bytes)
modelled  = every 32-byte sector of the source that some bilinear tap touches, fetched once per frame,
            + the output written once (warps store 32 consecutive pixels: whole sectors).
The model assumes a sector stays in L2 between the taps of neighbouring output rows: the rows in
flight at once (a few hundred blocks of 32x8 pixels) span a few source rows, a few hundred KiB against
Orin's 4 MiB L2. Time = modelled bytes / 204.8 GB/s (AGX Orin 64 GB LPDDR5 peak): a lower bound.
On Jetson the frame is read in place from mapped pinned memory (no copy); on a discrete GPU the
H2D copy adds the source bytes once more over PCIe. An NV12 source is 1.5 bytes a pixel (Y, then the
2x2-subsampled U, V pairs) against 3 for BGR: the kernel reads half the bytes of the same frame.

With --ptx (the build's preprocess.compute_87.ptx) it also estimates instruction issue time: PTX
instructions of the kernel (a proxy for SASS; both branches counted) x output pixels, over AGX Orin's
16 SMs x 4 schedulers x 32 lanes at 1.3 GHz. Whichever bound is larger is the better prediction.

    python tests/benchmarks/bench_cuda_traffic.py [--ptx build/plugins_cuda/preprocess.compute_87.ptx] [--smoke]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from sdk.gpu.plan import PreprocessPlan  # noqa: E402
from sdk.spec.schema import Preprocess  # noqa: E402

ORIN_BYTES_PER_S = 204.8e9
ORIN_LANE_INSTRUCTIONS_PER_S = 16 * 4 * 32 * 1.3e9
SECTOR = 32


def tap_rows_and_columns(plan: PreprocessPlan) -> tuple[np.ndarray, np.ndarray]:
    """Absolute source rows and columns the bilinear taps read (the clamping of pp_sample)."""
    g = plan.geometry
    ax, bx, ay, by = (np.float32(v) for v in g.sampling())
    sx = ax * np.arange(g.content_width, dtype=np.float32) + bx
    sy = ay * np.arange(g.content_height, dtype=np.float32) + by
    x0, y0 = np.floor(sx).astype(np.int64), np.floor(sy).astype(np.int64)
    cols = np.unique(np.clip(np.concatenate([x0, x0 + 1]), 0, g.crop_width - 1)) + g.crop_x
    rows = np.unique(np.clip(np.concatenate([y0, y0 + 1]), 0, g.crop_height - 1)) + g.crop_y
    return rows, cols


def sectors(byte_columns: np.ndarray, rows: np.ndarray, pitch: int) -> int:
    """Distinct 32-byte sectors covering these byte columns in these rows (rows start at row * pitch)."""
    starts = rows[:, None] * pitch + byte_columns[None, :]
    return int(np.unique(starts // SECTOR).size)


def modelled_bytes(plan: PreprocessPlan) -> int:
    rows, cols = tap_rows_and_columns(plan)
    fmt = plan.source_format
    if fmt in ("bgr8", "rgb8"):
        read = sectors((3 * cols[:, None] + np.arange(3)).reshape(-1), rows, plan.source_pitch)
    elif fmt == "yuyv":
        read = sectors(((np.unique(cols // 2) * 4)[:, None] + np.arange(4)).reshape(-1), rows, plan.source_pitch)
    else:  # nv12: luma taps, then the chroma pair of each tap's 2x2 block
        luma = sectors(cols, rows, plan.source_pitch)
        chroma = sectors(((2 * np.unique(cols // 2))[:, None] + np.arange(2)).reshape(-1), np.unique(rows // 2), plan.uv_pitch)
        read = luma + chroma
    return read * SECTOR + plan.output_bytes


CASES = [
    (
        "example: vtest 768x576 BGR -> 300x300 f32 NCHW (asymmetric)",
        "bgr8",
        768,
        576,
        {"resize": {"width": 300, "height": 300, "coordinates": "asymmetric"}},
        None,
    ),
    (
        "example as NV12: vtest 768x576 NV12 -> 300x300 f32 NCHW",
        "nv12",
        768,
        576,
        {"resize": {"width": 300, "height": 300, "coordinates": "asymmetric"}},
        None,
    ),
    (
        "1080p NV12 (Argus) -> 640x640 letterbox f16 NCHW",
        "nv12",
        1920,
        1080,
        {"resize": {"width": 640, "height": 640, "mode": "letterbox"}, "dtype": "float16"},
        None,
    ),
    ("1080p NV12 -> 640x640 letterbox INT8 NCHW", "nv12", 1920, 1080, {"resize": {"width": 640, "height": 640, "mode": "letterbox"}}, 1 / 127),
    (
        "720p YUYV (USB) -> 416x416 letterbox f32 NHWC",
        "yuyv",
        1280,
        720,
        {"resize": {"width": 416, "height": 416, "mode": "letterbox"}, "layout": "nhwc"},
        None,
    ),
    ("1080p BGR -> 1280x736 f16 NCHW (mild downscale)", "bgr8", 1920, 1080, {"resize": {"width": 1280, "height": 736}, "dtype": "float16"}, None),
    ("4K NV12 -> 960x544 f16 NCHW (4x downscale)", "nv12", 3840, 2160, {"resize": {"width": 960, "height": 544}, "dtype": "float16"}, None),
    ("VGA BGR -> 1024x768 f32 NCHW (upscale)", "bgr8", 640, 480, {"resize": {"width": 1024, "height": 768}}, None),
]


def ptx_instructions(ptx: str, kernel: str) -> int:
    start = ptx.index(f".entry {kernel}(")
    end = ptx.find(".entry ", start + 1)
    lines = (line.strip() for line in ptx[start : end if end > 0 else None].splitlines())
    return sum(1 for line in lines if line.endswith(";") and not line.startswith((".reg", ".param", ".local", ".shared", "//")))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ptx", type=Path, help="the build's preprocess.compute_87.ptx, for the instruction-issue estimate")
    parser.add_argument("--smoke", action="store_true", help="one short round with tiny sizes: proves the script runs (CI); its numbers mean nothing")
    args = parser.parse_args()
    ptx = args.ptx.read_text() if args.ptx else None
    print(f"{'case':58} {'minimum':>10} {'modelled':>10} {'ratio':>6} {'Orin us':>8}" + (f" {'PTX/px':>6} {'issue us':>8}" if ptx else ""))
    for label, fmt, w, h, spec, int8_scale in CASES[:3] if args.smoke else CASES:
        plan = PreprocessPlan.build(Preprocess(**spec), fmt, w, h, int8_scale=int8_scale)
        minimum, modelled = plan.minimum_bytes(), modelled_bytes(plan)
        line = f"{label:58} {minimum:>10,} {modelled:>10,} {modelled / minimum:>6.3f} {modelled / ORIN_BYTES_PER_S * 1e6:>8.1f}"
        if ptx:
            per_pixel = ptx_instructions(ptx, plan.kernel)
            pixels = plan.geometry.out_width * plan.geometry.out_height
            line += f" {per_pixel:>6} {pixels * per_pixel / ORIN_LANE_INSTRUCTIONS_PER_S * 1e6:>8.1f}"
        print(line)


if __name__ == "__main__":
    main()
