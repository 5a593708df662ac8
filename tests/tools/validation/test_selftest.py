"""`sdk selftest --target T`: the release's hardware checks, run on the target (without a GPU, and with one where the machine has it)."""

from __future__ import annotations

import ctypes
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import PIPELINE, tiny_yolo
from tests.tools.engines.test_remote_build import tensorrt_standin_python
from tools.deploy.flow import Deploy

REPO = Path(__file__).resolve().parents[3]


def has_cuda_driver() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def test_on_a_machine_without_gpu_the_checks_skip_with_their_reasons(tiny_pipeline, tmp_path, state_dir, monkeypatch, sdk):
    """The selftest runs in a child process that finds this machine's driver itself: where one loads, the GPU test below
    covers the machine instead. The probe (in this process) is told there is no GPU, so an `nvidia-smi` on PATH
    without a loadable driver ships no kernels either."""
    if has_cuda_driver():
        pytest.skip("this machine has a CUDA driver (libcuda.so.1): test_on_a_gpu_machine_the_cuda_checks_run covers it")
    from sdk import probe

    monkeypatch.setattr(probe, "_compute_capability", lambda soc: None)
    refused = sdk("selftest", "--target", "local")
    assert refused.returncode == 1 and "no release has passed its health check here" in refused.stderr
    pipeline, _ = tiny_pipeline(frames=5)
    Deploy(pipeline.path, "local", frames=2, report_dir=tmp_path / "r")()
    done = sdk("selftest", "--target", "local")
    assert done.returncode == 4, done.stdout + done.stderr  # skipped for lack of hardware: proves nothing
    assert "cuda_driver" in done.stdout and "SKIP" in done.stdout and "no CUDA driver" in done.stdout
    assert "the release has no TensorRT engine" in done.stdout and "the release carries no CUDA kernels" in done.stdout
    assert "cuda_pipeline_matches_cpu" in done.stdout and "cuda_graph_replays_the_frame" in done.stdout
    # The gpu-marked tests ran on the "device" (here: the local release) and were skipped, one row each, with why.
    assert "gpu_tests" in done.stdout and "test_kernel_time_by_cuda_events" in done.stdout and "skipped" in done.stdout
    assert not (state_dir / "targets" / "local" / "scratch").exists()


@pytest.mark.slow
def test_the_cuda_pipeline_check_on_the_emulated_device(state_dir, tmp_path, monkeypatch, deployed_relaxed):
    """The selftest's short CUDA-path run against the CPU path, everything but the GPU: the example's release (its
    budgets relaxed, which the check does not read),
    the CUDA path on the emulated device (which the check names in its detail). Four frames: the first is captured,
    the other three replay, each compared with the un-captured path's detections; more frames repeat the same lines
    of code on the same emulated kernels."""
    from sdk.selftest import PASS, cuda_graph_replays_the_frame, cuda_pipeline_matches_cpu

    monkeypatch.delenv("SDK_CUDA_EMULATION", raising=False)
    deployed_relaxed(tmp_path / "p", state_dir)  # the example (relaxed budgets) deployed once per run, copied here
    release = (state_dir / "targets" / "local" / "current").resolve()
    status, detail = cuda_pipeline_matches_cpu(release, gpu=False, frames=4, emulate=True)
    assert status == PASS, detail
    assert detail.startswith("EMULATED on the host, not a GPU: 4 frames: 100.0% of") and "decode on cuda" in detail
    assert "SDK_CUDA_EMULATION" not in os.environ  # restored
    # The same path captured as one CUDA graph per frame (preprocess.cuda_graph) replays it: the same detections.
    status, detail = cuda_graph_replays_the_frame(release, gpu=False, frames=4, emulate=True)
    assert status == PASS, detail
    assert detail.startswith("EMULATED on the host, not a GPU: 3 of 4 frames replayed; 4 with the un-captured path's detections")
    assert "SDK_CUDA_EMULATION" not in os.environ


def release_store_snapshot(root: Path) -> dict:
    """Every file of the store and the releases, with its size and modification time."""
    return {
        str(path.relative_to(root)): (path.lstat().st_size, path.lstat().st_mtime_ns)
        for folder in ("store", "releases", "envs", "state.json", "current", "committed")
        for path in ([root / folder] if not (root / folder).is_dir() else (root / folder).rglob("*"))
        if path.exists() or path.is_symlink()
    }


