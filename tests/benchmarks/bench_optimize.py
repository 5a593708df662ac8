"""`sdk optimize --target local` on real detectors: each candidate's speed-up on ONNX Runtime's CPU backend (measured in
the same run as the original, alternating rounds) beside its accuracy against the original FP32 model on the held-out
frames, the magnitude baseline always beside it, and the whole command's wall time.

    python tests/benchmarks/bench_optimize.py [--smoke] [--yolox] [--out FILE.json]

Models: the example's SSDLite (pipelines/pedestrian.yaml) and, with --yolox, Megvii's YOLOX-Nano
(tests/integration/assets/yolox_nano.onnx) in the pipeline `sdk init` writes for it on the example's clip, with a
`calibration:` section added (the same frames and hold-out as the example's). Each pipeline is copied into a
temporary folder first, so nothing is written beside the project's files.
`--smoke`: the example alone, one plan (2 % saved: fewer allocation steps than 5 %), few
frames and rounds, quick peaks, NumPy on one BLAS thread: the code path, not the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
SHARED = REPO / "tests" / "integration" / "assets"  # YOLOX-Nano, shipped with its provenance
CALIBRATION = "\ncalibration: {frames: 300, holdout_frames: 50, method: percentile}\n"


def example(folder: Path) -> Path:
    shutil.copytree(REPO / "pipelines", folder / "pipelines")
    return folder / "pipelines" / "pedestrian.yaml"


def yolox(folder: Path) -> Path:
    from tools.models.init_pipeline import init_pipeline

    work = folder / "yolox"
    work.mkdir()
    shutil.copyfile(SHARED / "yolox_nano.onnx", work / "yolox_nano.onnx")
    shutil.copyfile(REPO / "pipelines" / "assets" / "vtest.avi", work / "vtest.avi")
    path = init_pipeline(work / "yolox_nano.onnx", source="file://vtest.avi").path
    path.write_text(path.read_text() + CALIBRATION)
    return path


def quick_peaks(pipeline: Path, folder: Path) -> None:
    """This host's peaks for the pipeline's threads from a short measurement, stored where `sdk optimize` reads them."""
    from sdk.spec import load_pipeline
    from tools.perf.host_peaks import measure_peaks, peaks_path, store_peaks
    from tools.state import shared_cache_dir

    spec = load_pipeline(pipeline).spec.model
    path, key = peaks_path(spec.threads, spec.spinning, shared_cache_dir())
    store_peaks(measure_peaks(spec.threads, spec.spinning, folder / "probe", runs=2, passes=1), key, path)  # a probe's fewest runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="the example alone, one small plan: the code path, not the numbers")
    parser.add_argument("--yolox", action="store_true", help="also YOLOX-Nano (tests/integration/assets)")
    parser.add_argument("--out", type=Path, help="write the rows as JSON")
    args = parser.parse_args()
    if args.smoke:  # read when NumPy loads: the test suite's workers already fill the cores; waiting BLAS threads only spin
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from tools.optimize.run import Optimize, Settings

    rows, walls = [], {}
    with tempfile.TemporaryDirectory(prefix="bench-optimize-") as scratch:
        folder = Path(scratch)
        models = {"ssdlite (example)": example(folder)}
        if args.yolox and not args.smoke:
            models["yolox-nano"] = yolox(folder)
        if args.smoke:  # quick peaks (a few runs of each probe, one pass): the code path, not this machine's numbers
            os.environ["SDK_STATE_DIR"] = str(folder / "state")  # so they never stand in for the real ones
            quick_peaks(models["ssdlite (example)"], folder)
        for name, pipeline in models.items():
            small = {"savings": (0.02,), "calibration_frames": 2, "holdout_frames": 2, "rounds": 1, "runs": 1, "fskd": False, "sparsity": False}
            small = small if args.smoke else {}
            started = time.perf_counter()
            Optimize(pipeline, Settings(target="local", report_dir=folder / f"report-{len(walls)}", **small))()
            walls[name] = round(time.perf_counter() - started, 1)
            report = json.loads((folder / f"report-{len(walls) - 1}" / "report.json").read_text())
            for c in report["candidates"]:
                measured, accuracy = c.get("measured") or {}, c.get("accuracy") or {}
                rows.append({"model": name, "candidate": c["name"], "method": c["method"], "speedup": measured.get("speedup"),
                             "speedup_range": measured.get("speedup_range"), "recall": accuracy.get("recall"),
                             "precision": accuracy.get("precision"), "passed": c.get("passed"),
                             "chosen": c["name"] == report.get("chosen")})  # fmt: skip
    if args.smoke:
        print("smoke run: one small plan; the numbers below mean nothing")
    print(f"{'model':18s} {'candidate':32s} {'speed-up':>8s} {'range':>13s} {'recall':>6s} {'prec.':>6s} gate")
    for r in rows:
        low, high = r["speedup_range"] or (0, 0)
        gate = ("pass" if r["passed"] else "fail") + (" (chosen)" if r["chosen"] else "")
        print(f"{r['model']:18s} {r['candidate'][:32]:32s} {r['speedup'] or 0:7.2f}x {low:5.2f}-{high:5.2f}x "
              f"{r['recall'] or 0:6.3f} {r['precision'] or 0:6.3f} {gate}")  # fmt: skip
    for name, wall in walls.items():
        print(f"sdk optimize {name}: {wall} s")
    if args.out:
        args.out.write_text(json.dumps({"rows": rows, "wall_s": walls}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
