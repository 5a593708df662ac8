"""tools/validation/selftest_bundle.py: what the host packs for `sdk selftest`'s gpu tests."""

from __future__ import annotations


def test_the_bundle_holds_the_gpu_tests_their_helpers_and_pytest_for_the_devices_python(tmp_path):
    """pip, run on the host's Python, evaluates markers for the host: for a Python 3.10 device the bundle must still
    carry exceptiongroup and tomli, which pytest needs below 3.11."""
    from tools.release.wheels import wheel_distribution
    from tools.validation.selftest_bundle import build_bundle

    bundle = build_bundle({"arch": "aarch64", "python_abi": "cp310"}, tmp_path / "cache")
    assert bundle.tests == ["tests/plugins_cuda/test_gpu.py", "tests/sdk/backends/test_tensorrt_backend.py"]
    assert {"tests/conftest.py", "tests/plugins_cuda/conftest.py", "tests/plugins_cuda/helpers.py", "conftest.py", "pytest.ini"} <= set(bundle.files)
    assert "pipelines/assets/vtest.avi" in bundle.files and not any(name.startswith("sdk/") for name in bundle.files)  # the release's sdk runs
    # The example prepared on the host (onnx-graphsurgeon stays home): the TensorRT tests build their engine from it.
    assert {"selftest-prepared/example/model.onnx", "selftest-prepared/example/prepare.json"} <= set(bundle.files)
    distributions = {wheel_distribution(wheel) for wheel in bundle.wheels}
    assert {"pytest", "pluggy", "iniconfig", "packaging", "exceptiongroup", "tomli"} <= distributions, distributions
    assert all(wheel.name.endswith("-none-any.whl") for wheel in bundle.wheels)
