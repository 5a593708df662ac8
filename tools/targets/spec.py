"""Target files: `targets/NAME.yaml`, validated like pipeline files, frozen."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, model_validator

from sdk.spec.bounds import Frozen, Int, Real

PLATFORMS = ("jetson-agx-orin", "jetson-orin-nx", "jetson-orin-nano", "jetson-thor", "drive-orin", "linux-generic")

# Allow-lists, not escaping: these values reach remote command lines (always quoted as well).
HOST = r"^[A-Za-z0-9][A-Za-z0-9.:-]{0,252}$"
USER = r"^[a-z_][a-z0-9_.-]{0,31}$"
REMOTE_PATH = r"^/[A-Za-z0-9._/+-]{0,250}$"
PYTHON = r"^[A-Za-z0-9._/+-]{1,200}$"
FINGERPRINT = r"^SHA256:[A-Za-z0-9+/]{43}$"
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"  # the name of an environment variable, never its value


class HostKey(Frozen):
    """The pinned host key: a known_hosts file (relative to the target file) or an OpenSSH SHA256 fingerprint."""

    known_hosts: str | None = None
    fingerprint: Annotated[str, Field(pattern=FINGERPRINT)] | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> HostKey:
        if (self.known_hosts is None) == (self.fingerprint is None):
            raise ValueError("give exactly one of known_hosts or fingerprint")
        return self


class Timeouts(Frozen):
    connect_s: Real("seconds to open the SSH connection", gt=0, le=300) = 10.0
    command_s: Real("seconds one remote command may take, or stay silent", gt=0, le=86400) = 300.0
    deadline_s: Real("seconds all of one connection's work may take", gt=0, le=86400) = 3600.0
    keepalive_s: Real("seconds between SSH keepalives", gt=0, le=300) = 5.0


# sdk.probe.RUNTIME_MODULES, PIPELINE_MODULES
RUNTIME_MODULE = Literal["numpy", "cv2", "yaml", "pydantic", "onnxruntime", "scipy", "mcap", "mcap_ros2", "rosbags", "foxglove"]


class MenderSettings(Frozen):
    """`sdk export --mender`: what the artifact assumes of the device, which no probe tells it (tools/deploy/export.py)."""

    device_type: Annotated[
        str | None, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,127}$", description="the Mender device type (default: `platform`)")
    ] = None
    python_abi: Annotated[
        str | None,
        Field(pattern=r"^cp3[0-9]{1,2}$", description="the device Python's ABI tag for its wheels (default: cp310 on JetPack 6, cp312 on Thor)"),
    ] = None
    missing_modules: Annotated[
        list[RUNTIME_MODULE] | None,
        Field(
            description="runtime modules the device lacks, shipped as wheels (default: all but numpy and cv2 on Jetson/DRIVE, all elsewhere; "
            "scipy only with a pipeline that tracks; mcap, mcap_ros2, rosbags, foxglove only with one that reads or writes recordings)"
        ),
    ] = None


class LabgridSettings(Frozen):
    """The target is a labgrid place: acquired per session, reached through its NetworkService (tools/connect/labgrid_place.py)."""

    coordinator: Annotated[
        str | None,
        Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9.:-]{0,252}:[0-9]{1,5}$", description="HOST:PORT (default: $LG_COORDINATOR, else labgrid's 20408)"),
    ] = None
    place: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$", description="the labgrid place's name")]


class TargetSpec(Frozen):
    host: Annotated[str | None, Field(pattern=HOST, description="required unless `labgrid` names a place (its NetworkService gives it)")] = None
    port: Int(1, 65535, "SSH port") = 22
    user: Annotated[str | None, Field(pattern=USER, description="required unless `labgrid` names a place")] = None
    key_file: str
    # A passphrase-protected key_file: the variable holding its passphrase (else it is asked on a terminal).
    key_passphrase_env: Annotated[str, Field(pattern=ENV_NAME)] | None = None
    host_key: HostKey
    platform: Literal["jetson-agx-orin", "jetson-orin-nx", "jetson-orin-nano", "jetson-thor", "drive-orin", "linux-generic"]
    remote_root: Annotated[str, Field(pattern=REMOTE_PATH)]
    python: Annotated[str, Field(pattern=PYTHON)] = "python3"
    jump: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")] | None = None
    timeouts: Timeouts = Timeouts()
    health_frames: Int(1, 10000, "frames of the trial run that checks a new release before it is committed") = 5
    sign_key: Annotated[
        str | None,
        Field(description="Ed25519 private key (PEM or OpenSSH, relative to the target file) that signs the release manifests for this target"),
    ] = None
    mender: Annotated[MenderSettings, Field(description="`sdk export --mender`: what the artifact assumes of the device")] = MenderSettings()
    labgrid: Annotated[LabgridSettings | None, Field(description="a labgrid place: host, port and user come from its NetworkService")] = None

    @model_validator(mode="after")
    def _address(self) -> TargetSpec:
        if self.labgrid is None and (self.host is None or self.user is None):
            raise ValueError("host and user are required (or `labgrid: {place: NAME}` for a labgrid place)")
        if self.labgrid is not None and self.jump is not None:
            raise ValueError("a labgrid place is reached through its NetworkService; `jump` does not apply")
        return self

    @model_validator(mode="after")
    def _no_parent_segments(self) -> TargetSpec:
        if ".." in Path(self.remote_root).parts:
            raise ValueError(f"remote_root {self.remote_root!r} must not contain '..'")
        return self
