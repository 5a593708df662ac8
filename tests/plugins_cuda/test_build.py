"""The CMake project: a clean host-only configure, the kernels for Orin (sm_87) and Thor (sm_110) with
nvcc and NVRTC (no spills, registers recorded), and the aarch64 host reference under qemu."""

from __future__ import annotations

import json
import re
import subprocess

import numpy as np
import pytest

from sdk.gpu.binaries import SOURCES, KernelManifest
from sdk.gpu.decode import DECODE_KERNELS
from sdk.gpu.nvrtc import compile_source, resource_usage
from sdk.gpu.plan import KERNEL_NAMES, PreprocessPlan
from sdk.spec.schema import Preprocess

from .helpers import to_nv12

ARCHS = (87, 110)  # NVRTC 13 (the test extra); nvcc builds what its release knows (tests/plugins_cuda/test_cuda_archs.py)
# GPUs with no cubin of their own run the compute_87 PTX through the driver's JIT (sdk/gpu/binaries.py), or NVRTC
# compiles the source for them where the driver is older than the toolkit: H100 / H200 (sm_90), B200 (sm_100), RTX 50 (sm_120).
JIT_ARCHS = (90, 100, 120)
# __launch_bounds__(256) lets ptxas use up to 255 registers; more than 64 would cost occupancy on Orin.
MAX_REGISTERS = 64


def test_configure_without_cuda_builds_the_host_reference_only(host_build):
    assert "no CUDA compiler: host reference only" in host_build.configure_log
    assert (host_build.folder / "libpp_reference.so").is_file()
    assert not list(host_build.folder.glob("*.cubin"))


def check_resources(log: str, arch: int) -> dict:
    usage = resource_usage(log)
    assert set(usage) == set(KERNEL_NAMES) | set(DECODE_KERNELS), f"sm_{arch}: kernels differ from the plans' names"
    for name, resources in usage.items():
        assert resources.spill_stores == 0 and resources.spill_loads == 0 and resources.stack_bytes == 0, (arch, name, resources)
        assert resources.registers <= MAX_REGISTERS, (arch, name, resources)
    return usage


def nvcc_release(nvcc) -> tuple[int, int]:
    out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True).stdout
    major, minor = re.search(r"release (\d+)\.(\d+)", out).groups()
    return int(major), int(minor)


def default_sass(release: tuple[int, int]) -> tuple[int, ...]:
    """cmake/cuda_archs.cmake's default: Thor is sm_101 in CUDA 12.8-12.9 and sm_110 from 13.0; 12.6 has neither."""
    return (87,) + ((110,) if release >= (13, 0) else (101,) if release >= (12, 8) else ())


def test_nvcc_builds_a_cubin_per_architecture_without_spills(kernel_build, nvcc):
    """Every architecture this nvcc builds by default (Orin's sm_87 and Thor's: sm_101 with CUDA 12.8-12.9, sm_110 from
    13.0; the other name of Thor is no parameter that would only skip): an ELF cubin, no spills."""
    archs = default_sass(nvcc_release(nvcc))
    assert 87 in archs
    for arch in archs:
        cubin = kernel_build.folder / f"preprocess.sm_{arch}.cubin"
        assert cubin.read_bytes()[:4] == b"\x7fELF"
        usage = check_resources((kernel_build.folder / f"preprocess.sm_{arch}.ptxas.txt").read_text(), arch)
        print(f"nvcc sm_{arch}: registers {min(r.registers for r in usage.values())}..{max(r.registers for r in usage.values())}, no spills")


def test_the_manifest_and_ptx_name_what_was_built(kernel_build, nvcc):
    manifest = KernelManifest.load(kernel_build.folder / "preprocess.json")
    assert manifest.sass == default_sass(nvcc_release(nvcc)) and manifest.ptx == 87
    version = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True).stdout
    assert f"release {manifest.toolkit[0]}.{manifest.toolkit[1]}" in version
    ptx = (kernel_build.folder / manifest.ptx_name()).read_text()
    assert ".target sm_87" in ptx and all(f".entry {name}(" in ptx for name in KERNEL_NAMES + DECODE_KERNELS)
    assert all((kernel_build.folder / manifest.cubin_name(arch)).is_file() for arch in manifest.sass)


