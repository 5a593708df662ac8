"""The one prepared check for a lent NVIDIA GPU machine: `python -m tools.gpu_check --out DIR`.

On an x86-64 machine with an NVIDIA GPU, nvcc, CMake and cuda-bindings (no TensorRT, no network), in at most 8
minutes of wall time, it:
1. builds plugins_cuda with the project's CMake and nvcc for this GPU's architecture (sm_XY of its compute capability);
2. runs every preprocessing kernel case (stretch and letterbox, each sampling grid, BGR and NV12, pitched NV12, crop,
   gray, f32/f16/u8 outputs) on real frames of vtest.avi and compares the bytes with the C++ host reference built by
   the same CMake (bit for bit) and with the numpy twins the emulation runs;
3. runs the runtime's CUDA path on the example (the fused kernel into the binding, ONNX Runtime's CPU backend as the
   inference step with the host copy in between, the decode kernel) and compares its detections with the CPU path's;
4. does the same with `preprocess.cuda_graph` (the frame captured once and replayed, ONNX Runtime as a host node)
   and, on the kernels alone, replays a captured frame with its timing events recorded as external event nodes,
   and plainly (the defect CUDA refuses: evidence for the emulation's rule);
5. times the kernels and the frame's copy with CUDA events;
6. runs compute-sanitizer's memcheck and racecheck over every kernel.
It writes DIR/gpu_check.json and DIR/gpu_check.md (the dated row for docs/hardware.md; `--record` adds it there),
after every step (verdict INCOMPLETE and the steps still pending until the last one): a step that hangs past the
call's limit leaves the earlier steps' results. compute-sanitizer refusing the GPU ("Device not supported") is a SKIP
with its line, not a FAIL.
Without a GPU it says so in one line and exits 0. `--emulate` runs the same steps on the emulated device (the
C++ host reference as the kernels), which is how the check itself is tested without a GPU; an emulated result is
never recorded in docs/hardware.md. Missing Python packages (pydantic, onnx-graphsurgeon) come from wheels carried
with the checkout: `--fetch-wheels .whl` here, `--wheels .whl` there (docs/guides/gpu.md has the exact calls).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if not __package__:  # run as `python tools/gpu_check/check.py`: the checkout's own sdk and tools, not an installed copy
    sys.path.insert(0, str(REPO))
BUDGET_S = 480  # the whole check, 8 minutes
WHEELS = ("pydantic==2.13.4", "pydantic-core==2.46.4", "annotated-types==0.7.0", "typing-inspection==0.4.2", "onnx-graphsurgeon==0.6.1")
NEEDED = ("pydantic", "onnx_graphsurgeon", "onnxruntime", "cv2", "yaml", "onnx", "cuda.bindings")
STEPS = ("build", "kernels", "runtime", "runtime_graph", "graph_events", "timing", "memcheck", "racecheck")
# Five columns: a table of more does not fit the documentation page's column at 1280 px (tests/test_docs.py).
HARDWARE_HEADER = "| date, commit | machine | build, kernels | runtime (CUDA path vs CPU), CUDA graph | kernel times, sanitizer |"
HARDWARE_COLUMNS = HARDWARE_HEADER.count(" | ") + 1


def no_gpu_reason() -> str | None:
    """Why this machine has no usable NVIDIA GPU (standard library only), or None."""
    from sdk.engine.cuda_check import require_cuda_device
    from sdk.errors import SdkError

    try:
        require_cuda_device(SdkError)
    except SdkError as exc:
        return exc.message
    return None


def use_wheels(folder: Path) -> list[str]:
    """Install the carried wheels of missing modules into a temporary site and put it first on sys.path."""

    def missing() -> list[str]:
        out = []
        for name in NEEDED:
            try:
                if importlib.util.find_spec(name) is None:
                    out.append(name)
            except ModuleNotFoundError:
                out.append(name)
        return out

    absent = missing()
    if absent and folder.is_dir() and list(folder.glob("*.whl")):
        site = Path(tempfile.mkdtemp(prefix="gpu-check-site-"))
        command = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-index",
            "--no-deps",
            "--no-compile",
            "--target",
            str(site),
            *map(str, folder.glob("*.whl")),
        ]
        subprocess.run(command, check=True, capture_output=True, timeout=120)
        sys.path.insert(0, str(site))
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))  # the child steps
        importlib.invalidate_caches()
        absent = missing()
    return absent


def fetch_wheels(folder: Path) -> int:
    """Here, with PyPI: the wheels the lent machine's Python 3.12 lacks, for --wheels."""
    folder.mkdir(parents=True, exist_ok=True)
    platforms = [f"--platform={p}" for p in ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")]
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "-q",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        "3.12",
        "--implementation",
        "cp",
        *platforms,
        "-d",
        str(folder),
        *WHEELS,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    sys.stdout.write(f"gpu_check: {len(list(folder.glob('*.whl')))} wheels in {folder}\n" if done.returncode == 0 else done.stderr)
    return done.returncode


def device_facts(emulate: bool) -> dict:
    import platform

    facts = {"python": platform.python_version(), "host": platform.node(), "emulated": emulate, "commit": _commit()}
    if emulate:
        return {**facts, "gpu": "emulated device (SDK_CUDA_EMULATION=host, C++ host reference)", "arch": None}
    from sdk.gpu.driver import import_driver

    cu = import_driver()
    cu.cuInit(0)
    _, device = cu.cuDeviceGet(0)
    _, name = cu.cuDeviceGetName(100, device)
    attr = cu.CUdevice_attribute
    major = cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device)[1]
    minor = cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device)[1]
    driver = cu.cuDriverGetVersion()[1]
    nvcc = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout if _which("nvcc") else ""
    release = nvcc.split("release ")[1].split(",")[0] if "release " in nvcc else None
    gpu = name.split(b"\0")[0].decode() if isinstance(name, bytes) else str(name)
    from importlib.metadata import version

    return {
        **facts,
        "gpu": gpu,
        "compute_capability": f"{major}.{minor}",
        "arch": f"{major}{minor}",
        "driver_cuda": f"{driver // 1000}.{driver % 1000 // 10}",
        "nvcc": release,
        "cuda_bindings": version("cuda-bindings"),
    }


