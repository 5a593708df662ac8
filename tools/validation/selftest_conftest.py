"""The selftest bundle's root conftest.py (tools/validation/selftest_bundle.py ships this file as `conftest.py`): on a device,
a test whose module or fixture imports a package the device does not have (onnx, onnx-graphsurgeon, the host's
tools) is reported as skipped, naming the package, instead of as a collection or setup error. Any other error stays
an error. Not imported by the SDK; pytest loads it on the device."""

from __future__ import annotations

import re

import pytest

MISSING = re.compile(r"No module named '([^']+)'")


def _missing(text: str) -> str | None:
    found = MISSING.search(text)
    return found.group(1) if found and "ModuleNotFoundError" in text else None


def _reason(module: str) -> str:
    return f"Skipped: the device lacks the module {module} (a host-side package this test or its fixture imports)"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    report = outcome.get_result()
    module = _missing(str(report.longrepr)) if report.failed else None
    if module is not None:
        report.outcome = "skipped"
        report.longrepr = (str(collector.path), 0, _reason(module))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if call.when == "setup" and call.excinfo is not None and call.excinfo.errisinstance(ModuleNotFoundError):
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, _reason(call.excinfo.value.name or str(call.excinfo.value)))
