"""The regression gate, ready to use: `pytest --target T --pipeline P --baseline last-committed --max-regression 5% tests/acceptance`.

This run against the baseline release's runs on the same device class (the history): the test fails only on a
statistically detectable regression beyond the tolerance, and names each figure with its interval; without
--baseline it is skipped, and so it is when the history holds no earlier release to compare with.
"""

import pytest


def test_no_regression_beyond_the_tolerance(regression):
    if regression.skipped:
        pytest.skip(regression.skipped)
    assert not regression.regressions, regression.message()