def _which(name: str) -> bool:
    import shutil

    return shutil.which(name) is not None


def _commit() -> str | None:
    """GPU_CHECK_COMMIT where the command names it (a copy on a lent machine may carry no .git, or one whose HEAD is
    older than the files copied beside it), else the checkout's commit."""
    if os.environ.get("GPU_CHECK_COMMIT"):
        return os.environ["GPU_CHECK_COMMIT"]
    try:
        done = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        done = None
    found = done.stdout.strip() if done is not None and done.returncode == 0 else ""
    return found or None


def run_steps(out: Path, frames: int, emulate: bool, deadline: float) -> dict:
    from tools.gpu_check import runtime, steps

    facts = device_facts(emulate)
    results: dict[str, dict] = {}
    work = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    build_dir = work / "build"

    def step(name: str, minimum_s: float, function, *args):
        started = time.monotonic()
        if deadline - started < minimum_s:
            results[name] = {"status": steps.FAIL, "detail": f"not run: {deadline - started:.0f} s left of the {BUDGET_S} s budget"}
        else:
            try:
                results[name] = function(*args)
            except Exception as exc:  # noqa: BLE001 - one step's failure is its result; the others still run
                results[name] = {"status": steps.FAIL, "detail": f"{type(exc).__name__}: {exc}"}
        results[name]["seconds"] = round(time.monotonic() - started, 1)
        sys.stdout.write(f"gpu_check: {name}: {results[name]['status']}: {results[name]['detail']}\n")
        sys.stdout.flush()
        write_result(out, partial(facts, frames, results))  # a later step that hangs past the call's limit leaves these

    step("build", 30, steps.build, build_dir, facts["arch"])
    library = build_dir / "libpp_reference.so"
    device = runtime.open_device(build_dir, emulate)
    try:
        images = steps.frames(3)
        step("kernels", 20, steps.kernels, device, library, images)
        release = runtime.release_folder(work, build_dir)
        step("runtime", 30, runtime.compare_with_cpu, release, frames, emulate, False)
        step("runtime_graph", 30, runtime.compare_with_cpu, release, frames, emulate, True)
        step("graph_events", 10, steps.graph_events, device)
        step("timing", 10, steps.timing, device, 50 if emulate else 200)
    finally:
        device.close()
    for tool in ("memcheck", "racecheck"):
        if emulate:
            results[tool] = {"status": steps.SKIP, "detail": "emulated: compute-sanitizer needs a GPU", "seconds": 0.0}
        else:
            step(tool, 30, steps.sanitizer, tool, build_dir, max(30.0, min(150.0, deadline - time.monotonic() - 20)))
    verdict = "FAIL" if any(r["status"] == steps.FAIL for r in results.values()) else "PASS"
    return {"format": 1, "date": datetime.date.today().isoformat(), "verdict": verdict, "device": facts, "frames": frames, "steps": results}


def partial(facts: dict, frames: int, results: dict) -> dict:
    """The result so far: verdict INCOMPLETE, the steps that have finished, the ones not yet run named."""
    pending = [name for name in STEPS if name not in results]
    return {"format": 1, "date": datetime.date.today().isoformat(), "verdict": "INCOMPLETE", "device": facts, "frames": frames,
            "steps": dict(results), "pending": pending}  # fmt: skip


def write_result(out: Path, result: dict) -> None:
    """gpu_check.json and gpu_check.md, each replaced whole (a reader never sees half a file)."""
    out.mkdir(parents=True, exist_ok=True)
    for name, text in (("gpu_check.json", json.dumps(result, indent=2) + "\n"), ("gpu_check.md", markdown(result))):
        partial_path = out / f".{name}.partial"
        partial_path.write_text(text)
        partial_path.replace(out / name)


