"""The steps of tools/gpu_check/check.py. Each returns a dict with `status` (PASS, FAIL or SKIP), `detail` and its numbers.

`device(kernels)` opens the CUDA device through the runtime's own adapter (sdk.gpu.driver.CudaModule), or, with
`emulate`, the emulated device (sdk/gpu/emulation.py) with the C++ host reference as the kernels: the same step code
runs both ways, which is how the check is tested on machines without a GPU.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "pipelines" / "pedestrian.yaml"
VIDEO = REPO / "pipelines" / "assets" / "vtest.avi"
PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"
# Every resize mode and sampling grid, BGR and NV12, across the output types and layouts the kernels have.
GRIDS = [(mode, coordinates) for mode in ("stretch", "letterbox") for coordinates in ("half_pixel", "asymmetric", "align_corners")]
OUTPUTS = [("float32", "nchw"), ("float16", "nhwc"), ("uint8", "nchw")]


def cases() -> list[tuple[str, str, dict]]:
    """(name, source format, Preprocess settings): 12 grid cases, a crop, gray, and NV12 with padded pitches."""
    out = []
    for index, (mode, coordinates) in enumerate(GRIDS):
        dtype, layout = OUTPUTS[index % len(OUTPUTS)]
        for fmt in ("bgr8", "nv12"):
            settings = {"resize": {"width": 320, "height": 224, "mode": mode, "coordinates": coordinates}, "dtype": dtype, "layout": layout}
            if dtype != "uint8":
                settings["normalize"] = {"scale": 1 / 127.5, "mean": [1, 1, 1]}
            out.append((f"{fmt}-{mode}-{coordinates}-{dtype}-{layout}", fmt, settings))
    out.append(
        ("bgr8-crop-u8", "bgr8", {"resize": {"width": 96, "height": 64}, "crop": {"x": 100, "y": 50, "width": 400, "height": 300}, "dtype": "uint8"})
    )
    out.append(("bgr8-gray", "bgr8", {"resize": {"width": 128, "height": 128, "coordinates": "align_corners"}, "color": "gray"}))
    out.append(("nv12-pitched-letterbox-f16", "nv12-pitched", {"resize": {"width": 320, "height": 192, "mode": "letterbox"}, "dtype": "float16"}))
    return out


def frames(count: int = 3) -> list[np.ndarray]:
    """Real frames of the example's clip, spread over it."""
    import cv2

    capture = cv2.VideoCapture(str(VIDEO))
    total = int(capture.get(cv2.CAP_PROP_FRAME_COUNT)) or 100
    out = []
    for index in np.linspace(0, total - 1, count).astype(int):
        capture.set(cv2.CAP_PROP_POS_FRAMES, int(index))
        ok, frame = capture.read()
        if ok:
            out.append(frame)
    capture.release()
    return out


