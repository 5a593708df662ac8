"""Platform and TensorRT facts: one list of platform names, versions parsed strictly."""

from __future__ import annotations

import pytest

from sdk.engine.platforms import KNOWN_TENSORRT, PLATFORM_DLA_CORES, TensorRTVersion, dla_availability, known_tensorrt
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


@pytest.mark.parametrize(
    ("platform", "version", "cores", "why"),
    [
        # JetPack 6.0 ships TensorRT 8.6.2 (JetPack 6.0 release notes), with DLA on AGX Orin.
        ("jetson-agx-orin", "8.6.2.3", 2, "JetPack 6.0 ships 8.6.2"),
        ("drive-orin", "8.6.12", 2, "DRIVE OS 6 ships 8.6"),
        ("jetson-agx-orin", "10.3.0.30", 2, "JetPack 6.1 / 6.2 ship 10.3.0"),
        # "TensorRT 10.7 was the last release that supported DLA" (TensorRT 11.3 developer guide, Working with DLA).
        ("jetson-agx-orin", "10.7.0", 2, "10.0-10.7 support DLA"),
        ("jetson-agx-orin", "10.8.0", 0, "10.7 was the last release with DLA"),
        ("jetson-agx-orin", "11.3.0", 0, "11.0-11.3 have no DLA"),
        # TensorRT 11.4.0 release notes / Working with DLA (11.4.0): Windows on ARM only.
        ("jetson-agx-orin", "11.4.0", 0, "only on Windows on ARM"),
        # TensorRT 11.4.1 release notes: "supports DLA on NVIDIA Jetson AGX Orin when using NVIDIA JetPack 7.2.2 or
        # later ... DLA is not supported on Jetson Thor or for NVIDIA DriveOS deployments".
        ("jetson-agx-orin", "11.4.1", 2, "Jetson AGX Orin with JetPack 7.2.2"),
        ("drive-orin", "11.4.1", 0, "not on DRIVE OS"),
        ("jetson-orin-nx", "11.4.1", 0, "Jetson AGX Orin with JetPack 7.2.2 or later only"),
        ("jetson-thor", "11.4.1", 0, "jetson-thor has no DLA core"),
    ],
)
def test_dla_availability_is_decided_at_the_patch_level(platform, version, cores, why):
    availability = dla_availability(platform, TensorRTVersion.parse(version))
    assert availability.cores == cores and why in availability.reason


@pytest.mark.parametrize(("typed", "exact"), [("10.3", "10.3.0"), ("8.6.2", "8.6.2"), ("10.3.0.30-1+cuda12.5", "10.3.0.30"), ("11.4.1", "11.4.1")])
def test_known_releases_resolve_to_their_patch_level(typed, exact):
    assert str(known_tensorrt(typed)) == exact


def test_jetpack_6_0_is_tensorrt_8_6_2_and_jetpack_6_1_is_10_3_0():
    assert KNOWN_TENSORRT[(8, 6, 2)] == "JetPack 6.0" and "JetPack 6.1" in KNOWN_TENSORRT[(10, 3, 0)]


def test_drive_os_6_0_7_and_6_0_8_and_tensorrt_10_16_1_are_known_releases():
    """TensorRT release notes for DRIVE OS 6.0.7 (8.6.10) and 6.0.8.1 (8.6.11), and TensorRT 10.16.1."""
    from sdk.engine.platforms import known_tensorrt

    assert [str(known_tensorrt(v)) for v in ("8.6.10", "8.6.11", "10.16.1")] == ["8.6.10", "8.6.11", "10.16.1"]
    with pytest.raises(ConfigError, match="10.16.0 \\(TensorRT 10.16.0\\), 10.16.1"):
        known_tensorrt("10.16")