def markdown(result: dict) -> str:
    device, steps = result["device"], result["steps"]
    machine = device["gpu"]
    if not device["emulated"]:
        machine += f" (sm_{device['arch']}), CUDA {device['driver_cuda']} driver, nvcc {device['nvcc']}, cuda-bindings {device['cuda_bindings']}"

    def cell(*names: str) -> str:
        """Each step's status and the first clause of its detail (the list below the table has all of it)."""
        parts = []
        for name in (n for n in names if n in steps):
            headline = " ".join(steps[name]["detail"].split("; ")[0].split())  # one line: a table row holds no line break
            parts.append(f"{steps[name]['status']} {headline if len(headline) <= 110 else headline[:107] + '...'}".replace("|", "/"))
        return "; ".join(parts)

    cells = [f"{result['date']}, {device.get('commit')}", machine, cell("build", "kernels"), cell("runtime", "runtime_graph", "graph_events")]
    row = "| " + " | ".join([*cells, cell("timing", "memcheck", "racecheck")]) + " |"
    title = f"# GPU check {result['date']}: {result['verdict']}" + (" (EMULATED, not a GPU)" if device["emulated"] else "")
    lines = [title, "", HARDWARE_HEADER, "| --- " * HARDWARE_COLUMNS + "|", row, ""]
    lines += [f"- **{name}** ({steps[name]['seconds']} s): {steps[name]['status']}: {steps[name]['detail']}" for name in steps]
    return "\n".join(lines) + "\n"


def record(result_path: Path, hardware: Path) -> int:
    """Add the check's dated row to docs/hardware.md's table of GPU checks (one row per machine and run)."""
    result = json.loads(result_path.read_text())
    if result["device"]["emulated"]:
        sys.stderr.write("gpu_check: an emulated result is not a GPU run; nothing recorded\n")
        return 1
    row = [line for line in markdown(result).splitlines() if line.startswith(f"| {result['date']}, ")][0]
    text = hardware.read_text()
    header = text.index(HARDWARE_HEADER)
    rule_end = text.index("\n", text.index("\n", header) + 1)
    hardware.write_text(text[: rule_end + 1] + row + "\n" + text[rule_end + 1 :])
    sys.stdout.write(f"gpu_check: recorded {result['date']} {result['device']['gpu']} in {hardware}\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.gpu_check", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=Path(os.environ.get("OUT") or REPO / "reports" / "gpu-check"), help="folder for gpu_check.json and gpu_check.md"
    )
    parser.add_argument("--frames", type=int, default=30, help="frames of the example per runtime run (default 30)")
    parser.add_argument("--emulate", action="store_true", help="the emulated device instead of a GPU (tests the check itself)")
    parser.add_argument("--wheels", type=Path, default=REPO / ".whl", help="wheels of missing Python packages (default .whl)")
    parser.add_argument("--fetch-wheels", type=Path, metavar="DIR", help="download those wheels for the lent machine's Python 3.12 (needs PyPI)")
    parser.add_argument("--record", type=Path, metavar="GPU_CHECK_JSON", help="add a result's row to docs/hardware.md")
    parser.add_argument("--hardware", type=Path, default=REPO / "docs" / "hardware.md", help=argparse.SUPPRESS)
    parser.add_argument("--sanitizer-workload", type=Path, metavar="BUILD", help=argparse.SUPPRESS)
    parser.add_argument("--runtime-run", type=Path, nargs=2, metavar=("RELEASE", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument("--variant", choices=("cpu", "cuda", "cuda_graph"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.fetch_wheels:
        return fetch_wheels(args.fetch_wheels)
    if args.record:
        return record(args.record, args.hardware)
    if args.sanitizer_workload:
        from tools.gpu_check.steps import sanitizer_workload

        return sanitizer_workload(args.sanitizer_workload)
    if args.runtime_run:
        from tools.gpu_check.runtime import run_variant

        return run_variant(*args.runtime_run, args.variant, args.frames, args.emulate)
    if not args.emulate:
        reason = no_gpu_reason()
        if reason is not None:
            sys.stdout.write(f"gpu_check: no NVIDIA GPU here ({reason.split(': TensorRT')[0]}); nothing was checked\n")
            return 0
    started = time.monotonic()
    absent = use_wheels(args.wheels)
    if absent:
        sys.stdout.write(
            f"gpu_check: missing Python packages {', '.join(absent)}: carry their wheels (python -m tools.gpu_check --fetch-wheels .whl)\n"
        )
        return 1
    result = run_steps(args.out, args.frames, args.emulate, started + BUDGET_S)
    result["seconds"] = round(time.monotonic() - started, 1)
    write_result(args.out, result)
    sys.stdout.write(f"gpu_check: {result['verdict']} in {result['seconds']} s; {args.out / 'gpu_check.json'}, {args.out / 'gpu_check.md'}\n")
    return 0 if result["verdict"] == "PASS" else 3


if __name__ == "__main__":
    sys.exit(main())
