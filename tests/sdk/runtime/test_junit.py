"""junit.xml: the one mapping from check statuses to JUnit, the run's traceability, valid JUnit read back by junitparser."""

from __future__ import annotations

import pytest

from sdk.runtime.junit import outcome, write_junit
from sdk.runtime.verdict import FAIL, INCONCLUSIVE, PASS, WARN, BudgetCheck, describe_verdict, format_number
from tests.junit_check import read_junit, suites, validate_junit

RUN = {
    "started_at": "2025-01-31T08:15:02.123+00:00",
    "finished_at": "2025-01-31T08:15:09.456+00:00",
    "host": "workstation",
    "device_host": "orin-01",
    "user": "reviewer",
    "command": "deploy --target orin-01 pipelines/pedestrian.yaml",
    "sdk_version": "0.1.0",
    "sdk_commit": None,  # not known: left out of the properties, never written as "None"
    "pipeline_sha256": "ab" * 32,
    "release": "0123456789abcdef",
}


def check(name: str, status: str, measured=10.0, limit=33.3, frames=300, needed=None, **extra) -> dict:
    return BudgetCheck(name, limit, measured, status, frames, needed, "detail", duration_s=12.5, **extra).as_dict()


def report(checks: list[dict]) -> dict:
    return {
        "pipeline": "pedestrian",
        "target": "orin-01",
        "verdict": "PASS",
        "verdict_detail": describe_verdict("PASS", checks),
        "wall_s": 12.5,
        "run": RUN,
        "checks": checks,
    }


CHECKS = [
    check("end_to_end.p50_ms", PASS),
    check("end_to_end.max_ms", FAIL, measured=250.0, limit=200.0),
    check("end_to_end.p99_ms", INCONCLUSIVE, frames=20, needed=299),
    check("environment.power_mode", INCONCLUSIVE, measured=None, limit="MAXN", frames=0, unverified=True),
    check("environment.clocks_locked", WARN, measured=None, limit="true", frames=0, unverified=True),
    check("environment.max_temperature_c", WARN, measured=91.0, limit=85.0, frames=0),
    check("environment.max_load", INCONCLUSIVE, measured=5.5, limit=1.5, frames=0),
]


def test_one_mapping_nothing_unmeasured_is_a_pass():
    kinds = {c["name"]: (outcome(c).kind, outcome(c).type) for c in CHECKS}
    assert kinds == {
        "end_to_end.p50_ms": ("pass", None),
        "end_to_end.max_ms": ("failure", "Fail"),
        "end_to_end.p99_ms": ("failure", "Inconclusive"),
        "environment.power_mode": ("failure", "Unverified"),  # on_unmet: fail, not readable
        "environment.clocks_locked": ("skipped", "Unverified"),  # on_unmet: warn, not readable
        "environment.max_temperature_c": ("skipped", "Unmet"),  # on_unmet: warn, read and unmet
        "environment.max_load": ("failure", "Inconclusive"),  # a busy machine: the latencies do not count
    }
    assert "299 frames needed for a 95% bound" in outcome(CHECKS[2]).message
    assert "could not" not in outcome(CHECKS[6]).message and "frames needed" not in outcome(CHECKS[6]).message
    assert outcome(CHECKS[1]).message == "end_to_end.max_ms: FAIL: measured 250 ms, limit 200 ms, over 300 frame(s) (detail)"


def test_verdict_detail_names_what_is_unverified():
    assert describe_verdict("PASS", CHECKS[:1]) == "PASS"
    assert describe_verdict("PASS", [CHECKS[0], CHECKS[4], CHECKS[4]]) == "PASS, 2 unverified"
    assert describe_verdict("FAIL", CHECKS) == "FAIL, 2 unverified, 1 warning"


def test_numbers_are_written_for_people():
    assert [format_number(v) for v in (1e5, 123456.7, 33.3, 0.25, 1e-6, 2.0, 0, None)] == [
        "100,000",
        "123,457",
        "33.3",
        "0.25",
        "0.000001",
        "2",
        "0",
        "not measured",
    ]
    assert "e+" not in outcome(check("end_to_end.max_ms", FAIL, measured=123456.0, limit=1e5)).message


def test_junit_is_valid_and_carries_the_run(tmp_path):
    path = write_junit(report(CHECKS), tmp_path)
    validate_junit(path)
    (suite,) = suites(path)
    assert suite.timestamp == RUN["started_at"] and suite.hostname == "orin-01"
    assert (suite.tests, suite.failures, suite.skipped, suite.errors) == (7, 4, 2, 0)
    props = {p.name: p.value for p in suite.properties()}
    assert props["verdict_detail"] == "PASS, 2 unverified, 1 warning"
    assert props["run.host"] == "workstation" and props["run.command"] == RUN["command"] and props["run.sdk_version"] == "0.1.0"
    assert "run.sdk_commit" not in props
    cases = read_junit(path)
    assert {name: state for name, (state, _) in cases.items()} == {
        "end_to_end.p50_ms": "passed",
        "end_to_end.max_ms": "failure",
        "end_to_end.p99_ms": "failure",
        "environment.power_mode": "failure",
        "environment.clocks_locked": "skipped",
        "environment.max_temperature_c": "skipped",
        "environment.max_load": "failure",
    }
    case = cases["end_to_end.p50_ms"][1]
    assert case.time == pytest.approx(12.5) and "measured 10 ms; limit 33.3 ms" in case.system_out
    assert cases["end_to_end.p99_ms"][1].result[0].type == "Inconclusive"


def test_a_run_that_judged_nothing_says_so_in_one_case(tmp_path):
    """A pipeline without budgets (what `sdk init` writes): never an empty suite that a CI reads as green."""
    empty = {**report([]), "verdict": "INCONCLUSIVE", "measured_frames": 120}
    path = write_junit(empty, tmp_path)
    validate_junit(path)
    (suite,) = suites(path)
    assert (suite.tests, suite.failures) == (1, 1)
    state, case = read_junit(path)["budgets"]
    assert state == "failure" and case.result[0].type == "Inconclusive"
    assert "no budget is set in the pipeline file (budgets:): nothing was judged" in case.result[0].message
