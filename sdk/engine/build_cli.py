"""`python -m sdk engine build`: the engine build as the device runs it, driven by the host over SSH.

    python -m sdk engine build --plan plan.json --model model.onnx --out DIR
                               [--calibration FILE] [--timing-cache FILE] [--contract JSON]

One JSON event per line on stdout (`start`, `done` with TensorRT's placement, or `error` with the
message and hint), so the host can stream progress and turn a failure into the same SdkError.
Writes DIR/model.engine, DIR/placement.json, DIR/engine_layers.json (the engine inspector's layer
list) and DIR/timing.cache.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

from sdk.engine.build_plan import BuildPlan
from sdk.errors import SdkError

CONTRACT_DEFAULTS = {"core": 0, "gpu_fallback": "allowed", "max_gpu_layers": None, "max_transitions": None}


def _event(**fields) -> None:
    sys.stdout.write(json.dumps(fields, sort_keys=True) + "\n")
    sys.stdout.flush()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m sdk engine build")
    parser.add_argument("command", choices=("build",))
    parser.add_argument("--plan", type=Path, required=True)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--calibration", type=Path)
    parser.add_argument("--timing-cache", type=Path)
    parser.add_argument("--contract", help="the pipeline's model.dla as JSON")
    args = parser.parse_args(argv)
    try:
        from sdk.engine.trt_adapter import TensorRTBuilder

        plan = BuildPlan.from_dict(json.loads(args.plan.read_text()))
        # The host validated model.dla; the device (which may have no pydantic yet) only reads its values.
        contract = SimpleNamespace(**{**CONTRACT_DEFAULTS, **json.loads(args.contract)}) if args.contract else None
        _event(event="start", tensorrt=plan.tensorrt, device=plan.device, dla_core=plan.dla_core)
        built = TensorRTBuilder(plan, args.model, args.calibration, args.timing_cache, contract)()
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "model.engine").write_bytes(built.plan)
        (args.out / "placement.json").write_text(json.dumps(asdict(built.placement), indent=2) + "\n")
        (args.out / "engine_layers.json").write_text(built.layers)
        if built.timing_cache is not None:
            (args.out / "timing.cache").write_bytes(built.timing_cache)
        if built.int8_unscaled:  # TensorRT keeps their layers out of INT8: said, and kept in the build record
            names = ", ".join(built.int8_unscaled[:8]) + (f" and {len(built.int8_unscaled) - 8} more" if len(built.int8_unscaled) > 8 else "")
            _event(event="warning", message=f"{len(built.int8_unscaled)} tensors have no INT8 scale, their layers stay out of INT8: {names}")
        _event(event="done", placement=asdict(built.placement), engine_bytes=len(built.plan), int8_unscaled=list(built.int8_unscaled))
        return 0
    except SdkError as exc:
        _event(event="error", kind=type(exc).__name__, message=exc.message, hint=exc.hint)
        return 1
