"""The ready-made acceptance module: one test per budget the pipeline file declares.

    pytest --target orin-01 --pipeline pipelines/pedestrian.yaml tests/acceptance

Without --pipeline these tests skip. A test passes only when its check PASSed: INCONCLUSIVE fails
(a budget the sample cannot back is not met; the failure names the frames it would need), so does
a requirement that could not be verified; one the pipeline only warns about is skipped with why.
"""

from __future__ import annotations


def test_budget(acceptance, budget_check):
    acceptance.judge(budget_check)
