"""report.json: the run's verdict, counts, per-stage and end-to-end latency, and every budget check.

Format 2 extends the foundation's contract (every key of format 1 is still there) with the
confidence bounds of each percentile, deadline misses and streaks, jitter and drift, the device's
environment before and after the run, the hashes of what ran, and the output digest that two
runs on the same replay are compared by. Every key since is an addition: `verdict_detail` (the
verdict with what it does not cover, "PASS, 2 unverified"), `run` (who ran what, where, when, with
which software: the traceability a reviewer signs against), `environment.during` (CPU load and
frequency sampled while the pipeline ran), `lost_frames` (frames a recording promised that never
arrived, distinct from `corrupt_frames`; per camera too) and `outputs` (each sink's frames written and
not written).
"""

from __future__ import annotations

import getpass
import hashlib
import json
import os
import platform
import shlex
import socket
import subprocess
import sys
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from sdk import __version__
from sdk.artifacts import ModelArtifacts
from sdk.release import sha256_of
from sdk.runtime.environment import check_requirements
from sdk.runtime.recorder import STAGES
from sdk.runtime.result import RunResult
from sdk.runtime.statistics import DeadlineMisses, deadline_misses, drift_ms, quantile_estimate
from sdk.runtime.verdict import BudgetCheck, _percentile_check, combine, describe_verdict, evaluate, summarize
from sdk.sinks.files import write_whole
from sdk.spec.loader import PipelineFile

REPORT_FILE = "report.json"
REPORT_FORMAT = 2
END_TO_END_KEYS = ("p50_ms", "p99_ms", "p999_ms", "p9999_ms", "max_ms")
OUTPUT_KEYS = ("output", "written", "not_written", "last_error")  # a sink's counts (a service's status has more)


def build_report(
    pipeline: PipelineFile,
    result: RunResult,
    *,
    target: str,
    release: str | None = None,
    artifacts: ModelArtifacts | None = None,
    environment: tuple[dict, dict] | None = None,
    interference: dict | None = None,
    run: dict | None = None,
    load: dict | None = None,
) -> dict:
    """`run`: what the caller knows of the run (started_at, finished_at, command, release_manifest_sha256);
    `load`: LoadMonitor.summary() of the run."""
    spec = pipeline.spec
    budgets = spec.budgets
    warmup = min(budgets.warmup_frames, result.frames)
    latencies = result.recorder.latencies_ms(skip=warmup)
    cascade = {step: np.asarray(ms[warmup:], np.float64) for step, ms in result.cascade_ms.items()}  # per frame, as the stages
    latencies.update({f"cascade.{step}": ms for step, ms in cascade.items()})
    frames, _, digests = result.recorder.rows()
    frames, digests = frames[warmup:], digests[warmup:]
    e2e = latencies["end_to_end"]
    dropped = result.counters.dropped
    several = len(result.cameras) > 1
    if budgets.deadline_ms is None:
        misses = None
    elif several:  # frame numbers are per camera: the misses of each, added up
        misses = summed_misses([camera_misses(c, warmup, budgets.deadline_ms) for c in result.cameras.values()], budgets.deadline_ms)
    else:
        misses = deadline_misses(frames, e2e, budgets.deadline_ms)
    before, after = environment if environment is not None else (None, None)
    verdict, checks, notes = _judge(spec, result, latencies, misses, warmup, (before, after), load)
    return {
        "format": REPORT_FORMAT,
        "verdict": verdict,
        "verdict_detail": describe_verdict(verdict, [c.as_dict() for c in checks]),
        "run": run_section(pipeline, result, target=target, release=release, run=run),
        "target": target,
        "pipeline": spec.name,
        "pipeline_file": pipeline.path.name,
        "release": release,
        "frames": result.frames,
        "warmup_frames": warmup,
        "measured_frames": result.frames - warmup,
        "dropped": dropped,
        "corrupt_frames": result.counters.corrupt,
        "lost_frames": result.counters.lost,
        "out_of_order_stamps": result.counters.out_of_order,
        "disconnects": result.counters.disconnects,
        "stage_errors": result.stage_errors,
        "last_error": result.last_error,
        "outputs": [{key: o.get(key) for key in OUTPUT_KEYS} for o in result.outputs],
        "stages": {stage: summarize(latencies[stage]) for stage in STAGES},
        "queue": summarize(latencies["queue"]),
        "end_to_end": _end_to_end(e2e),
        "deadline": _deadline(misses),
        "checks": [c.as_dict() for c in checks],
        "notes": notes,
        "confidence": 0.95,
        "replay": next(iter(spec.cameras.values())).replay.model_dump(),  # the first camera's; each in `cameras`
        "batching": {"frames_per_call": result.batch, "note": result.batching},
        "cameras": camera_sections(spec, result, warmup),
        "wall_s": round(result.wall_s, 3),
        "backend": result.backend,
        "preprocess": result.preprocess,
        "postprocess": result.postprocess,
        "slowest_layers": [{"layer": name, "ms_per_frame": ms} for name, ms in result.slowest_layers],
        "cascade": {step: summarize(ms) for step, ms in cascade.items()},  # within postprocess
        "hashes": _hashes(pipeline, artifacts),
        "determinism": {"frames": len(frames), "digest": outputs_digest(frames, digests)},
        "interference": interference,
        "environment": _environment(before, after, load),
    }


