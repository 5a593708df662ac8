"""sdk/selftest_pytest.py: the `gpu_tests` check on the device (no wheels and no pytest; the deadline; the JUnit report)."""

from __future__ import annotations

from sdk import selftest_pytest
from tools.validation.selftest_bundle import DEVICE_CONFTEST, REPO, TestBundle, pytest_ini


def lay_out(bundle: TestBundle, folder) -> None:
    for name, content in bundle.contents().items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(content if isinstance(content, bytes) else content.read_bytes())


def test_without_wheels_or_a_pytest_on_the_device_the_report_says_so(tmp_path, monkeypatch):
    """Where pytest could not be fetched for the device and the device has none: SKIP, naming both."""
    bundle = TestBundle({}, ["tests/test_x.py"], no_wheels="cannot fetch wheels of pytest for aarch64 cp310: no network")
    lay_out(bundle, tmp_path)
    monkeypatch.setattr(selftest_pytest, "_pytest_importable", lambda: None)
    check = selftest_pytest.run_gpu_tests(tmp_path, tmp_path)
    assert check["status"] == "SKIP" and check["tests"] == []
    assert check["detail"] == (
        "the gpu tests did not run: pytest could not be shipped (cannot fetch wheels of pytest for aarch64 cp310: no network) "
        "and this device's Python has none"
    )


SLOW = b"""import time

import pytest


@pytest.mark.gpu
def test_a_kernel_that_hangs():
    time.sleep(60)
"""


def test_tests_past_their_deadline_are_stopped_and_fail_the_check(tmp_path):
    """The device's own pytest (no wheels shipped here) runs a gpu test that hangs; the deadline ends it and its
    process group, and the check fails saying so."""
    folder = tmp_path / "bundle"
    folder.mkdir()
    files = {"tests/test_hangs.py": SLOW, "pytest.ini": pytest_ini(REPO), "conftest.py": DEVICE_CONFTEST}
    lay_out(TestBundle(files, ["tests/test_hangs.py"], no_wheels="not packed by this test"), folder)
    check = selftest_pytest.run_gpu_tests(tmp_path, folder, deadline_s=5)
    assert check["status"] == "FAIL"
    assert check["detail"].startswith("the gpu tests did not finish within their deadline of 5 s (the device's own pytest")
