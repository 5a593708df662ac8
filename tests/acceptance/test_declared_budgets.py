"""The ready-made acceptance module: one test per budget the pipeline file declares.

    pytest --target orin-01 --pipeline pipelines/pedestrian.yaml tests/acceptance

Without --pipeline these tests skip. INCONCLUSIVE is not accepted: a budget that the sample
cannot back is not met; the failure names the frames it would need.
"""

from __future__ import annotations

from tools.pytest_plugin import ACCEPTED


def test_budget(acceptance, budget_check):
    check = acceptance.check(budget_check)
    needed = f"; {check['frames_needed']} frames needed" if check["status"] == "INCONCLUSIVE" and check["frames_needed"] else ""
    assert check["status"] in ACCEPTED, (
        f"{budget_check} {check['status']}: measured {check['measured']}, limit {check['limit']}, "
        f"over {check['frames']} frames ({check['detail']}){needed}; report in {acceptance.report_dir}"
    )
