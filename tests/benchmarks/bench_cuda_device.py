"""Device-only checks and timings that the tests do not do (run from the repo root on a machine with a CUDA GPU).

NOT YET RUN ON A GPU (2026-11-24): written for a lent H100 that this task was then not given; expect to fix
small things on its first run. tests/benchmarks/gpu_session.sh runs it after building plugins_cuda:

    python3 tests/benchmarks/bench_cuda_device.py BUILD_DIR OUT_DIR

1. Image choice on this GPU: what choose_image picks, whether each shipped cubin loads (it must not on
   a compute capability it was not built for), PTX JIT, NVRTC for the exact arch; the outputs of the
   PTX-JIT and NVRTC images are compared bit for bit on the same random frame.
2. Fused preprocessing kernel times by CUDA events (after warm-up, median of many):
   a. the SDK path (CudaPreprocessor: H2D copy of the pinned frame, kernel between events), per frame;
   b. back-to-back launches on one device-resident buffer pair (L2-warm), event pair around 200 launches;
   c. back-to-back launches rotating over buffer sets totalling > 3x L2 (DRAM), likewise.
   Outputs poisoned with 0xFF (NaN) first and checked finite afterwards; random (non-zero) inputs.
3. The device-to-device copy ceiling (cuMemcpyDtoDAsync of 1 GiB, bytes read + written).
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sdk.gpu.binaries import KernelManifest  # noqa: E402
from sdk.gpu.driver import CudaModule, CudaPreprocessor  # noqa: E402
from sdk.gpu.params import kernel_arguments  # noqa: E402
from sdk.gpu.plan import PreprocessPlan  # noqa: E402
from sdk.spec.schema import Preprocess  # noqa: E402
from tools.release.kernels import kernel_files  # noqa: E402

if "--smoke" in sys.argv[1:]:
    # The smoke mode CI runs: the modules it drives import, and it says plainly whether a GPU is here to time.
    from sdk.engine.cuda_check import require_cuda_device
    from sdk.errors import BackendError

    try:
        require_cuda_device(BackendError)
        print("smoke: imports fine; a CUDA device is here: time it with tests/benchmarks/gpu_session.sh")
    except BackendError as error:
        print(f"smoke: imports fine; nothing timed: {error.message}")
    sys.exit(0)
build, out = Path(sys.argv[1]), Path(sys.argv[2])
results: dict = {}


def kernels_folder(dest: Path, with_binaries: bool) -> Path:
    if dest.exists():
        shutil.rmtree(dest)
    for rel, path in kernel_files(build if with_binaries else None, None).items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_bytes(path.read_bytes())
    return dest / "kernels"


release_kernels = kernels_folder(Path("/tmp/bench_release"), True)
source_only = kernels_folder(Path("/tmp/bench_nvrtc"), False)

CASES = {
    "pedestrian 768x576 bgr8 -> 300x300 f32 nchw": (
        Preprocess(
            resize={"width": 300, "height": 300, "mode": "stretch", "coordinates": "asymmetric"},
            color="rgb",
            normalize={"scale": 1 / 255, "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]},
            layout="nchw",
            dtype="float32",
        ),
        "bgr8",
        768,
        576,
    ),
    "1920x1080 nv12 -> 640x640 f16 nchw letterbox": (
        Preprocess(resize={"width": 640, "height": 640, "mode": "letterbox"}, dtype="float16"),
        "nv12",
        1920,
        1080,
    ),
    "1920x1080 nv12 -> 640x640 f32 nchw letterbox": (
        Preprocess(resize={"width": 640, "height": 640, "mode": "letterbox"}, dtype="float32"),
        "nv12",
        1920,
        1080,
    ),
}


def events(cuda):
    return [cuda.call("cuEventCreate", 0) for _ in range(2)]


def elapsed(cuda, start, stop) -> float:
    cuda.call("cuEventSynchronize", stop)
    return float(cuda.call("cuEventElapsedTime", start, stop))


# ---- 1. image choice and loadability
with CudaModule(release_kernels) as cuda:
    cu = cuda._cu
    dev = cuda.call("cuDeviceGet", 0)
    attr = cu.CUdevice_attribute
    cc = (
        cuda.call("cuDeviceGetAttribute", attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
        cuda.call("cuDeviceGetAttribute", attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev),
    )
    sms = cuda.call("cuDeviceGetAttribute", attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev)
    l2 = cuda.call("cuDeviceGetAttribute", attr.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, dev)
    drv = cuda.call("cuDriverGetVersion")
    manifest = KernelManifest.load(release_kernels / "preprocess.json")
    results["device"] = {
        "cc": cc,
        "sms": sms,
        "l2_bytes": l2,
        "driver_api": drv,
        "manifest": json.loads((release_kernels / "preprocess.json").read_text()),
    }
    results["choice"] = {"kind": cuda.choice.kind, "arch": cuda.choice.arch, "file": cuda.choice.file, "reason": cuda.choice.reason}
    loads = {}
    for arch in manifest.sass:
        data = np.frombuffer((release_kernels / manifest.cubin_name(arch)).read_bytes(), np.uint8)
        err, module = cu.cuModuleLoadData(data.ctypes.data)
        loads[f"sm_{arch} cubin"] = cu.cuGetErrorName(err)[1].decode()
        if err == cu.CUresult.CUDA_SUCCESS:
            cu.cuModuleUnload(module)
    results["cubin_loads_here"] = loads
print(json.dumps({k: results[k] for k in ("device", "choice", "cubin_loads_here")}, indent=1), flush=True)

rng = np.random.default_rng(1)
name0, (spec0, fmt0, w0, h0) = next(iter(CASES.items()))
plan0 = PreprocessPlan.build(spec0, fmt0, w0, h0)
frame0 = rng.integers(0, 256, plan0.source_bytes + plan0.uv_bytes, dtype=np.uint8)
outs = {}
for label, folder in (("release (PTX JIT)", release_kernels), ("source only (NVRTC)", source_only)):
    with CudaModule(folder) as cuda:
        gpu = CudaPreprocessor(plan0, cuda)
        gpu(frame0)
        outs[label] = gpu.download()
        results.setdefault("image_paths", {})[label] = f"{cuda.choice.kind} arch {cuda.choice.arch}: {cuda.choice.reason}"
results["ptx_equals_nvrtc_bitwise"] = outs["release (PTX JIT)"].tobytes() == outs["source only (NVRTC)"].tobytes()
print(json.dumps({k: results[k] for k in ("image_paths", "ptx_equals_nvrtc_bitwise")}, indent=1), flush=True)

# ---- 2. timings
WARM, ITERS, BATCH = 50, 500, 200
timings = {}
with CudaModule(release_kernels) as cuda:
    cu = cuda._cu
    start, stop = events(cuda)
    for name, (spec, fmt, w, h) in CASES.items():
        plan = PreprocessPlan.build(spec, fmt, w, h)
        floor_bytes = plan.minimum_bytes()
        row = {"kernel": plan.kernel, "grid": plan.grid, "block": plan.block, "minimum_bytes": floor_bytes}
        # a. the SDK path
        gpu = CudaPreprocessor(plan, cuda)
        gpu.input_array[:] = rng.integers(0, 256, gpu.input_array.size, dtype=np.uint8)
        kernel_ms, upload_ms = [], []
        for i in range(WARM + ITERS):
            cuda.call("cuEventRecord", start, cuda.stream)
            cuda.upload(gpu._source, gpu.input_array)
            cuda.call("cuEventRecord", stop, cuda.stream)
            up = elapsed(cuda, start, stop)
            k = gpu()
            if i >= WARM:
                kernel_ms.append(k)
                upload_ms.append(up)
        row["sdk_path_kernel_us_median"] = 1000 * statistics.median(kernel_ms)
        row["sdk_path_kernel_us_p10_p90"] = [1000 * float(np.percentile(kernel_ms, 10)), 1000 * float(np.percentile(kernel_ms, 90))]
        row["h2d_copy_us_median"] = 1000 * statistics.median(upload_ms)
        # b./c. device-resident buffer sets, back-to-back launches
        fn = cuda.function(plan.kernel)
        set_bytes = plan.source_bytes + plan.uv_bytes + plan.output_bytes
        n_sets = max(1, -(-3 * l2 // set_bytes))
        sets = []
        for _ in range(n_sets):
            src = cuda.device_buffer(plan.source_bytes + plan.uv_bytes)
            dst = cuda.device_buffer(plan.output_bytes)
            host = rng.integers(0, 256, plan.source_bytes + plan.uv_bytes, dtype=np.uint8)
            cuda.call("cuMemcpyHtoD", src, host.ctypes.data, host.nbytes)
            cuda.call("cuMemsetD8", dst, 0xFF, plan.output_bytes)  # NaN in f16 and f32
            params = plan.bound(src, dst, src + plan.source_bytes if plan.uv_bytes else 0)
            pointers, address = kernel_arguments(params)
            sets.append((params, pointers, address, dst))
        for label, used in (("l2_warm_one_buffer", sets[:1]), (f"rotating_{n_sets}_sets", sets)):

            def batch(count, fn=fn, plan=plan, used=used):
                cuda.call("cuEventRecord", start, cuda.stream)
                for j in range(count):
                    cuda.call("cuLaunchKernel", fn, *plan.grid, *plan.block, 0, cuda.stream, used[j % len(used)][2], 0)
                cuda.call("cuEventRecord", stop, cuda.stream)
                return elapsed(cuda, start, stop) / count

            batch(BATCH)  # warm-up
            per = [batch(BATCH) for _ in range(30)]
            row[f"{label}_us_per_launch_median"] = 1000 * statistics.median(per)
            row[f"{label}_spread_us"] = [1000 * min(per), 1000 * max(per)]
        unwritten = 0
        for _params, _, _, dst in sets:
            o = np.empty(plan.output_shape, plan.numpy_dtype)
            cuda.call("cuMemcpyDtoH", o.ctypes.data, dst, o.nbytes)
            unwritten += int((~np.isfinite(o.astype(np.float32))).sum())
        row["non_finite_outputs_after_poison"] = unwritten
        t = row[f"rotating_{n_sets}_sets_us_per_launch_median"] * 1e-6
        row["rotating_effective_GBps"] = floor_bytes / t / 1e9
        timings[name] = row
        print(name, json.dumps(row), flush=True)
    # 3. D2D ceiling
    n = 1 << 30
    a, b = cuda.device_buffer(n), cuda.device_buffer(n)
    cuda.call("cuMemsetD8", a, 7, n)
    for _ in range(3):
        cuda.call("cuMemcpyDtoDAsync", b, a, n, cuda.stream)
    per = []
    for _ in range(20):
        cuda.call("cuEventRecord", start, cuda.stream)
        cuda.call("cuMemcpyDtoDAsync", b, a, n, cuda.stream)
        cuda.call("cuEventRecord", stop, cuda.stream)
        per.append(elapsed(cuda, start, stop))
    d2d = 2 * n / (statistics.median(per) / 1000)
    results["d2d_copy_TBps_read_plus_write"] = d2d / 1e12
    for row in timings.values():
        row["floor_us_at_measured_d2d"] = row["minimum_bytes"] / d2d * 1e6
    for s in (start, stop):
        cuda.call("cuEventDestroy", s)
results["timings"] = timings
(out / "bench_cuda_device.json").write_text(json.dumps(results, indent=1, default=str))
print(f"\nD2D copy: {results['d2d_copy_TBps_read_plus_write']:.2f} TB/s (read+write, 1 GiB, median of 20)")
print(f"{'case':48s} {'floor':>7s} {'sdk k':>7s} {'h2d':>7s} {'L2warm':>7s} {'DRAMrot':>8s} {'GB/s':>6s} bad")
for name, r in timings.items():
    rot = [k for k in r if k.startswith("rotating_") and k.endswith("median")][0]
    print(
        f"{name:48s} {r['floor_us_at_measured_d2d']:7.2f} {r['sdk_path_kernel_us_median']:7.2f} {r['h2d_copy_us_median']:7.1f} "
        f"{r['l2_warm_one_buffer_us_per_launch_median']:7.2f} {r[rot]:8.2f} {r['rotating_effective_GBps']:6.0f} "
        f"{r['non_finite_outputs_after_poison']}"
    )
