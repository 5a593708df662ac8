"""report.json: the run's verdict, counts, per-stage and end-to-end latency, and every budget check."""

from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path

from sdk import __version__
from sdk.runtime.recorder import STAGES
from sdk.runtime.runner import RunResult
from sdk.runtime.verdict import evaluate, summarize
from sdk.sinks.files import partial_path, publish
from sdk.spec.loader import PipelineFile

REPORT_FILE = "report.json"
REPORT_FORMAT = 1


def build_report(pipeline: PipelineFile, result: RunResult, *, target: str, release: str | None = None) -> dict:
    spec = pipeline.spec
    warmup = min(spec.budgets.warmup_frames, result.frames)
    latencies = result.recorder.latencies_ms(skip=warmup)
    dropped = result.counters.dropped
    verdict, checks, notes = evaluate(spec.budgets, latencies, dropped)
    return {
        "format": REPORT_FORMAT,
        "verdict": verdict,
        "target": target,
        "pipeline": spec.name,
        "pipeline_file": pipeline.path.name,
        "release": release,
        "frames": result.frames,
        "warmup_frames": warmup,
        "measured_frames": result.frames - warmup,
        "dropped": dropped,
        "corrupt_frames": result.counters.corrupt,
        "stage_errors": result.stage_errors,
        "last_error": result.last_error,
        "stages": {stage: summarize(latencies[stage]) for stage in STAGES},
        "queue": summarize(latencies["queue"]),
        "end_to_end": summarize(latencies["end_to_end"], ("p50_ms", "p99_ms", "p999_ms", "max_ms")),
        "checks": [c.as_dict() for c in checks],
        "notes": notes,
        "replay": spec.source.replay.model_dump(),
        "wall_s": round(result.wall_s, 3),
        "backend": result.backend,
        "environment": {
            "sdk": __version__,
            "sdk_location": str(Path(__file__).resolve().parents[1]),
            "python": sys.version.split()[0],
            "machine": platform.machine(),
            "system": f"{platform.system()} {platform.release()}",
            "cpus": os.cpu_count(),
            "packages": _packages(),
        },
    }


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
    partial = partial_path(final)
    partial.write_text(json.dumps(report, indent=2) + "\n")
    publish(partial, final)
    return final
