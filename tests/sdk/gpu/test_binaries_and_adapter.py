"""Which image a device loads, what a release carries for it, and the adapter's contract with cuda-python."""

from __future__ import annotations

import sys

import pytest

from sdk.errors import BackendError, MissingDependencyError
from sdk.gpu import driver as adapter
from sdk.gpu import nvrtc as nvrtc_module
from sdk.gpu.binaries import SOURCES, KernelManifest, check_nvrtc_for_driver, choose_image, driver_version, files_for_target, load_image

BUILT = KernelManifest.parse({"module": "preprocess", "toolkit": "13.0", "sass": [87, 110], "ptx": 87})


@pytest.mark.parametrize(
    ("device", "cc", "driver", "kind", "arch"),
    [
        ("AGX Orin, JetPack 7 (CUDA 13)", (8, 7), 13000, "cubin", 87),
        ("Thor (CUDA 13)", (11, 0), 13000, "cubin", 110),
        ("RTX 4090: same major, higher minor runs sm_87 SASS", (8, 9), 13020, "cubin", 87),
        ("H100: PTX JIT", (9, 0), 13000, "ptx", 87),
        ("AGX Orin, JetPack 6 (CUDA 12.6): too old for CUDA 13 binaries", (8, 7), 12060, "nvrtc", 87),
        ("RTX 3090 (8.6): below every binary", (8, 6), 13000, "nvrtc", 86),
        ("Turing (7.5)", (7, 5), 13000, "nvrtc", 75),
    ],
)
def test_image_choice_follows_cuda_compatibility(device, cc, driver, kind, arch):
    choice = choose_image(BUILT, cc, driver)
    assert (choice.kind, choice.arch) == (kind, arch), (device, choice.reason)
    assert (choice.file is None) == (kind == "nvrtc")


def test_ptx_needs_a_driver_as_new_as_the_toolkit():
    manifest = KernelManifest.parse({"module": "preprocess", "toolkit": "13.2", "sass": [87], "ptx": 87})
    assert choose_image(manifest, (9, 0), 13020).kind == "ptx"
    late = choose_image(manifest, (9, 0), 13000)
    assert late.kind == "nvrtc" and "13.2 driver" in late.reason
    assert choose_image(manifest, (8, 7), 13000).kind == "cubin"  # minor-version compatibility covers SASS


def test_missing_files_and_missing_manifest_fall_back():
    assert choose_image(BUILT, (8, 7), 13000, available={"preprocess.compute_87.ptx"}).kind == "ptx"
    assert choose_image(BUILT, (8, 7), 13000, available=set()).kind == "nvrtc"
    assert choose_image(None, (8, 7), 13000).reason == "no prebuilt kernels shipped"


def test_nvrtc_must_not_be_newer_than_the_driver():
    check_nvrtc_for_driver((12, 6), 12060)  # JetPack 6's own NVRTC
    check_nvrtc_for_driver((12, 8), 12060)  # minor-version compatibility
    check_nvrtc_for_driver((12, 6), 13000)
    with pytest.raises(BackendError, match="cannot load") as caught:
        check_nvrtc_for_driver((13, 5), 12060)  # pip's CUDA 13 NVRTC on JetPack 6
    assert "cu12" in caught.value.hint


def test_installed_nvrtc_reports_its_version():
    pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-bindings is not installed")
    major, minor = nvrtc_module.nvrtc_version()
    assert major >= 12 and minor >= 0


def test_driver_version_encoding():
    assert driver_version(12060) == (12, 6) and driver_version(13000) == (13, 0) and driver_version(11080) == (11, 8)


def test_a_release_carries_only_the_targets_binary_plus_ptx_and_source():
    orin = files_for_target(BUILT, (8, 7))
    assert "preprocess.sm_87.cubin" in orin and "preprocess.sm_110.cubin" not in orin
    assert "preprocess.compute_87.ptx" in orin and "preprocess.json" in orin and set(SOURCES) <= set(orin)
    thor = files_for_target(BUILT, (11, 0))
    assert "preprocess.sm_110.cubin" in thor and "preprocess.sm_87.cubin" not in thor
    assert not [f for f in files_for_target(BUILT, (7, 5)) if f.endswith(".cubin")]
    assert {"preprocess.sm_87.cubin", "preprocess.sm_110.cubin"} <= set(files_for_target(BUILT, None))


def test_loaded_images(tmp_path):
    (tmp_path / "preprocess.sm_87.cubin").write_bytes(b"\x7fELF...")
    (tmp_path / "preprocess.compute_87.ptx").write_bytes(b".version 9.0")
    assert load_image(tmp_path, choose_image(BUILT, (8, 7), 13000)) == b"\x7fELF..."
    assert load_image(tmp_path, choose_image(BUILT, (9, 0), 13000)) == b".version 9.0\0"  # PTX is a C string
    with pytest.raises(BackendError, match="no prebuilt"):
        load_image(tmp_path, choose_image(BUILT, (7, 5), 13000))


