"""What each platform and TensorRT version offers for DLA, as data.

Sources (checked 2026-11):
- DLA cores per module: Jetson AGX Orin 2 (NVIDIA Jetson AGX Orin technical brief); Jetson Orin NX
  16GB 2, Orin NX 8GB 1 (Jetson Orin NX series data sheet: the platform name covers both, so the
  probe's `dla_cores` decides on a real device); Jetson Orin Nano 0 (its NVDLA blocks are fused
  off); Jetson Thor 0; DRIVE Orin 2 (NVIDIA Deep-Learning-Accelerator-SW FAQ: "All Jetson AGX Orin &
  Orin NX boards ... DRIVE Orin have DLA cores").
- TensorRT and DLA, per release (keys at the patch level, since 11.4.0 and 11.4.1 differ):
  TensorRT developer guide, "Working with DLA" of 11.3 ("DLA is not supported in TensorRT 11.3.0 or in
  TensorRT 11.3.1 for DriveOS. TensorRT 10.7 was the last release that supported DLA. DLA was also not
  supported in TensorRT 11.0, 11.1, or 11.2"), of 11.4.0 (DLA only on Windows on ARM, beta; "Not
  supported: Linux SBSA, NVIDIA JetPack, and NVIDIA DriveOS") and of 11.4.1 ("Supported: NVIDIA Jetson
  AGX Orin when using NVIDIA JetPack 7.2.2 or later"; not Thor, not DriveOS; JetPack 6.x stays on 10.x);
  TensorRT 11.4.1 release notes (the same). Which TensorRT ships where: JetPack 6.0 has TensorRT 8.6.2,
  JetPack 6.1 and 6.2 have 10.3.0 (JetPack release notes); DRIVE OS 6.0.x has 8.6 (8.6.12 in 6.0.9.1).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sdk.errors import ConfigError

# Platform names are those of target files (tools/targets/spec.py; a test keeps the two equal).
PLATFORM_DLA_CORES = {
    "jetson-agx-orin": 2,
    "jetson-orin-nx": 2,  # the 16GB module; the 8GB module has 1 (the probe says which)
    "jetson-orin-nano": 0,
    "jetson-thor": 0,
    "drive-orin": 2,
    "linux-generic": 0,
}

# (first release, last release, platforms with DLA (None: every platform with DLA cores), why), keyed by
# (major, minor, patch); the first matching row wins.
DLA_BY_TENSORRT = (
    ((8, 6, 0), (8, 6, 99), None, "TensorRT 8.6 supports DLA (JetPack 6.0 ships 8.6.2, DRIVE OS 6 ships 8.6)"),
    ((10, 0, 0), (10, 7, 99), None, "TensorRT 10.0-10.7 support DLA (JetPack 6.1 / 6.2 ship 10.3.0)"),
    ((10, 8, 0), (10, 99, 99), (), "TensorRT 10.7 was the last release with DLA support in 10.x (TensorRT 11.3 developer guide)"),
    ((11, 0, 0), (11, 3, 99), (), "TensorRT 11.0-11.3 have no DLA support"),
    ((11, 4, 0), (11, 4, 0), (), "TensorRT 11.4.0 supports DLA only on Windows on ARM (beta), not on JetPack or DRIVE OS"),
    (
        (11, 4, 1),
        (11, 4, 99),
        ("jetson-agx-orin",),
        "TensorRT 11.4.1 supports DLA on Jetson AGX Orin with JetPack 7.2.2 or later only (not on DRIVE OS, not on other modules)",
    ),
)

# A Debian revision may follow (the probe falls back to dpkg's libnvinfer version: 10.3.0.30-1+cuda12.5).
VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:-\d[A-Za-z0-9.+~]*|\+[A-Za-z0-9.+~]+)?$")


@dataclass(frozen=True, order=True)
class TensorRTVersion:
    major: int
    minor: int
    patch: int = 0
    build: int = 0

    @classmethod
    def parse(cls, text: str) -> TensorRTVersion:
        match = VERSION.match(str(text).strip())
        if not match:
            raise ConfigError(f"TensorRT version {text!r} is not like 10.3, 8.6.1 or 10.3.0.26", hint="give major.minor[.patch[.build]]")
        return cls(*(int(part) if part else 0 for part in match.groups()))

    @property
    def series(self) -> str:
        """The rule table a version reads: `8.6`, `10` or `11`."""
        if (self.major, self.minor) == (8, 6):
            return "8.6"
        if self.major in (10, 11):
            return str(self.major)
        raise ConfigError(f"TensorRT {self} is not supported", hint="supported: TensorRT 8.6 (DRIVE OS 6), 10.x (JetPack 6), 11.x")

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}" + (f".{self.build}" if self.build else "")


# The TensorRT releases the SDK knows, to the patch level, and where each one ships. A calibration cache
# names the exact release in its header (NV_TENSORRT_VERSION: 8.6.2 -> 8602, 10.3.0 -> 100300) and an
# engine loads only on the release that built it, so a version typed by hand must name one of these.
# Sources: include/NvInferVersion.h at the release tags of github.com/NVIDIA/TensorRT (8.6.1, 10.0.0-10.16,
# 11.0, 11.1); the TensorRT release notes (11.2.1, 11.3.0, 11.4.0, 11.4.1); JetPack 6.0 release notes
# (TensorRT 8.6.2) and JetPack 6.1 / 6.2 (TensorRT 10.3.0); the TensorRT release notes for DRIVE OS: 8.6.10 (DRIVE OS
# 6.0.7), 8.6.11 (6.0.8.1), 8.6.12 (6.0.9.1), 10.10.10 (7.0.3); TensorRT 10.16.1 (docs.nvidia.com/deeplearning/tensorrt/10.16.1).
KNOWN_TENSORRT = {
    (8, 6, 1): "TensorRT 8.6.1 GA (x86-64, SBSA)",
    (8, 6, 2): "JetPack 6.0",
    (8, 6, 10): "DRIVE OS 6.0.7",
    (8, 6, 11): "DRIVE OS 6.0.8.1",
    (8, 6, 12): "DRIVE OS 6.0.9.1",
    **{(10, minor, 0): f"TensorRT 10.{minor}.0" for minor in range(0, 14)},
    (10, 0, 1): "TensorRT 10.0.1 GA",
    (10, 3, 0): "JetPack 6.1 / 6.2",
    (10, 10, 10): "DRIVE OS 7.0.3",
    (10, 13, 2): "TensorRT 10.13.2",
    (10, 13, 3): "TensorRT 10.13.3",
    (10, 14, 1): "TensorRT 10.14.1",
    (10, 15, 1): "TensorRT 10.15.1",
    (10, 16, 0): "TensorRT 10.16.0",
    (10, 16, 1): "TensorRT 10.16.1",
    (11, 0, 0): "TensorRT 11.0.0",
    (11, 1, 0): "TensorRT 11.1.0",
    (11, 2, 1): "TensorRT 11.2.1",
    (11, 3, 0): "TensorRT 11.3.0",
    (11, 4, 0): "TensorRT 11.4.0",
    (11, 4, 1): "TensorRT 11.4.1 (JetPack 7.2.2 and later)",
}


def _known_list() -> str:
    return ", ".join(".".join(map(str, key)) for key in sorted(KNOWN_TENSORRT))


def known_tensorrt(text: str) -> TensorRTVersion:
    """A TensorRT release the SDK knows, to the patch level. `10.3` is 10.3.0 (the only 10.3 release);
    `8.6` is refused, since 8.6.1, 8.6.2 (JetPack 6.0) and 8.6.12 (DRIVE OS 6) write different headers."""
    try:
        version = TensorRTVersion.parse(text)
    except ConfigError as error:
        raise ConfigError(error.message, hint=f"give a known release: {_known_list()}") from None
    given_patch = len(re.split(r"[-+]", str(text).strip())[0].split(".")) > 2
    if given_patch:
        if (version.major, version.minor, version.patch) in KNOWN_TENSORRT:
            return version
        raise ConfigError(f"TensorRT {text} is not a release the SDK knows", hint=f"known: {_known_list()}")
    releases = sorted(key for key in KNOWN_TENSORRT if key[:2] == (version.major, version.minor))
    if len(releases) == 1:
        return TensorRTVersion(*releases[0])
    if not releases:
        raise ConfigError(f"TensorRT {text} is not a release the SDK knows", hint=f"known: {_known_list()}")
    named = ", ".join(f"{'.'.join(map(str, key))} ({KNOWN_TENSORRT[key]})" for key in releases)
    raise ConfigError(f"TensorRT {text} names several releases: give the patch level, one of {named}", hint=f"known: {_known_list()}")


@dataclass(frozen=True)
class DlaAvailability:
    cores: int
    reason: str  # why there is no DLA, or which facts allow it

    @property
    def available(self) -> bool:
        return self.cores > 0


def dla_availability(platform: str, tensorrt: TensorRTVersion, probed_cores: int | None = None) -> DlaAvailability:
    """How many DLA cores a build for (platform, TensorRT) can use, and why. The probe's count (the device's nodes or
    its module) narrows the platform's, never widens it: a platform without DLA (Orin Nano, Thor) has none whatever
    a probe reports, and an Orin NX 8GB probed with 1 core has 1."""
    if platform not in PLATFORM_DLA_CORES:
        raise ConfigError(f"unknown platform {platform!r}", hint=f"known platforms: {', '.join(PLATFORM_DLA_CORES)}")
    table = PLATFORM_DLA_CORES[platform]
    cores = table if probed_cores is None else min(table, probed_cores)
    if cores == 0:
        return DlaAvailability(0, f"{platform} has no DLA core")
    key = (tensorrt.major, tensorrt.minor, tensorrt.patch)
    for first, last, platforms, why in DLA_BY_TENSORRT:
        if first <= key <= last:
            supported = platforms is None or platform in platforms
            return DlaAvailability(cores if supported else 0, f"{platform}: {cores} DLA cores; {why}" if supported else why)
    return DlaAvailability(0, f"TensorRT {tensorrt} has no known DLA support")
