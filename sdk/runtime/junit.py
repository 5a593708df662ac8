"""junit.xml beside report.json: one test case per check, so CI systems show the verdict.

The one mapping from check statuses to JUnit, used by deploy, `sdk validate` and the pytest plugin
(`outcome`): nothing unmeasured, inconclusive or unverified is ever a plain pass.

    PASS                                     -> a passing case
    FAIL                                     -> <failure type="Fail">
    INCONCLUSIVE                             -> <failure type="Inconclusive">, naming the frames it needs
    INCONCLUSIVE, a requirement not readable -> <failure type="Unverified"> (environment, on_unmet: fail)
    WARN (environment, on_unmet: warn)       -> <skipped>, with the reason: unverified, or read and unmet

The suite carries the run's `timestamp`, `hostname` and `<properties>` (report.json's `run` section,
the verdict and its detail); each case its duration (`time`) and, in <system-out>, what it measured.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from sdk.runtime.verdict import FAIL, INCONCLUSIVE, PASS, SHORT_UNITS, WARN, check_unit, counted, format_number
from sdk.sinks.files import partial_path, publish

JUNIT_FILE = "junit.xml"


@dataclass(frozen=True)
class Outcome:
    kind: str  # "pass", "failure" or "skipped"
    type: str | None  # the failure's type: Fail, Inconclusive, Unverified; or Unverified/Unmet for a skip
    message: str


def _with_unit(value, unit: str) -> str:
    text = format_number(value)
    return f"{text} {unit}" if unit in SHORT_UNITS and isinstance(value, (int, float)) else text


def measurement(check: dict) -> str:
    """What a check measured, for people: measured 41.2 ms, limit 50 ms, over 300 frame(s) (its detail)."""
    unit = check_unit(check["name"])
    text = f"measured {_with_unit(check['measured'], unit)}, limit {_with_unit(check['limit'], unit)}"
    if not check["name"].startswith("environment."):
        text += f", over {check['frames']} {counted(check['name'])}(s)"
    if check.get("detail"):
        text += f" ({check['detail']})"
    return text


def outcome(check: dict) -> Outcome:
    """How one check of report.json shows in JUnit (and in the pytest plugin's tests)."""
    name, status = check["name"], check["status"]
    what = measurement(check)
    if status == PASS:
        return Outcome("pass", None, f"{name}: PASS: {what}")
    if status == FAIL:
        return Outcome("failure", "Fail", f"{name}: FAIL: {what}")
    if status == INCONCLUSIVE and check.get("unverified"):
        return Outcome("failure", "Unverified", f"{name}: UNVERIFIED: {what}; the pipeline requires it (on_unmet: fail)")
    if status == INCONCLUSIVE:
        if name.startswith("environment."):
            needed = "the measurement does not count"
        elif check.get("frames_needed"):
            needed = f"{format_number(check['frames_needed'])} {counted(name)}s needed for a 95% bound"
        else:
            needed = f"more {counted(name)}s needed for a 95% bound"
        return Outcome("failure", "Inconclusive", f"{name}: INCONCLUSIVE: {what}; {needed}")
    if status == WARN:
        kind = "Unverified" if check.get("unverified") else "Unmet"
        return Outcome("skipped", kind, f"{name}: {kind.lower()}, only warned about (on_unmet: warn): {what}")
    return Outcome("failure", "Unknown", f"{name}: status {status!r} is not one this SDK knows: {what}")


def properties(report: dict) -> dict[str, str]:
    """The suite's properties: the verdict, its detail and every known value of report.json's `run`."""
    values = {"verdict": report["verdict"], "verdict_detail": report.get("verdict_detail") or report["verdict"]}
    for key, value in (report.get("run") or {}).items():
        if value is not None:
            values[f"run.{key}"] = str(value)
    return values


def _seconds(value) -> str:
    return f"{float(value or 0):.3f}"  # Surefire's time: plain decimal, at most 3 places


def suite_time(report: dict) -> float:
    total = float(report.get("wall_s") or 0)
    total += float((report.get("accuracy") or {}).get("duration_s") or 0)
    total += sum(float(run.get("wall_s") or 0) for run in report.get("determinism_runs") or [])
    return total


NO_BUDGET = "no budget is set in the pipeline file (budgets:): nothing was judged, the verdict is INCONCLUSIVE"


def junit_tree(report: dict) -> ET.ElementTree:
    checks = report["checks"]
    outcomes = [outcome(c) for c in checks]
    if not checks:  # a run that judged nothing says so: one case, never an empty suite that reads as green
        checks = [{"name": "budgets", "status": INCONCLUSIVE, "measured": None, "limit": None, "frames": report.get("measured_frames", 0)}]
        outcomes = [Outcome("failure", "Inconclusive", NO_BUDGET)]
    run = report.get("run") or {}
    failures = str(sum(o.kind == "failure" for o in outcomes))
    root = ET.Element("testsuites", name=f"acceptance: {report['pipeline']} on {report['target']}", tests=str(len(checks)), failures=failures)
    root.set("errors", "0")
    root.set("time", _seconds(suite_time(report)))
    suite = ET.SubElement(
        root,
        "testsuite",
        name=f"budgets: {report['pipeline']} on {report['target']}",
        tests=str(len(checks)),
        failures=failures,
        errors="0",
        skipped=str(sum(o.kind == "skipped" for o in outcomes)),
        time=_seconds(suite_time(report)),
    )
    if run.get("started_at"):
        suite.set("timestamp", run["started_at"])
    hostname = run.get("device_host") or run.get("host")
    if hostname:
        suite.set("hostname", hostname)
    props = ET.SubElement(suite, "properties")
    for key, value in properties(report).items():
        ET.SubElement(props, "property", name=key, value=value)
    for check, result in zip(checks, outcomes, strict=True):
        duration = check.get("duration_s")
        case = ET.SubElement(
            suite, "testcase", classname=f"{report['pipeline']}.{report['target']}", name=check["name"], time=_seconds(duration if duration else 0)
        )
        if result.kind == "failure":
            ET.SubElement(case, "failure", message=result.message, type=result.type).text = result.message
        elif result.kind == "skipped":
            ET.SubElement(case, "skipped", message=result.message, type=result.type).text = result.message
        unit = check_unit(check["name"])
        bound = f"; 95% bound {_with_unit(check['bound'], unit)}" if check.get("bound") is not None else ""
        in_unit = f" (in {unit})" if unit and unit not in SHORT_UNITS else ""
        ET.SubElement(case, "system-out").text = (
            f"status {check['status']}{' (unverified)' if check.get('unverified') else ''}; measured {_with_unit(check['measured'], unit)}; "
            f"limit {_with_unit(check['limit'], unit)}{in_unit}{bound}; frames {check['frames']}; duration {_seconds(duration)} s"
        )
    return ET.ElementTree(root)


def write_junit(report: dict, folder: Path) -> Path:
    final = Path(folder) / JUNIT_FILE
    partial = partial_path(final)
    tree = junit_tree(report)
    ET.indent(tree)
    tree.write(partial, encoding="utf-8", xml_declaration=True)
    publish(partial, final)
    return final