def source(fmt: str, frame: np.ndarray):
    """(plan's format, width, height, pitches, the bytes the kernel reads as one buffer: Y rows then UV rows)."""
    from sdk.pixels import Nv12Image

    h, w = frame.shape[:2]
    if fmt == "bgr8":
        return "bgr8", w, h, (None, None), np.ascontiguousarray(frame).reshape(-1)
    nv12 = Nv12Image.from_bgr(frame)
    if fmt == "nv12":
        return "nv12", w, h, (None, None), np.concatenate([nv12.y.reshape(-1), nv12.uv.reshape(-1)])
    pitch, uv_pitch = w + 256, w + 128  # as NVMM surfaces pad their rows
    y = np.full((h, pitch), 0xEE, np.uint8)
    y[:, :w] = nv12.y
    uv = np.full((h // 2, uv_pitch), 0xEE, np.uint8)
    uv[:, :w] = nv12.uv.reshape(h // 2, w)
    return "nv12", w, h, (pitch, uv_pitch), np.concatenate([y.reshape(-1), uv.reshape(-1)])


def run_plan(gpu, plan, data: np.ndarray) -> np.ndarray:
    """One launch of the plan's kernel on `gpu` (CudaModule or EmulatedCuda): the frame copied to the device, the
    output copied back after a wait."""
    frame, _ = gpu.pinned_buffer(data.nbytes, mapped=False)
    np.copyto(frame, data)
    src, dst = gpu.device_buffer(data.nbytes), gpu.device_buffer(plan.output_bytes)
    gpu.upload(src, frame)
    uv = src + plan.source_bytes if plan.uv_bytes else 0
    gpu.enqueue(gpu.function(plan.kernel), plan.grid, plan.block, plan.bound(src, dst, uv))
    out = np.empty(plan.output_shape, plan.numpy_dtype)
    gpu.download(out, dst)
    gpu.synchronize()
    return out


def compare(ours: np.ndarray, theirs: np.ndarray) -> dict:
    diff = np.abs(ours.astype(np.float64) - theirs.astype(np.float64))
    return {
        "bit_exact": bool(np.array_equal(ours.view(np.uint8), theirs.view(np.uint8))),
        "max_abs": float(diff.max()),
        "differing": int((diff > 0).sum()),
    }


def kernels(gpu, reference_lib: Path, images: list[np.ndarray]) -> dict:
    """Every case on real frames: the device's output against the C++ host reference (the kernels' own per-pixel
    source on the CPU, built by the same CMake: bit for bit) and against the numpy twins the emulation runs (bit for
    bit where they agree; the twins are allowed one float32 ulp, tests/plugins_cuda/test_reference_twin.py)."""
    from sdk.gpu.emulation import EmulatedCuda
    from sdk.gpu.plan import PreprocessPlan
    from sdk.spec.schema import Preprocess

    rows, failed = [], []
    with EmulatedCuda("copy", library=reference_lib) as cpp, EmulatedCuda("copy") as twins:
        for name, fmt, settings in cases():
            spec = Preprocess(**settings)
            row = {"case": name, "frames": 0, "bit_exact_cpp": True, "bit_exact_twin": True, "max_abs_twin": 0.0}
            for frame in images:
                plan_format, w, h, (pitch, uv_pitch), data = source(fmt, frame)
                plan = PreprocessPlan.build(spec, plan_format, w, h, pitch=pitch, uv_pitch=uv_pitch)
                ours = run_plan(gpu, plan, data)
                against_cpp, against_twin = compare(ours, run_plan(cpp, plan, data)), compare(ours, run_plan(twins, plan, data))
                row["frames"] += 1
                row["kernel"] = plan.kernel
                row["bit_exact_cpp"] &= against_cpp["bit_exact"]
                row["bit_exact_twin"] &= against_twin["bit_exact"]
                row["max_abs_twin"] = max(row["max_abs_twin"], against_twin["max_abs"])
                bound = 1.0 if plan.dtype == "u8" else 4e-6 * max(1.0, float(np.abs(ours.astype(np.float64)).max()))
                if not against_cpp["bit_exact"] or against_twin["max_abs"] > bound:
                    failed.append(f"{name}: C++ max |diff| {against_cpp['max_abs']}, twin max |diff| {against_twin['max_abs']}")
            rows.append(row)
    exact = sum(row["bit_exact_twin"] for row in rows)
    detail = f"{len(rows)} cases x {len(images)} frames: all bit-exact with the C++ reference; {exact}/{len(rows)} bit-exact with the numpy twins"
    return {"status": FAIL if failed else PASS, "detail": "; ".join(failed[:3]) if failed else detail, "cases": rows}


def timing(gpu, launches: int = 200) -> dict:
    """Kernel times from CUDA events around each launch (CudaModule.launch), after 20 warm-up launches: the
    example's case and a 1080p NV12 letterbox case; and the frame's host-to-device copy."""
    import cv2

    from sdk.gpu.plan import PreprocessPlan
    from sdk.spec.schema import Preprocess

    frame = frames(1)[0]
    big = cv2.resize(frame, (1920, 1080))
    rows = []
    for name, fmt, image, settings in (
        (
            "example 768x576 bgr8 -> 300x300 f32 nchw",
            "bgr8",
            frame,
            {"resize": {"width": 300, "height": 300, "coordinates": "asymmetric"}, "normalize": {"scale": 1 / 127.5, "mean": [1, 1, 1]}},
        ),
        ("1920x1080 nv12 -> 640x640 f16 letterbox", "nv12", big, {"resize": {"width": 640, "height": 640, "mode": "letterbox"}, "dtype": "float16"}),
    ):
        plan_format, w, h, _, data = source(fmt, image)
        plan = PreprocessPlan.build(Preprocess(**settings), plan_format, w, h)
        host, _ = gpu.pinned_buffer(data.nbytes, mapped=False)
        np.copyto(host, data)
        src, dst = gpu.device_buffer(data.nbytes), gpu.device_buffer(plan.output_bytes)
        function, params = gpu.function(plan.kernel), plan.bound(src, dst, src + plan.source_bytes if plan.uv_bytes else 0)
        start, stop = gpu.event(), gpu.event()
        kernel_ms, copy_ms = [], []
        for index in range(launches + 20):
            gpu.record(start)
            gpu.upload(src, host)
            gpu.record(stop)
            copied = gpu.event_ms(start, stop)
            gpu.record(start)
            gpu.enqueue(function, plan.grid, plan.block, params)
            gpu.record(stop)
            if index >= 20:
                kernel_ms.append(gpu.event_ms(start, stop))
                copy_ms.append(copied)
        rows.append(
            {
                "case": name,
                "kernel": plan.kernel,
                "launches": launches,
                "kernel_us_median": round(1000 * float(np.median(kernel_ms)), 2),
                "kernel_us_p90": round(1000 * float(np.percentile(kernel_ms, 90)), 2),
                "copy_in_us_median": round(1000 * float(np.median(copy_ms)), 2),
                "bytes_in": int(data.nbytes),
            }
        )
    detail = "; ".join(f"{r['case']}: {r['kernel_us_median']} us (p90 {r['kernel_us_p90']}), copy in {r['copy_in_us_median']} us" for r in rows)
    return {"status": PASS, "detail": detail, "cases": rows}


def graph_events(gpu, replays: int = 20) -> dict:
    """The confirmed defect, on this device: a frame (upload, kernel) captured between its timing events and
    replayed. Recorded as external event nodes (what the runtime does now) every replay must be timed; recorded
    plainly inside the capture (what it did before), CUDA must refuse to time them after a replay."""
    from sdk.errors import BackendError
    from sdk.gpu.graph import FrameGraph
    from sdk.gpu.plan import PreprocessPlan
    from sdk.spec.schema import Preprocess

    frame = frames(1)[0]
    plan_format, w, h, _, data = source("bgr8", frame)
    plan = PreprocessPlan.build(Preprocess(resize={"width": 300, "height": 300}), plan_format, w, h)
    host, _ = gpu.pinned_buffer(data.nbytes, mapped=False)
    np.copyto(host, data)
    src, dst = gpu.device_buffer(data.nbytes), gpu.device_buffer(plan.output_bytes)
    function, params = gpu.function(plan.kernel), plan.bound(src, dst)
    results = {}
    for external in (True, False):
        start, stop = gpu.event(), gpu.event()
        graph = FrameGraph(gpu)

        def frame_work(external=external, start=start, stop=stop) -> bool:
            gpu.record(start, external=external)
            gpu.upload(src, host)
            gpu.enqueue(function, plan.grid, plan.block, params)
            gpu.record(stop, external=external)
            return True

        if not graph.capture(frame_work):
            results[external] = {"captured": False, "reason": graph.reason}
            continue
        times, refusal = [], None
        for _ in range(replays if external else 1):
            graph.launch()
            gpu.synchronize()
            try:
                times.append(gpu.event_ms(start, stop))
            except BackendError as exc:
                refusal = exc.message
                break
        results[external] = {
            "captured": True,
            "timed_replays": len(times),
            "median_ms": float(np.median(times)) if times else None,
            "refusal": refusal,
        }
    good = results[True].get("timed_replays") == replays
    plain_refused = bool(results[False].get("refusal"))
    median = results[True].get("median_ms")
    detail = (
        f"external event nodes: {results[True].get('timed_replays', 0)}/{replays} replays timed "
        f"(median {'none' if median is None else f'{median:.4f}'} ms); "
        f"plain records in the capture: {'refused after the replay (' + results[False]['refusal'] + ')' if plain_refused else 'NOT refused'}"
    )
    # The status is the runtime's way (external nodes); whether CUDA refuses the old way is evidence for the emulation's
    # rule, reported apart: a device that accepts it makes the emulation stricter than it, not the runtime wrong.
    return {
        "status": PASS if good else FAIL,
        "detail": detail,
        "external": results[True],
        "plain": results[False],
        "emulation_rule_confirmed": plain_refused,
    }


def build(out: Path, arch: str | None) -> dict:
    """The project's CMake with the nvcc on PATH for this GPU's architecture (`arch`, e.g. "90"); None: the host
    reference only (the emulated check)."""
    cmake = shutil.which("cmake")
    if cmake is None:
        return {"status": FAIL, "detail": "cmake is not installed"}
    from tools.release.cuda_toolkit import find_nvcc

    nvcc = find_nvcc()
    if arch and nvcc is None:
        return {"status": FAIL, "detail": "no nvcc on PATH (nor the nvidia-cuda-nvcc wheel)"}
    options = [f"-DPLUGINS_CUDA_ARCHS={arch}", f"-DPLUGINS_NVCC={nvcc}"] if arch else ["-DPLUGINS_CUDA_KERNELS=OFF"]
    started = time.monotonic()
    for command in (
        [cmake, "-S", str(REPO / "plugins_cuda"), "-B", str(out), "-DCMAKE_BUILD_TYPE=Release", *options],
        [cmake, "--build", str(out), "-j", "8"],
    ):
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            return {"status": FAIL, "detail": f"{' '.join(command[:3])} failed: {(done.stdout + done.stderr).strip()[-600:]}"}
    report = (out / f"preprocess.sm_{arch}.ptxas.txt").read_text() if arch and (out / f"preprocess.sm_{arch}.ptxas.txt").is_file() else ""
    registers = [int(r) for r in re.findall(r"Used (\d+) registers", report)]
    spills = [int(s) for s in re.findall(r"(\d+) bytes spill stores", report)]
    manifest = json.loads((out / "preprocess.json").read_text()) if (out / "preprocess.json").is_file() else None
    if arch and (manifest is None or int(arch) not in manifest.get("sass", [])):
        return {"status": FAIL, "detail": f"no sm_{arch} cubin in {out}", "manifest": manifest}
    what = (
        f"sm_{arch} cubin + compute_{manifest['ptx']} PTX, at most {max(registers, default=0)} registers, {sum(spills)} bytes spilled"
        if arch
        else "host reference only"
    )
    return {
        "status": FAIL if sum(spills) else PASS,
        "detail": f"{what} ({time.monotonic() - started:.0f} s)",
        "manifest": manifest,
        "registers_max": max(registers, default=None),
    }


def sanitizer(tool: str, build_dir: Path, timeout: float = 150) -> dict:
    """compute-sanitizer's `tool` (memcheck, racecheck) over every kernel: one launch of each case and of the decode
    kernels, in a child process (python -m tools.gpu_check --sanitizer-workload)."""
    program = shutil.which("compute-sanitizer") or next((str(p) for p in Path("/usr/local").glob("cuda*/bin/compute-sanitizer")), None)
    if program is None:
        return {"status": SKIP, "detail": "compute-sanitizer is not installed"}
    command = [program, "--tool", tool, "--error-exitcode", "9", sys.executable, "-m", "tools.gpu_check", "--sanitizer-workload", str(build_dir)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    except subprocess.TimeoutExpired:
        return {"status": FAIL, "detail": f"{tool} did not finish in {timeout:.0f} s"}
    refused = unsupported_device(done.stdout + done.stderr)
    if refused is not None:  # the sanitizer cannot watch this GPU: nothing was checked, nothing failed
        return {"status": SKIP, "detail": f"{tool}: compute-sanitizer does not support this device ({refused})"}
    summary = sanitizer_errors(done.stdout + done.stderr)
    launched = re.findall(r"workload: (\d+) launches", done.stdout)
    ok = done.returncode == 0 and summary is not None and summary[0] == 0 and launched
    errors, warnings = summary if summary is not None else ("?", None)
    found = f"{errors} errors" + (f", {warnings} warnings" if warnings is not None else "")
    detail = f"{tool}: {found} over {launched[-1] if launched else '?'} launches (exit {done.returncode})"
    return {"status": PASS if ok else FAIL, "detail": detail if ok else detail + ": " + (done.stdout + done.stderr).strip()[-800:]}


def sanitizer_errors(output: str) -> tuple[int, int | None] | None:
    """The errors (and racecheck's warnings) of compute-sanitizer's last summary line, or None where it printed none.
    memcheck ends with `ERROR SUMMARY: N errors`; racecheck with `RACECHECK SUMMARY: H hazards displayed (E errors,
    W warnings)` (both as compute-sanitizer 2025.3 of CUDA 13.0 printed them on an H200)."""
    race = re.findall(r"RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) errors?, (\d+) warnings?\)", output)
    if race:
        return int(race[-1][0]), int(race[-1][1])
    plain = re.findall(r"ERROR SUMMARY: (\d+) errors?", output)
    return (int(plain[-1]), None) if plain else None


def unsupported_device(output: str) -> str | None:
    """compute-sanitizer's own line when it refuses the device ("Device not supported"), or None."""
    for line in output.splitlines():
        if "device not supported" in line.lower() or "unsupported device" in line.lower():
            return line.strip().lstrip("=").strip()[:200]
    return None


def sanitizer_workload(build_dir: Path) -> int:
    """Every preprocessing case once on one real frame, and the SSD and YOLO decode kernels once: what the sanitizer
    watches. Prints the launch count."""
    from sdk.gpu.decode import YoloDecodePlan
    from sdk.gpu.driver import CudaModule, CudaYoloDecoder
    from sdk.gpu.plan import PreprocessPlan
    from sdk.spec.schema import Postprocess, Preprocess

    frame, launches = frames(1)[0], 0
    with CudaModule(build_dir) as gpu:
        for _, fmt, settings in cases():
            plan_format, w, h, (pitch, uv_pitch), data = source(fmt, frame)
            run_plan(gpu, PreprocessPlan.build(Preprocess(**settings), plan_format, w, h, pitch=pitch, uv_pitch=uv_pitch), data)
            launches += 1
        rows = np.random.default_rng(0).uniform(0, 1, (1, 2000, 85)).astype(np.float32)
        spec = Postprocess(decoder={"kind": "yolo", "output": "out", "layout": "v5"}, classes=tuple(f"c{k}" for k in range(80)), score_threshold=0.5)
        CudaYoloDecoder(YoloDecodePlan.build(spec, rows.shape, capacity=512), gpu)(rows)
        launches += 1
    print(f"workload: {launches} launches")
    return 0
