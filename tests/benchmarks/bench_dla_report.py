"""Report: the example detector's predicted DLA placement and engine precision mix, per platform and TensorRT.

    python tests/benchmarks/bench_dla_report.py [--smoke]

For each (platform, TensorRT) it prepares the example model, runs the DLA analysis (layers on DLA,
subgraphs, transitions, reformats, analysis time) and plans an INT8 build on DLA core 0 with GPU
fallback (or for the GPU where there is no DLA), printing the plan's predicted precision mix.
These are predictions: TensorRT decides on the device.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from sdk.engine.build_plan import plan_build  # noqa: E402
from sdk.engine.platforms import TensorRTVersion, dla_availability  # noqa: E402
from sdk.spec import load_pipeline  # noqa: E402
from sdk.spec.schema import DlaPlacement  # noqa: E402
from tools.dla.analysis import analyse  # noqa: E402
from tools.dla.graph import load_graph  # noqa: E402
from tools.models.prepare import PrepareModel  # noqa: E402

CASES = (("jetson-agx-orin", "10.3"), ("drive-orin", "8.6.1"), ("jetson-orin-nx", "10.3"), ("jetson-thor", "10.13"), ("jetson-agx-orin", "11.4"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="one short round with tiny sizes: proves the script runs (CI); its numbers mean nothing")
    args = parser.parse_args()
    pipeline = load_pipeline(REPO / "pipelines" / "pedestrian.yaml")
    model = PrepareModel(pipeline, Path(tempfile.mkdtemp()))().model_path
    print("| platform | TensorRT | layers | on DLA | on GPU | DLA subgraphs | transitions | reformats (max) | precision mix (INT8 plan) | analysis |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    notes = None
    for platform, version in CASES[:1] if args.smoke else CASES:
        tensorrt = TensorRTVersion.parse(version)
        availability = dla_availability(platform, tensorrt)
        start = time.perf_counter()
        report = analyse(load_graph(model), str(model), platform, tensorrt, availability, "int8")
        seconds = time.perf_counter() - start
        dla = DlaPlacement() if availability.available else None
        predicted = tuple((v.name, v.layer, v.device) for v in report.layers)
        plan = plan_build(tensorrt, {"Preprocessor/sub:0": (1, 3, 300, 300)}, "int8", dla, availability.cores, predicted)
        mix = ", ".join(f"{k.upper()} {v}" for k, v in plan.precision_mix().items())
        print(
            f"| {platform} | {tensorrt} | {len(report.layers)} | {report.dla_layers} | {report.gpu_layers} | {len(report.subgraphs)} | "
            f"{report.transitions} | {report.reformats} | {mix} | {seconds * 1000:.0f} ms |"
        )
        notes = report.recommendations if notes is None else notes
    for note in notes:
        print("recommend:", note)


if __name__ == "__main__":
    main()