def test_zero_copy_only_where_the_gpu_shares_memory():
    assert adapter.input_memory(integrated=True, can_map_host_memory=True) == "mapped"  # Jetson, DRIVE
    assert adapter.input_memory(integrated=False, can_map_host_memory=True) == "copy"  # PCIe: mapped reads cross the bus per tap
    assert adapter.input_memory(integrated=True, can_map_host_memory=False) == "copy"


def test_every_driver_name_the_adapter_uses_exists_in_cuda_bindings():
    driver = pytest.importorskip("cuda.bindings.driver", reason="cuda-bindings is not installed")
    assert [n for n in adapter.DRIVER_NAMES if not hasattr(driver, n)] == []
    assert [n for n in adapter.DRIVER_ATTRIBUTES if not hasattr(driver.CUdevice_attribute, n)] == []
    assert hasattr(driver.CUstream_flags, "CU_STREAM_NON_BLOCKING") and hasattr(driver.CUevent_flags, "CU_EVENT_DEFAULT")
    assert hasattr(driver.CUresult, "CUDA_SUCCESS")
    assert hasattr(driver.CUstreamCaptureMode, "CU_STREAM_CAPTURE_MODE_THREAD_LOCAL")
    assert hasattr(driver.CUevent_record_flags, "CU_EVENT_RECORD_EXTERNAL")  # stage events inside a captured frame


def test_the_adapter_calls_no_driver_name_it_does_not_declare():
    """Every `call("name"` and `own("name"` in driver.py is in DRIVER_NAMES, so the check above is complete."""
    import re
    from pathlib import Path

    text = Path(adapter.__file__).read_text()
    called = set(re.findall(r'call\("(\w+)"', text)) | set(re.findall(r'own\("(\w+)"', text))
    assert {"cuLaunchKernel", "cuModuleLoadData", "cuMemFree", "cuMemsetD32Async"} <= called <= set(adapter.DRIVER_NAMES)


def test_every_nvrtc_name_exists_in_cuda_bindings():
    nvrtc = pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-bindings is not installed")
    assert [n for n in nvrtc_module.NVRTC_NAMES if not hasattr(nvrtc, n)] == []


@pytest.mark.parametrize("importer", [adapter.import_driver, nvrtc_module.import_nvrtc])
def test_missing_cuda_python_says_how_to_install_it(monkeypatch, importer):
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)
    with pytest.raises(MissingDependencyError) as caught:
        importer()
    assert "perception-deploy-sdk[cuda12]" in caught.value.hint and "[cuda13]" in caught.value.hint  # pyproject's pinned extras


def test_the_adapters_argument_forms_pass_cuda_pythons_conversion():
    """Without a driver each call gets past argument conversion and fails only at loading libcuda: the Python
    types the adapter passes (int addresses, int kernelParams, bytes names) are ones cuda-python accepts."""
    import ctypes

    driver = pytest.importorskip("cuda.bindings.driver", reason="cuda-bindings is not installed")
    try:
        ctypes.CDLL("libcuda.so.1")
        pytest.skip("a CUDA driver is installed: the gpu tests exercise these calls for real")
    except OSError:
        pass
    stream, address = driver.CUstream(0), 0x1000
    calls = [
        ("cuLaunchKernel", (driver.CUfunction(), 3, 2, 1, 32, 8, 1, 0, stream, address, 0)),
        ("cuModuleLoadData", (address,)),
        ("cuModuleGetFunction", (driver.CUmodule(), b"pp_nv12_f16_nchw")),
        ("cuMemHostAlloc", (4096, driver.CU_MEMHOSTALLOC_DEVICEMAP)),
        ("cuMemHostGetDevicePointer", (address, 0)),
        ("cuMemcpyHtoDAsync", (address, address, 16, stream)),
        ("cuMemcpyDtoHAsync", (address, address, 16, stream)),
        ("cuMemsetD32Async", (address, 0, 1, stream)),
        ("cuStreamCreate", (driver.CUstream_flags.CU_STREAM_NON_BLOCKING.value,)),
        ("cuEventCreate", (driver.CUevent_flags.CU_EVENT_DEFAULT.value,)),
        ("cuEventRecord", (driver.CUevent(), stream)),
        ("cuEventRecordWithFlags", (driver.CUevent(), stream, driver.CUevent_record_flags.CU_EVENT_RECORD_EXTERNAL.value)),
        # The frame's CUDA graph (sdk/gpu/graph.py), in the forms CudaModule passes them.
        ("cuStreamBeginCapture", (stream, driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)),
        ("cuStreamEndCapture", (stream,)),
        ("cuGraphInstantiate", (driver.CUgraph(), 0)),
        ("cuGraphLaunch", (driver.CUgraphExec(), stream)),
    ]
    for name, args in calls:
        with pytest.raises(Exception) as caught:  # noqa: B017 - which error is the point, checked below
            getattr(driver, name)(*args)
        assert not isinstance(caught.value, TypeError | ValueError), f"{name}: {caught.value}"
        assert "driver" in str(caught.value).lower(), f"{name}: {caught.value!r}"
