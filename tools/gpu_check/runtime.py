"""The runtime steps of tools/gpu_check/check.py: the example through the runtime's CUDA path against its CPU path.

Each run is a child process (`python -m tools.gpu_check --runtime-run RELEASE OUT --variant V`): a CUDA fault or a
hang (a host node waiting for the interpreter) costs that run, under a deadline, not the whole check. The CUDA runs use
ONNX Runtime as the inference step (tools/gpu_check/engine.py) on a GPU, and the emulated device under `--emulate`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tools.gpu_check.steps import EXAMPLE, FAIL, PASS, REPO

VARIANTS = {
    "cpu": {"device": "cpu", "cuda_graph": False},
    "cuda": {"device": "cuda", "cuda_graph": False},
    "cuda_graph": {"device": "cuda", "cuda_graph": True},
}
RUN_TIMEOUT_S = 90  # a run of 30 frames takes seconds; a hang (a host node that never ran) costs no more


def open_device(build_dir: Path, emulate: bool):
    """The runtime's own CUDA adapter on the built kernels, or the emulated device running the C++ host reference."""
    if emulate:
        from sdk.gpu.emulation import EmulatedCuda

        return EmulatedCuda("copy", library=build_dir / "libpp_reference.so").open()
    from sdk.gpu.driver import CudaModule

    return CudaModule(build_dir).open()


def release_folder(work: Path, build_dir: Path) -> Path:
    """The example prepared (tools.models.prepare, as a deploy does) beside the built kernels, laid out as a release is:
    RELEASE/model/ (the artifacts) and RELEASE/kernels/ (cubins, PTX, manifest), which the runner reads."""
    from sdk.spec import load_pipeline
    from tools.models.prepare import PrepareModel

    artifacts = PrepareModel(load_pipeline(EXAMPLE), work / "cache")()
    release = work / "release"
    shutil.copytree(artifacts.folder, release / "model")
    (release / "kernels").mkdir(parents=True)
    for path in build_dir.iterdir():
        if path.suffix in (".cubin", ".ptx", ".json") or path.name.endswith(".ptxas.txt"):
            shutil.copy2(path, release / "kernels" / path.name)
    return release


def run_variant(release: Path, out: Path, variant: str, frames: int, emulate: bool) -> int:
    """One run of the example (unpaced, JSONL only) with the variant's preprocessing; writes OUT/detections.jsonl
    and OUT/preprocess.json (the report's preprocess section)."""
    from sdk.artifacts import ModelArtifacts
    from sdk.runtime import PipelineRunner
    from sdk.spec import load_pipeline
    from sdk.spec.schema import JsonlSink

    pipeline = load_pipeline(EXAMPLE)
    spec = pipeline.spec
    changed = spec.model_copy(
        update={
            "preprocess": spec.preprocess.model_copy(update=VARIANTS[variant]),
            "source": spec.source.model_copy(update={"replay": spec.source.replay.model_copy(update={"rate_fps": None})}),
            "sinks": [JsonlSink(kind="jsonl", path="detections.jsonl")],
        }
    )
    factory = None
    if variant != "cpu":
        if emulate:
            os.environ["SDK_CUDA_EMULATION"] = "host"
        else:
            from tools.gpu_check.engine import OnnxRuntimeOnGpu

            factory = lambda model_path, batch: OnnxRuntimeOnGpu(model_path, batch)  # noqa: E731
    out.mkdir(parents=True, exist_ok=True)
    runner = PipelineRunner(
        dataclasses.replace(pipeline, spec=changed), ModelArtifacts(release / "model"), out, max_frames=frames, backend_factory=factory
    )
    result = runner.run()
    (out / "preprocess.json").write_text(json.dumps(result.preprocess, default=str))
    return 0


def _run(release: Path, out: Path, variant: str, frames: int, emulate: bool) -> tuple[list[dict], dict]:
    command = [sys.executable, "-X", "faulthandler", "-m", "tools.gpu_check", "--runtime-run", str(release), str(out), "--variant", variant]
    command += ["--frames", str(frames)]  # faulthandler: a crash in the run (a CUDA fault, a bad callback) leaves its Python stack
    done = subprocess.run(command + (["--emulate"] if emulate else []), capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=REPO)
    if done.returncode != 0:
        raise RuntimeError(f"the {variant} run failed (exit {done.returncode}): {(done.stdout + done.stderr).strip()[-1500:]}")
    lines = [json.loads(line) for line in (out / "detections.jsonl").read_text().splitlines()]
    return lines, json.loads((out / "preprocess.json").read_text())


def compare_with_cpu(release: Path, frames: int, emulate: bool, graph: bool) -> dict:
    """The CUDA path (with the frame's CUDA graph where `graph`) against the CPU path on the same frames: 99 % of the
    detections within IoU 0.98 and score 0.02 (the selftest's bound), and its event times."""
    from sdk.postprocess.compare import matched_share

    cpu_out = release.parent / "run-cpu"
    if not (cpu_out / "detections.jsonl").is_file():
        _run(release, cpu_out, "cpu", frames, emulate)
    cpu = [json.loads(line) for line in (cpu_out / "detections.jsonl").read_text().splitlines()]
    variant = "cuda_graph" if graph else "cuda"
    try:
        cuda, section = _run(release, release.parent / f"run-{variant}", variant, frames, emulate)
    except subprocess.TimeoutExpired:
        return {"status": FAIL, "detail": f"the {variant} run did not end in {RUN_TIMEOUT_S} s"}
    share, total = matched_share(cuda, cpu)
    identical = sum(a["detections"] == b["detections"] for a, b in zip(cuda, cpu, strict=False))
    times = ", ".join(f"{stage} {t['mean_ms']:.3f} ms" for stage, t in section.get("event_ms", {}).items())
    problems = []
    if section.get("device") != "cuda":
        problems.append(f"ran on {section.get('device')}: {section.get('reason')}")
    if len(cuda) != frames or len(cpu) != frames:
        problems.append(f"{len(cuda)} CUDA and {len(cpu)} CPU frames of {frames}")
    if total == 0 or share < 0.99:
        problems.append(f"{share:.1%} of {total} detections matched (bound 99 %)")
    counted = {stage: t["frames"] for stage, t in section.get("event_ms", {}).items()}
    if counted != dict.fromkeys(("preprocess", "infer", "decode"), frames):
        problems.append(f"stage event times for {counted} of {frames} frames")
    detail = f"{frames} frames: {share:.1%} of {total} detections matched, {identical} frames identical; events: {times}"
    out = {"status": FAIL if problems else PASS, "detail": "; ".join(problems) + f" ({detail})" if problems else detail, "section": section}
    if graph:
        graph_report = section.get("cuda_graph", {})
        if not graph_report.get("captured") or graph_report.get("replayed_frames") != frames - 1 or graph_report.get("timing"):
            out["status"] = FAIL
            out["detail"] = f"graph {graph_report}; " + out["detail"]
        else:
            out["detail"] = (
                f"{graph_report['replayed_frames']} frames replayed, frame {graph_report.get('frame_ms', {}).get('mean_ms')} ms; " + detail
            )
    return out