def _judge(spec, result: RunResult, latencies: dict, misses, warmup: int, environment: tuple, load: dict | None) -> tuple:
    """(verdict, checks, notes): the budgets against the measured figures, each camera's own, and what qualifies them."""
    budgets = spec.budgets
    before, after = environment
    environment_checks = check_requirements(budgets.environment, before, after, load) if before is not None else []
    verdict, checks, notes = evaluate(budgets, latencies, result.counters.dropped, misses, environment_checks)
    if budgets.cameras:  # each camera's own budget, checked on its own frames
        verdict, checks, _ = combine(checks + camera_checks(budgets, result, warmup))
    checks = [replace(c, duration_s=round(result.wall_s, 3)) for c in checks]  # each rests on this run
    if budgets.environment is not None and before is None:
        notes.append("budgets.environment was not checked: no environment was captured")
    decode = result.preprocess.get("decode") if isinstance(result.preprocess, dict) else None
    if isinstance(decode, dict) and decode.get("overflow_frames"):
        notes.append(
            f"the GPU decode found more candidates than its capacity ({decode['capacity']}) on {decode['overflow_frames']} frame(s): "
            f"{decode['candidates_lost']} candidate(s) were not kept (raise postprocess.score_threshold)"
        )
    notes += source_and_output_notes(spec, result)
    if load and load.get("overloaded"):
        notes.append(
            f"the 1-minute load average reached {load['load_1m']['max']:g} on {load['cpus']} CPU(s) during the run: "
            "other work competed with the pipeline, and its latencies include that"
        )
    return verdict, checks, notes


def _end_to_end(e2e) -> dict:
    first_third, last_third = drift_ms(e2e)
    end_to_end = summarize(e2e, END_TO_END_KEYS)
    if len(e2e):
        end_to_end["jitter_ms"] = round(quantile_estimate(e2e, 0.999).value - quantile_estimate(e2e, 0.5).value, 4)
    end_to_end["drift"] = {"first_third_p50_ms": _round(first_third), "last_third_p50_ms": _round(last_third)}
    return end_to_end


def _environment(before: dict | None, after: dict | None, load: dict | None) -> dict:
    return {
        "sdk": __version__,
        "sdk_location": str(Path(__file__).resolve().parents[1]),
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "system": f"{platform.system()} {platform.release()}",
        "cpus": os.cpu_count(),
        "packages": _packages(),
        "before": before,
        "after": after,
        "during": load,
    }


def source_and_output_notes(spec, result: RunResult) -> list[str]:
    """Frames a recording promised that never arrived (per camera), and frames an output could not keep."""
    notes = []
    for name, camera in result.cameras.items():
        delivered = camera.counters.delivered  # what the source gave, also frames a stage error kept from the recorder
        if camera.source_ended and camera.asked and delivered < camera.asked:
            uri = spec.cameras[name].uri.partition("?")[0]
            notes.append(
                f"{uri}: the source ended after {delivered} frame(s), before the {camera.asked} asked (--frames or replay.frames): "
                f"a recording plays once unless {_loop_key(spec, name)} is true"
            )
        if camera.counters.lost:
            uri = spec.cameras[name].uri.partition("?")[0]
            notes.append(
                f"{uri}: {camera.counters.lost} frame(s) the recording promised never arrived (lost_frames; "
                f"not corrupt: the demuxer passed over them); the newest: {camera.counters.lost_last}"
            )
        if camera.counters.out_of_order:
            uri = spec.cameras[name].uri.partition("?")[0]
            notes.append(
                f"{uri}: {camera.counters.out_of_order} frame(s) stamped before the frame before them (out_of_order_stamps; "
                f"delivered in the recording's order); the newest: {camera.counters.out_of_order_last}"
            )
    for output in result.outputs:
        if output.get("not_written"):
            notes.append(f"{output['output']}: {output['not_written']} frame(s) not written ({output.get('last_error')})")
    return notes


