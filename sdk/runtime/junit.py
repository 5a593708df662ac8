"""junit.xml beside report.json: one test case per budget check, so CI systems show the verdict."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from sdk.sinks.files import partial_path, publish

JUNIT_FILE = "junit.xml"


def write_junit(report: dict, folder: Path) -> Path:
    """FAIL -> <failure>, INCONCLUSIVE -> <skipped> with the frames it would need, PASS -> a plain case."""
    checks = report["checks"]
    suite = ET.Element(
        "testsuite",
        name=f"latency budgets: {report['pipeline']} on {report['target']}",
        tests=str(len(checks)),
        failures=str(sum(c["status"] == "FAIL" for c in checks)),
        skipped=str(sum(c["status"] == "INCONCLUSIVE" for c in checks)),
        errors="0",
        time=str(report.get("wall_s", 0)),
    )
    for check in checks:
        case = ET.SubElement(suite, "testcase", classname=f"{report['pipeline']}.{report['target']}", name=check["name"], time="0")
        detail = f"measured {_value(check['measured'])}, limit {_value(check['limit'])}, over {check['frames']} frame(s)"
        if check.get("detail"):
            detail += f" ({check['detail']})"
        if check["status"] == "FAIL":
            ET.SubElement(case, "failure", message=f"{check['name']}: {detail}", type="Budget").text = detail
        elif check["status"] == "INCONCLUSIVE":
            needed = f"{check['frames_needed']} frames needed" if check["frames_needed"] else "more frames needed"
            ET.SubElement(case, "skipped", message=f"{check['name']}: {detail}; {needed} for a 95% bound")
        elif check["status"] == "WARN":
            ET.SubElement(case, "system-out").text = f"warning: {check['name']}: {detail}"
    final = Path(folder) / JUNIT_FILE
    partial = partial_path(final)
    ET.ElementTree(suite).write(partial, encoding="utf-8", xml_declaration=True)
    publish(partial, final)
    return final


def _value(value) -> str:
    if value is None:
        return "not measured"
    return f"{value:g}" if isinstance(value, (int, float)) else str(value)
