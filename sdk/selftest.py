"""`python -m sdk selftest --release DIR`: the hardware checks, run on the device against its release.

What no host can prove: that this device's CUDA driver answers, that its TensorRT loads the
release's engine and runs it, and that the release's CUDA preprocessing kernel gives what the CPU
path gives on a frame of the pipeline's own source, that a short run of the CUDA path agrees with the
CPU path and that the frame captured as one CUDA graph replays it; and, with `--tests`, the repository's
`gpu`-marked tests from the host's bundle (sdk/selftest_pytest.py). Each check is PASS, FAIL or SKIP with the
reason (a device without a GPU skips what needs one), or N/A where the release has nothing for it
to check; one JSON object on stdout for the host.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

PASS, FAIL, SKIP, NOT_APPLICABLE = "PASS", "FAIL", "SKIP", "N/A"  # SKIP: the hardware is missing; N/A: the release has nothing to check


def _check(name: str, function, *args) -> dict:
    started = time.perf_counter()
    try:
        status, detail = function(*args)
    except Exception as exc:  # a check that raises has failed; the others still run
        status, detail = FAIL, f"{type(exc).__name__}: {exc}"
    return {"name": name, "status": status, "detail": detail, "seconds": round(time.perf_counter() - started, 3)}


def cuda_driver() -> tuple[str, str]:
    from sdk.engine.cuda_check import require_cuda_device
    from sdk.errors import BackendError

    try:
        count = require_cuda_device(BackendError)
    except BackendError as exc:
        return SKIP, exc.message
    return PASS, f"{count} CUDA device(s)"


def tensorrt_version() -> tuple[str, str]:
    for module in ("tensorrt", "tensorrt_lean"):
        try:
            trt = __import__(module)
        except ImportError:
            continue
        return PASS, f"{module} {trt.__version__}"
    return SKIP, "TensorRT is not installed"


def engine_runs(release: Path, gpu: bool) -> tuple[str, str]:
    from sdk.release import load_release

    _, pipeline, artifacts = load_release(release)
    if not artifacts.engine_path.is_file():
        return NOT_APPLICABLE, "the release has no TensorRT engine"
    if not gpu:
        return SKIP, "no CUDA device"
    import numpy as np

    from sdk.backends.tensorrt_gpu import TensorRTBackend

    dla = pipeline.spec.model.dla
    with TensorRTBackend(artifacts.engine_path, declared=artifacts.declared_tensors(), dla_core=dla.core if dla else None) as backend:
        for buffer in backend.inputs.values():
            buffer[...] = np.random.default_rng(0).standard_normal(buffer.shape).astype(buffer.dtype)
        times = []
        for _ in range(5):
            backend.infer()
            times.append(backend.last_infer_ms)
        bad = [name for name, out in backend.outputs.items() if not np.isfinite(out).all()]
    if bad:
        return FAIL, f"non-finite outputs: {bad}"
    return PASS, f"engine ran 5 times, infer {min(times):.3f}-{max(times):.3f} ms (CUDA events)"


def cuda_preprocess_matches_cpu(release: Path, gpu: bool) -> tuple[str, str]:
    if not (release / "kernels").is_dir():
        return NOT_APPLICABLE, "the release carries no CUDA kernels"
    if not gpu:
        return SKIP, "no CUDA device"
    import numpy as np

    from sdk.gpu.driver import CudaModule, CudaPreprocessor
    from sdk.gpu.plan import PreprocessPlan
    from sdk.preprocess import CpuPreprocessor
    from sdk.release import load_release
    from sdk.sources import open_reader

    _, pipeline, _ = load_release(release)
    spec = pipeline.spec.preprocess
    reader = open_reader(next(iter(pipeline.spec.cameras.values())).uri, pipeline.folder)  # the (first) camera's
    with reader:
        frame = reader.read()
    if frame is None or frame.ndim != 3 or spec.dtype != "float32":
        return SKIP, "needs a colour frame from the pipeline's source and float32 preprocessing"
    h, w = frame.shape[:2]
    plan = PreprocessPlan.build(spec, "bgr8", w, h)
    cpu_out = np.zeros(spec.tensor_shape, np.float32)
    with CpuPreprocessor(spec, cpu_out) as cpu:
        cpu(frame)
    with CudaModule(release / "kernels") as cuda:
        kernel = CudaPreprocessor(plan, cuda)
        kernel_ms = kernel(frame)
        gpu_out = kernel.download().reshape(cpu_out.shape)
    # The documented bound: a quarter of an 8-bit input step after normalisation.
    step = spec.normalize.scale / min(spec.normalize.std)
    worst = float(np.abs(gpu_out - cpu_out).max())
    status = PASS if worst <= 0.25 * step else FAIL
    return status, f"max |GPU - CPU| = {worst / step:.4f} of an 8-bit step (bound 0.25), kernel {kernel_ms:.3f} ms"


def _short_runs(release: Path, variants: dict[str, dict], frames: int, emulate: bool) -> tuple[dict, dict]:
    """The release's pipeline for `frames` frames per variant (name -> preprocess settings, e.g. {"device": "cuda"}),
    unpaced, into a temporary JSONL: (detections per variant, the report's preprocess section per variant)."""
    import dataclasses
    import os
    import tempfile

    from sdk.release import load_release
    from sdk.runtime import PipelineRunner
    from sdk.spec.schema import JsonlSink

    _, pipeline, artifacts = load_release(release)
    spec = pipeline.spec
    runs, sections = {}, {}
    saved = os.environ.get("SDK_CUDA_EMULATION")
    try:
        for name, settings in variants.items():
            if emulate and settings["device"] == "cuda":
                os.environ["SDK_CUDA_EMULATION"] = "host"
            else:
                os.environ.pop("SDK_CUDA_EMULATION", None)
            changed = spec.model_copy(
                update={
                    "preprocess": spec.preprocess.model_copy(update=settings),
                    "model": spec.model.model_copy(update={"cuda_graph": False}) if settings.get("cuda_graph") else spec.model,
                    "source": spec.source.model_copy(update={"replay": spec.source.replay.model_copy(update={"rate_fps": None})}),
                    "sinks": [JsonlSink(kind="jsonl", path="detections.jsonl")],
                }
            )
            with tempfile.TemporaryDirectory(prefix="selftest-") as out:
                result = PipelineRunner(dataclasses.replace(pipeline, spec=changed), artifacts, Path(out), max_frames=frames).run()
                runs[name] = [json.loads(line) for line in (Path(out) / "detections.jsonl").read_text().splitlines()]
            sections[name] = result.preprocess
    finally:
        if saved is None:
            os.environ.pop("SDK_CUDA_EMULATION", None)
        else:
            os.environ["SDK_CUDA_EMULATION"] = saved
    return runs, sections


def _cuda_path_problem(release: Path, gpu: bool, emulate: bool) -> tuple[str, str] | None:
    from sdk.release import load_release

    _, pipeline, artifacts = load_release(release)
    if pipeline.spec.multi_camera:
        return (
            NOT_APPLICABLE,
            ("several cameras: the self-test compares one camera's frames (the several-camera CUDA path: decision 0460)"),
        )
    if emulate:
        return None
    if not (release / "kernels").is_dir():
        return NOT_APPLICABLE, "the release carries no CUDA kernels"
    if not artifacts.engine_path.is_file():
        return NOT_APPLICABLE, "the release has no TensorRT engine for the kernels to feed"
    if not gpu:
        return SKIP, "no CUDA device"
    return None


def cuda_pipeline_matches_cpu(release: Path, gpu: bool, frames: int = 30, emulate: bool = False) -> tuple[str, str]:
    """A short run of the release's pipeline on the CUDA path (kernel into the engine's input binding, decode
    on the device, one stream) against the same frames on the CPU path: 99 % of detections within IoU 0.98
    and score 0.02. `emulate`: the same on the emulated device (SDK_CUDA_EMULATION=host), for the tests."""
    from sdk.postprocess.compare import matched_share

    problem = _cuda_path_problem(release, gpu, emulate)
    if problem is not None:
        return problem
    runs, sections = _short_runs(
        release, {"cpu": {"device": "cpu", "cuda_graph": False}, "cuda": {"device": "cuda", "cuda_graph": False}}, frames, emulate
    )
    cuda = sections["cuda"]
    share, total = matched_share(runs["cuda"], runs["cpu"])
    times = ", ".join(f"{stage} {t['mean_ms']:.3f}" for stage, t in cuda.get("event_ms", {}).items())
    where = "EMULATED on the host, not a GPU: " if cuda.get("emulated") else ""
    detail = (
        f"{where}{frames} frames: {share:.1%} of {total} detections agree with the CPU path (IoU 0.98, score 0.02); "
        f"decode on {cuda.get('decode', {}).get('device')}, {cuda.get('decode', {}).get('overflow_frames', 0)} overflow frame(s); event ms: {times}"
    )
    return (PASS if share >= 0.99 else FAIL), detail


def cuda_graph_replays_the_frame(release: Path, gpu: bool, frames: int = 30, emulate: bool = False) -> tuple[str, str]:
    """The same CUDA path with `preprocess.cuda_graph` (the frame captured once, replayed) against it un-captured:
    the same detections, frame by frame. An engine TensorRT cannot capture is N/A, with TensorRT's reason."""
    problem = _cuda_path_problem(release, gpu, emulate)
    if problem is not None:
        return problem
    variants = {"plain": {"device": "cuda", "cuda_graph": False}, "graph": {"device": "cuda", "cuda_graph": True}}
    runs, sections = _short_runs(release, variants, frames, emulate)
    graph = sections["graph"].get("cuda_graph", {})
    where = "EMULATED on the host, not a GPU: " if sections["graph"].get("emulated") else ""
    if not graph.get("captured"):
        return NOT_APPLICABLE, f"{where}the frame was not captured: {graph.get('reason', 'no CUDA path')}"
    same = sum(a["detections"] == b["detections"] for a, b in zip(runs["graph"], runs["plain"], strict=False))
    times = ", ".join(f"{stage} {t['mean_ms']:.3f}" for stage, t in sections["graph"].get("event_ms", {}).items())
    detail = (
        f"{where}{graph['replayed_frames']} of {len(runs['graph'])} frames replayed; {same} with the un-captured path's detections; event ms: {times}"
    )
    return (PASS if same == len(runs["plain"]) == len(runs["graph"]) else FAIL), detail


def gpu_tests(release: Path, bundle: Path, deadline_s: float) -> dict:
    """The repository's `gpu`-marked pytest tests from the host's selftest bundle (sdk/selftest_pytest.py)."""
    from sdk.selftest_pytest import run_gpu_tests

    started = time.perf_counter()
    try:
        check = run_gpu_tests(release, bundle, deadline_s)
    except Exception as exc:
        check = {"status": FAIL, "detail": f"{type(exc).__name__}: {exc}", "tests": []}
    return {"name": "gpu_tests", **check, "seconds": round(time.perf_counter() - started, 3)}


def run(release: Path, tests: Path | None = None, tests_deadline_s: float = 900.0) -> dict:
    checks = [_check("cuda_driver", cuda_driver), _check("tensorrt", tensorrt_version)]
    gpu = checks[0]["status"] == PASS
    checks.append(_check("engine_runs", engine_runs, release, gpu))
    checks.append(_check("cuda_preprocess_matches_cpu", cuda_preprocess_matches_cpu, release, gpu))
    checks.append(_check("cuda_pipeline_matches_cpu", cuda_pipeline_matches_cpu, release, gpu))
    checks.append(_check("cuda_graph_replays_the_frame", cuda_graph_replays_the_frame, release, gpu))
    from sdk.selftest_nv12 import nv12_camera_layout

    checks.append(_check("nv12_camera_layout", nv12_camera_layout, release))  # the camera's colour and plane layout (decision 0418)
    if tests is not None:
        checks.append(gpu_tests(release, tests, tests_deadline_s))
    return {"release": release.name, "checks": checks}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m sdk selftest")
    parser.add_argument("--release", type=Path, required=True)
    parser.add_argument("--tests", type=Path, help="a selftest bundle (the host's scratch folder): run its gpu-marked tests too")
    parser.add_argument("--tests-deadline", type=float, default=900.0, help="seconds the gpu tests may take")
    args = parser.parse_args(argv)
    from sdk.store.startable import allowed_to_run

    allowed_to_run(args.release)  # only checked bytes of a release that may run here (sdk/store/startable.py)
    result = run(args.release.resolve(), args.tests.resolve() if args.tests else None, args.tests_deadline)
    sys.stdout.write(json.dumps(result) + "\n")
    return 0
