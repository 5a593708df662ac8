"""JUnit files checked as a CI server reads them: valid against tests/junit.xsd (xmlschema), read back with junitparser."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SCHEMA = Path(__file__).with_name("junit.xsd")


def _require(module: str, package: str):
    try:
        return __import__(module)
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail(f"CI must install {package} (pyproject's test extra has it)")
        pytest.skip(f"{package} is not installed here (pip install {package})")


def validate_junit(path: Path) -> None:
    """Raise (xmlschema's error, naming the element) unless `path` is valid JUnit XML."""
    xmlschema = _require("xmlschema", "xmlschema")
    xmlschema.XMLSchema(str(SCHEMA)).validate(str(path))


def read_junit(path: Path) -> dict[str, tuple[str, object]]:
    """{case name: (outcome, case)} read by junitparser: outcome "passed", "failure", "error" or "skipped"."""
    junitparser = _require("junitparser", "junitparser")
    cases = {}
    for suite in junitparser.JUnitXml.fromfile(str(path)):
        for case in suite:
            kinds = {type(result).__name__.lower() for result in case.result}
            outcome = "failure" if "failure" in kinds else "error" if "error" in kinds else "skipped" if "skipped" in kinds else "passed"
            cases[case.name] = (outcome, case)
    return cases


def suites(path: Path) -> list:
    junitparser = _require("junitparser", "junitparser")
    return list(junitparser.JUnitXml.fromfile(str(path)))
