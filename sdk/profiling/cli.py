"""`python -m sdk profile`: per-layer times of a release's model (or a prepared model) on this device's backend.

    python -m sdk profile --release DIR --out DIR [--frames N] [--warmup N]
    python -m sdk profile --pipeline FILE --artifacts DIR --out DIR [...] [--reference DIR]

The backend is the one the runtime would choose for this pipeline here (model.backend; `auto`: the release's TensorRT
engine where a CUDA device is, else ONNX Runtime on the CPU), with the pipeline's threads, spinning and batch. It
writes OUT/profile.json (the raw per-node times per frame) and, on ONNX Runtime, OUT/optimized.onnx, and prints one
JSON line with the backend and the files. `--reference DIR` (ONNX Runtime only): the host's reference probes, run
between the frames to measure the machine's speed at the moment of the profile (sdk/profiling/reference.py). It never
judges: exit 0 when the profile was written, 1 on an error.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sdk.errors import SdkError
from sdk.profiling import RAW_FILE
from sdk.runtime.arguments import add_what_runs, what_runs


def _constants(pipeline, feeds_dtype_shape: dict) -> dict:
    """model.inputs as arrays of the model's own shapes and types."""
    import numpy as np

    from sdk.runtime.constants import _write

    found = {}
    for name, values in dict(pipeline.spec.model.inputs).items():
        if name in feeds_dtype_shape:
            shape, dtype = feeds_dtype_shape[name]
            buffer = np.zeros(shape, dtype)
            _write(buffer, name, values, Path(name))
            found[name] = buffer
    return found


def profile(pipeline, artifacts, out_dir: Path, frames: int, warmup: int, reference: Path | None = None) -> dict:
    """Profile the pipeline's model on the backend the runtime would use here; returns the raw profile. `reference`
    (ONNX Runtime only): the folder of reference probes to run between the frames."""
    from sdk.backends import _cuda_device

    spec = pipeline.spec
    batch = len(spec.cameras) if spec.batch.size == "cameras" else 1
    engine = artifacts.engine_path
    use_tensorrt = spec.model.backend == "tensorrt" or (spec.model.backend == "auto" and engine.is_file() and _cuda_device())
    if use_tensorrt:
        from sdk.profiling.tensorrt_profile import profile_tensorrt

        core = spec.model.dla.core if spec.model.dla is not None else None
        return profile_tensorrt(engine, frames=frames, warmup=warmup, dla_core=core, batch=batch, declared=artifacts.declared_tensors())
    from sdk.profiling.onnxruntime_profile import profile_onnxruntime

    model = artifacts.model_for(spec.model.precision)
    constants = _constants(pipeline, _input_shapes(model, batch)) if spec.model.inputs else None
    return profile_onnxruntime(
        model, out_dir, frames=frames, warmup=warmup, threads=spec.model.threads, spinning=spec.model.spinning, batch=batch,
        constants=constants, reference=reference,
    )  # fmt: skip


def _input_shapes(model: Path, batch: int) -> dict:
    """name -> (shape, dtype) of the model's inputs, read by ONNX Runtime (a dynamic first dimension is the batch)."""
    import onnxruntime as ort

    from sdk.profiling.onnxruntime_profile import NUMPY

    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return {
        a.name: (tuple(d if isinstance(d, int) and d > 0 else batch for d in a.shape), NUMPY.get(a.type, "float32")) for a in session.get_inputs()
    }


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m sdk profile", description="Per-layer times of a model on this device's backend.")
    add_what_runs(parser)
    parser.add_argument("--out", type=Path, required=True, help="folder for profile.json (and optimized.onnx)")
    parser.add_argument("--frames", type=int, default=50, help="profiled frames (default 50)")
    parser.add_argument("--warmup", type=int, default=5, help="frames run first and not kept (default 5)")
    parser.add_argument("--reference", type=Path, help="folder of reference probes to run between the frames (ONNX Runtime on the CPU)")
    args = parser.parse_args(argv)
    if args.frames < 1 or args.warmup < 0:
        parser.error("--frames must be at least 1 and --warmup at least 0")
    release_id, pipeline, artifacts = what_runs(parser, args)
    raw = profile(pipeline, artifacts, args.out, args.frames, args.warmup, args.reference)
    raw["release"] = release_id
    raw["pipeline"] = pipeline.spec.name
    args.out.mkdir(parents=True, exist_ok=True)
    partial = args.out / f".{RAW_FILE}.partial"
    partial.write_text(json.dumps(raw) + "\n")
    partial.replace(args.out / RAW_FILE)
    sys.stdout.write(json.dumps({"backend": raw["backend"], "frames": raw["frames"], "profile": str(args.out / RAW_FILE)}) + "\n")
    return 0


def main(argv: list[str]) -> int:
    try:
        return run(argv)
    except SdkError as exc:
        sys.stderr.write(f"error: {exc.message}\nhint: {exc.hint}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted\n")
        return 130
