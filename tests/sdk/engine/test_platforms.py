"""Platform and TensorRT facts: one list of platform names, versions parsed strictly."""

from __future__ import annotations

import pytest

from sdk.engine.platforms import PLATFORM_DLA_CORES, TensorRTVersion
from sdk.errors import ConfigError
from tools.targets.spec import PLATFORMS


def test_every_target_platform_has_dla_facts():
    assert set(PLATFORM_DLA_CORES) == set(PLATFORMS)


@pytest.mark.parametrize(
    ("text", "parts", "series"),
    [
        ("8.6.1", (8, 6, 1, 0), "8.6"),
        ("10.3", (10, 3, 0, 0), "10"),
        ("11.4.0.106", (11, 4, 0, 106), "11"),
        ("10.3.0.30-1+cuda12.5", (10, 3, 0, 30), "10"),
    ],
)
def test_versions_parse_into_their_rule_series(text, parts, series):
    version = TensorRTVersion.parse(text)
    assert (version.major, version.minor, version.patch, version.build) == parts and version.series == series


@pytest.mark.parametrize("text", ["10", "ten.3", "10.3-rc", "9.2", "8.5.3", "7.1"])
def test_unknown_or_malformed_versions_are_refused(text):
    with pytest.raises(ConfigError):
        _ = TensorRTVersion.parse(text).series