@pytest.fixture(scope="module")
def orin_release(sim_server, tmp_path_factory):
    """Target `sim` on the shared SSH server as an AGX Orin with a TensorRT 10.3 stand-in but no GPU (its Python sees a
    `tensorrt` package that only carries a version, tests/tools/engines/test_remote_build.py), in a remote root of
    its own, with the tiny pipeline's release deployed once for the module: each selftest below only reads the
    release and asserts that it leaves the store as it found it, so the two share one deploy over SSH."""
    folder = tmp_path_factory.mktemp("orin")
    targets, state, root = folder / "targets", folder / "state", folder / "remote"
    root.mkdir()
    wrapper = tensorrt_standin_python(folder)
    sim_server.write_target(targets / "sim.yaml", remote_root=str(root), platform="jetson-agx-orin", python=str(wrapper))
    (folder / "pipeline").mkdir()
    tiny_yolo(folder / "pipeline" / "tiny.onnx")
    pipeline = folder / "pipeline" / "tiny.yaml"
    pipeline.write_text(PIPELINE.format(uri="synthetic://boxes?width=64&height=48&frames=5", rate="null", max_ms=5000))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SDK_TARGETS_DIR", str(targets))
        patch.setenv("SDK_STATE_DIR", str(state))
        Deploy(pipeline, "sim", frames=2, report_dir=folder / "r")()
    return SimpleNamespace(name="sim", root=root, targets=targets, state=state)


@pytest.fixture()
def orin_without_gpu(orin_release, monkeypatch):
    """The module's Orin stand-in with its release, as this test's target `sim`."""
    monkeypatch.setenv("SDK_TARGETS_DIR", str(orin_release.targets))
    monkeypatch.setenv("SDK_STATE_DIR", str(orin_release.state))
    return orin_release


@pytest.mark.slow
@pytest.mark.xdist_group("selftest-orin")  # one worker makes the module's deploy (--dist loadgroup hands out tests one by one)
def test_over_ssh_the_gpu_tests_run_on_the_device_and_come_back_skipped_with_their_reason(orin_without_gpu, tmp_path, sdk):
    """The device (an AGX Orin with a TensorRT 10.3 stand-in but no GPU) reports its own TensorRT, found by the
    release's own Python, not the host's. The real bundle (the repository's gpu-marked tests, their conftest
    helpers, pytest wheels fetched for the device's Python) goes to a scratch folder on the device over a real sshd,
    runs with the release's interpreter, and comes back as a JUnit file and one row per test: skipped, each with its
    reason (no GPU here). The scratch folder is gone afterwards and the release store is untouched."""
    import json
    import xml.etree.ElementTree as ElementTree

    ssh_target = orin_without_gpu
    before = release_store_snapshot(ssh_target.root)
    done = sdk("selftest", "--target", ssh_target.name, "--report-dir", str(tmp_path / "selftest"))
    assert done.returncode == 4, done.stdout + done.stderr  # skipped for lack of hardware: INCONCLUSIVE
    assert "tensorrt 10.3.0.30" in done.stdout  # the device's stand-in TensorRT, found by the release's own Python
    report = json.loads((tmp_path / "selftest" / "selftest.json").read_text())
    gpu = next(check for check in report["checks"] if check["name"] == "gpu_tests")
    assert gpu["status"] == "SKIP" and "shipped wheel(s)" in gpu["detail"], gpu
    names = {test["name"].rsplit("::", 1)[1].split("[")[0]: test for test in gpu["tests"]}
    assert {"test_kernel_time_by_cuda_events", "test_the_runtime_stage_writes_the_engines_binding_and_times_by_events"} <= set(names)
    assert {"test_engine_built_here_runs_like_onnx_runtime", "test_a_captured_cuda_graph_replays_the_same_outputs_frame_after_frame"} <= set(names)
    assert all(test["outcome"] == "skipped" and test["reason"] for test in gpu["tests"]), gpu["tests"]
    assert names["test_kernel_time_by_cuda_events"]["reason"] == "no CUDA driver (libcuda.so.1)"
    assert not any("test_matching_io_passes" in name for name in names)  # only the gpu-marked tests run
    assert any("tests/tools/validation/test_selftest.py" in line for line in gpu["left_out"])  # the host's gpu tests stay home, said so
    cases = ElementTree.parse(tmp_path / "selftest" / "junit.xml").getroot().iter("testcase")
    assert len(list(cases)) == len(gpu["tests"])
    assert "test_kernel_time_by_cuda_events" in done.stdout and "no CUDA driver (libcuda.so.1)" in done.stdout
    assert not (ssh_target.root / "scratch").exists()
    assert release_store_snapshot(ssh_target.root) == before


FAILING = b"""import pytest


@pytest.mark.gpu
def test_a_kernel_that_is_wrong():
    assert 1 + 1 == 3, "the kernel wrote the wrong bytes"


@pytest.mark.gpu
def test_a_kernel_that_is_right():
    assert True


def test_not_gpu_marked_so_not_run():
    raise AssertionError("only the gpu-marked tests run")


@pytest.fixture()
def prepared():
    import a_host_only_preparation  # noqa: F401


@pytest.mark.gpu
def test_whose_fixture_needs_a_host_package(prepared):
    pass
"""
NEEDS_HOST = b"""import a_host_only_package  # noqa: F401
import pytest


@pytest.mark.gpu
def test_never_collected():
    pass
"""