def _loop_key(spec, camera: str) -> str:
    return f"sources.{camera}.replay.loop" if spec.multi_camera else "source.replay.loop"


def camera_misses(camera, warmup: int, deadline_ms: float) -> DeadlineMisses:
    frames, _, _ = camera.recorder.rows()
    skip = min(warmup, len(frames))
    return deadline_misses(frames[skip:], camera.recorder.latencies_ms(skip=skip)["end_to_end"], deadline_ms)


def summed_misses(each: list[DeadlineMisses], deadline_ms: float) -> DeadlineMisses:
    """Several cameras' misses as one: counts added, the longest streak of any camera."""
    flags = np.concatenate([m.miss_flags for m in each]) if each else np.zeros(0, bool)
    longest = max((m.longest_streak for m in each), default=0)
    return DeadlineMisses(deadline_ms, sum(m.frames for m in each), sum(m.late for m in each), sum(m.dropped for m in each), longest, flags)


def camera_sections(spec, result: RunResult, warmup: int) -> dict:
    """Per camera: end to end from its own capture (the gather wait included), stages, drops, misses, empty slots.

    The warm-up frames are left out of each camera's own frames (the first `warmup_frames` of each)."""
    sections = {}
    for name, camera in result.cameras.items():
        skip = min(warmup, camera.recorder.count)
        latencies = camera.recorder.latencies_ms(skip=skip)
        budget = spec.budgets.cameras.get(name)
        deadline = (budget.deadline_ms if budget is not None else None) or spec.budgets.deadline_ms
        misses = camera_misses(camera, warmup, deadline) if deadline is not None else None
        sections[name] = {
            "uri": spec.cameras[name].uri.partition("?")[0],
            "frames": camera.recorder.count,
            "measured_frames": camera.recorder.count - skip,
            "end_to_end": summarize(latencies["end_to_end"], END_TO_END_KEYS),
            "stages": {stage: summarize(latencies[stage]) for stage in STAGES},
            "queue": summarize(latencies["queue"]),
            "dropped": camera.counters.dropped,
            "skipped_slots": camera.skipped_slots,
            "corrupt_frames": camera.counters.corrupt,
            "lost_frames": camera.counters.lost,
            "out_of_order_stamps": camera.counters.out_of_order,
            "disconnects": camera.counters.disconnects,
            "misses": misses.misses if misses is not None else None,
            "deadline": _deadline(misses),
            "replay": camera.replay,
        }
    return sections


def camera_checks(budgets, result: RunResult, warmup: int) -> list:
    checks = []
    for name, budget in budgets.cameras.items():
        camera = result.cameras.get(name)
        if camera is None:
            continue
        skip = min(warmup, camera.recorder.count)
        e2e = camera.recorder.latencies_ms(skip=skip)["end_to_end"]
        if budget.end_to_end is not None:
            for key, limit in budget.end_to_end.items():
                check = _percentile_check(f"end_to_end.{key}", key, e2e, limit)
                checks.append(replace(check, name=f"cameras.{name}.end_to_end.{key}", duration_s=round(result.wall_s, 3)))
        if budget.deadline_ms is not None:
            misses = camera_misses(camera, warmup, budget.deadline_ms)
            limit = budgets.max_miss_ratio
            if limit is not None:
                status = "FAIL" if misses.ratio > limit else "PASS"
                detail = f"deadline {budget.deadline_ms:g} ms; a dropped frame counts as a miss"
                checks.append(BudgetCheck(f"cameras.{name}.deadline.miss_ratio", limit, round(misses.ratio, 6), status, misses.frames, None, detail))
    return checks