@pytest.mark.parametrize("arch", JIT_ARCHS)
def test_the_ptx_assembles_without_spills_where_no_cubin_fits(kernel_build, arch, tmp_path):
    """What the driver's JIT does with the shipped PTX on such a GPU, done by the toolkit's ptxas (the same
    assembler; the driver's may be newer): it assembles, with no spills and no more registers than on Orin."""
    from tools.release.cuda_toolkit import find_ptxas

    ptxas = find_ptxas()
    assert ptxas is not None and ptxas.is_file(), "the nvcc that built the PTX has no ptxas beside it"
    ptx = kernel_build.folder / KernelManifest.load(kernel_build.folder / "preprocess.json").ptx_name()
    done = subprocess.run([str(ptxas), f"-arch=sm_{arch}", "-O3", "-v", str(ptx), "-o", str(tmp_path / "jit.cubin")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    check_resources(done.stdout + done.stderr, arch)


@pytest.fixture(scope="module")
def release_sources(tmp_path_factory):
    """The kernel source as a release lays it out (`kernels/src`, `kernels/include`), from tools.release.kernels'
    list: the files a device's NVRTC fallback has, and nothing else of the repository."""
    from tools.release.kernels import kernel_files

    release = tmp_path_factory.mktemp("release")
    for rel, path in kernel_files(None, (8, 7)).items():
        (release / rel).parent.mkdir(parents=True, exist_ok=True)
        (release / rel).write_bytes(path.read_bytes())
    return release / "kernels"


@pytest.mark.parametrize("arch", ARCHS + JIT_ARCHS)
def test_nvrtc_compiles_the_same_source_without_spills(arch, release_sources):
    """NVRTC compiles the source a release carries (every header it needs is in the release: the fallback on a
    device), for Orin, Thor and the GPUs that have no cubin of their own."""
    pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-bindings is not installed")
    assert sorted(p.relative_to(release_sources).as_posix() for p in release_sources.rglob("*") if p.is_file()) == sorted(SOURCES)
    compiled = compile_source(release_sources, arch)
    assert compiled.cubin[:4] == b"\x7fELF"
    usage = check_resources(compiled.log, arch)
    print(f"NVRTC sm_{arch}: registers {min(r.registers for r in usage.values())}..{max(r.registers for r in usage.values())}, no spills")


CROSS_CASES = [
    # (format, spec, source size)
    ("bgr8", {"resize": {"width": 300, "height": 300, "coordinates": "asymmetric"}, "normalize": {"scale": 2 / 255, "mean": [1, 1, 1]}}, (768, 576)),
    ("nv12", {"resize": {"width": 640, "height": 640, "mode": "letterbox"}, "layout": "nhwc", "dtype": "float16"}, (768, 576)),
    ("bgr8", {"resize": {"width": 17, "height": 5, "coordinates": "align_corners"}, "color": "gray", "dtype": "uint8"}, (1, 1)),
    ("yuyv", {"resize": {"width": 64, "height": 64, "mode": "letterbox"}, "color": "bgr"}, (1000, 4)),
]


def test_aarch64_build_runs_under_qemu_and_matches_x86_bit_for_bit(aarch64_build, reference, real_frames, tmp_path):
    """The cross-built reference (as on Jetson's CPU) gives the same bytes as the x86-64 build."""
    import cv2

    assert (aarch64_build.folder / "pp_run").read_bytes()[18:20] == (183).to_bytes(2, "little")  # ELF e_machine: EM_AARCH64
    for index, (source_format, spec_args, (w, h)) in enumerate(CROSS_CASES):
        spec = Preprocess(**spec_args)
        image = cv2.resize(real_frames[0], (w, h), interpolation=cv2.INTER_AREA)
        plan = PreprocessPlan.build(spec, source_format, w, h)
        uv_path = "-"
        if source_format == "nv12":
            source, uv = to_nv12(image)
            uv_path = tmp_path / f"uv{index}.bin"
            uv_path.write_bytes(uv.tobytes())
        elif source_format == "yuyv":
            from .helpers import to_yuyv

            source, uv = to_yuyv(image), None
        else:
            source, uv = image, None
        expected = reference.run(plan, source, uv)
        (tmp_path / f"params{index}.bin").write_bytes(bytes(plan.params))
        (tmp_path / f"src{index}.bin").write_bytes(np.ascontiguousarray(source).tobytes())
        command = [
            "qemu-aarch64-static", "-L", "/usr/aarch64-linux-gnu", str(aarch64_build.folder / "pp_run"),
            str(tmp_path / f"params{index}.bin"), str(plan.format_id), str(plan.dtype_id), str(plan.layout_id),
            str(tmp_path / f"src{index}.bin"), str(uv_path), str(plan.output_bytes), str(tmp_path / f"out{index}.bin"),
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert (tmp_path / f"out{index}.bin").read_bytes() == expected.tobytes(), f"case {index} differs"


def test_pp_run_refuses_a_parameter_block_of_the_wrong_size(host_build, tmp_path):
    (tmp_path / "params.bin").write_bytes(b"\0" * 8)
    (tmp_path / "src.bin").write_bytes(b"\0" * 8)
    params, source, out = (str(tmp_path / name) for name in ("params.bin", "src.bin", "out.bin"))
    command = [str(host_build.folder / "pp_run"), params, "0", "0", "0", source, "-", "4", out]
    done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and "PpParams" in done.stderr


def test_manifest_written_by_cmake_is_json(kernel_build):
    data = json.loads((kernel_build.folder / "preprocess.json").read_text())
    assert data["module"] == "preprocess"