@pytest.mark.slow
@pytest.mark.xdist_group("selftest-orin")
def test_a_failing_gpu_test_comes_back_failed_and_fails_the_selftest(orin_without_gpu, tmp_path, monkeypatch):
    """A tiny synthetic bundle injected in place of the repository's: one gpu test fails, one passes. No wheels: the
    device's own pytest runs them, and the report says so. The verdict is FAIL (exit 3). On the module's device, whose
    release the test above reads too."""
    import json

    from tools.cli import run
    from tools.validation import selftest_bundle

    bundle = selftest_bundle.TestBundle(
        {
            "tests/test_synthetic.py": FAILING,
            "tests/test_needs_host.py": NEEDS_HOST,
            "pytest.ini": selftest_bundle.pytest_ini(REPO),
            "conftest.py": selftest_bundle.DEVICE_CONFTEST,
        },
        ["tests/test_synthetic.py", "tests/test_needs_host.py"],
        no_wheels="not packed by this test",
    )
    monkeypatch.setattr(selftest_bundle, "build_bundle", lambda facts, cache: bundle)
    ssh_target = orin_without_gpu
    before = release_store_snapshot(ssh_target.root)
    assert run(["selftest", "--target", ssh_target.name, "--report-dir", str(tmp_path / "selftest")]) == 3
    gpu = next(check for check in json.loads((tmp_path / "selftest" / "selftest.json").read_text())["checks"] if check["name"] == "gpu_tests")
    assert gpu["status"] == "FAIL" and "1 passed, 1 failed" in gpu["detail"] and "the device's own pytest" in gpu["detail"], gpu
    outcomes = {test["name"]: (test["outcome"], test["reason"]) for test in gpu["tests"]}
    assert outcomes["tests.test_synthetic::test_a_kernel_that_is_right"] == ("passed", "")
    outcome, reason = outcomes["tests.test_synthetic::test_a_kernel_that_is_wrong"]
    assert outcome == "failed" and "the kernel wrote the wrong bytes" in reason
    # A module the device lacks, imported by a test file or a fixture: skipped, naming it (not a collection error).
    lacks = "the device lacks the module {} (a host-side package this test or its fixture imports)"
    assert outcomes["tests.test_synthetic::test_whose_fixture_needs_a_host_package"] == ("skipped", lacks.format("a_host_only_preparation"))
    assert [reason for name, (outcome, reason) in outcomes.items() if "test_needs_host" in name] == [lacks.format("a_host_only_package")]
    assert len(outcomes) == 4  # the unmarked test was deselected
    assert not (ssh_target.root / "scratch").exists()
    assert release_store_snapshot(ssh_target.root) == before


@pytest.mark.gpu
def test_on_a_gpu_machine_the_cuda_checks_run(tiny_pipeline, tmp_path, state_dir):
    """Where a driver and a device exist: the local release carries the kernels for the probed compute capability (a
    cubin, the PTX or the source for NVRTC) and the selftest runs the CUDA preprocessing kernel against the CPU path."""
    from sdk.engine.cuda_check import require_cuda_device
    from sdk.errors import SdkError
    from tools.targets import resolve_target
    from tools.validation.selftest import selftest

    try:
        require_cuda_device(SdkError)
    except SdkError as exc:
        pytest.skip(f"needs a CUDA device: {exc.message}")
    pytest.importorskip("cuda.bindings.driver", reason="cuda-bindings is not installed")
    if shutil.which("nvcc") is None:  # no prebuilt kernels: the release carries the source and the device compiles it
        pytest.importorskip("cuda.bindings.nvrtc", reason="neither nvcc nor NVRTC")
    if shutil.which("nvidia-smi") is None:
        pytest.skip("the probe reads a discrete GPU's compute capability with nvidia-smi, which is not on PATH")
    pipeline, _ = tiny_pipeline(frames=5)
    Deploy(pipeline.path, "local", frames=2, report_dir=tmp_path / "r")()
    checks = {check["name"]: check for check in selftest(resolve_target("local"))["checks"]}
    assert checks["cuda_driver"]["status"] == "PASS", checks
    assert checks["cuda_preprocess_matches_cpu"]["status"] == "PASS", checks
    assert "of an 8-bit step" in checks["cuda_preprocess_matches_cpu"]["detail"]
    assert checks["engine_runs"]["status"] in ("N/A", "PASS"), checks  # an engine only where TensorRT builds one
    # The short CUDA-path pipeline (kernel into the engine's binding, decode on the device) needs the engine too.
    assert checks["cuda_pipeline_matches_cpu"]["status"] == ("PASS" if checks["engine_runs"]["status"] == "PASS" else "N/A"), checks
    # The frame as one CUDA graph: PASS, or N/A where there is no engine or TensorRT cannot capture it (with its reason).
    assert checks["cuda_graph_replays_the_frame"]["status"] in ("PASS", "N/A"), checks