def utc_now() -> str:
    """UTC, ISO 8601 to the millisecond, with its offset: 2025-01-31T08:15:02.123+00:00."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def current_user() -> str | None:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # a uid with no passwd entry (containers)
        return str(os.getuid()) if hasattr(os, "getuid") else None


def command_line(argv: list[str]) -> str:
    return shlex.join(argv)


def source_commit(folder: Path) -> str | None:
    """The git commit of the checkout whose root is `folder` ("-dirty" with uncommitted changes), or None:
    a release folder (where the runtime runs from on a device) has no .git of its own."""
    if not (folder / ".git").exists():
        return None
    try:
        head = subprocess.run(["git", "-C", str(folder), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return None
        status = ["git", "-C", str(folder), "status", "--porcelain", "--untracked-files=no"]
        dirty = subprocess.run(status, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("-dirty" if dirty.returncode == 0 and dirty.stdout.strip() else "")


def runtime_versions(backend: str | None) -> dict:
    """The inference runtime that ran and its version, and the CUDA and TensorRT it used (None: not used)."""
    runtime = (backend or "").split(" ", 1)[0] or None
    versions = {"inference_runtime": runtime, "onnxruntime": None, "tensorrt": None, "cuda": None}
    for name in ("onnxruntime", "tensorrt"):
        module = sys.modules.get(name)
        if module is not None:
            versions[name] = getattr(module, "__version__", None)
    if runtime == "tensorrt" or "sdk.gpu.driver" in sys.modules:  # the GPU was used: which CUDA
        from sdk.probe import _cuda_driver

        versions["cuda"] = _cuda_driver() or "unknown"
    return versions


def run_section(pipeline: PipelineFile, result: RunResult, *, target: str, release: str | None, run: dict | None) -> dict:
    """Who ran what, where, when and with which software. The host adds what only it knows (its own name,
    user and command, the device fingerprint's hash, the checkout's commit) when it fetches the report."""
    run = run or {}
    return {
        "started_at": run.get("started_at"),
        "finished_at": run.get("finished_at"),
        "host": socket.gethostname(),
        "user": current_user(),
        "command": run.get("command"),
        "sdk_version": __version__,
        "sdk_commit": source_commit(Path(__file__).resolve().parents[2]),
        "pipeline": pipeline.spec.name,
        "pipeline_file": pipeline.path.name,
        "pipeline_sha256": sha256_of(pipeline.path),
        "release": release,
        "release_manifest_sha256": run.get("release_manifest_sha256"),
        "target": target,
        "device_host": socket.gethostname(),
        "device_fingerprint_sha256": None,
        **runtime_versions(result.backend),
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _deadline(misses) -> dict | None:
    if misses is None:
        return None
    return {
        "deadline_ms": misses.deadline_ms,
        "frames": misses.frames,
        "late": misses.late,
        "dropped": misses.dropped,
        "misses": misses.misses,
        "miss_ratio": round(misses.ratio, 6),
        "longest_streak": misses.longest_streak,
    }


def outputs_digest(frames: np.ndarray, digests: np.ndarray) -> str:
    """sha256 over (frame, per-frame digest) in frame order: equal digests, identical outputs."""
    order = np.argsort(frames, kind="stable")
    pairs = np.stack([frames[order].astype(np.uint64), digests[order].astype(np.uint64)], axis=1)
    return hashlib.sha256(np.ascontiguousarray(pairs).tobytes()).hexdigest()


def _hashes(pipeline: PipelineFile, artifacts: ModelArtifacts | None) -> dict:
    hashes = {"pipeline_sha256": sha256_of(pipeline.path)}
    if artifacts is not None and artifacts.model_path.is_file():
        hashes["model_sha256"] = sha256_of(artifacts.model_path)
    return hashes


def _packages() -> dict:
    """Version and location of each runtime module this process loaded (what really ran)."""
    found = {}
    for name in ("numpy", "cv2", "onnxruntime", "pydantic", "yaml"):
        module = sys.modules.get(name)
        if module is not None:
            found[name] = {"version": getattr(module, "__version__", None), "location": str(Path(module.__file__).parent)}
    return found


def write_report(report: dict, folder: Path) -> Path:
    """Atomically: a reader never sees half a report."""
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / REPORT_FILE
    write_whole(final, json.dumps(report, indent=2) + "\n")
    return final


def preprocess_line(section) -> str:
    """The device the preprocessing ran on and why, in one line (a report from before preprocess.device: its text)."""
    if not isinstance(section, dict):
        return str(section)
    device = section.get("device", "?") + (" (emulated on the host)" if section.get("emulated") else "")
    line = f"{device}: {section.get('reason', '')}"
    decode = section.get("decode")
    if isinstance(decode, dict) and decode.get("device") == "cuda":
        line += f"; decode on the device, {decode.get('overflow_frames', 0)} frame(s) over the candidate capacity {decode.get('capacity')}"
    return line
