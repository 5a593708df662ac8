"""The header of a serialized TensorRT plan: is it a plan, and which TensorRT built it.

A plan starts with the uint32 magic 0x74727466 (the bytes `ftrt`, little-endian) and holds the
builder's TensorRT version as four bytes, major.minor.patch.build, at offsets 24..27. A plan only
deserializes on exactly that TensorRT ("Version tag does not match", TensorRT#2176, #2195), so the
host reads the header before uploading an engine and refuses a mismatch with both versions named.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from sdk.engine.platforms import TensorRTVersion
from sdk.errors import EngineBuildError

PLAN_MAGIC = 0x74727466
HEADER_BYTES = 28
VERSION_OFFSET = 24


@dataclass(frozen=True)
class PlanHeader:
    tensorrt: TensorRTVersion

    def matches(self, target: TensorRTVersion) -> bool:
        """Same major.minor.patch; the build number too when the target's is known."""
        same = (self.tensorrt.major, self.tensorrt.minor, self.tensorrt.patch) == (target.major, target.minor, target.patch)
        return same and (target.build == 0 or self.tensorrt.build == target.build)


def parse_plan_header(data: bytes, where: str) -> PlanHeader:
    if len(data) < HEADER_BYTES:
        raise EngineBuildError(f"{where}: {len(data)} bytes is too short for a TensorRT plan (header is {HEADER_BYTES})")
    (magic,) = struct.unpack_from("<I", data, 0)
    if magic != PLAN_MAGIC:
        raise EngineBuildError(
            f"{where}: not a TensorRT plan (magic 0x{magic:08x}, expected 0x{PLAN_MAGIC:08x} 'ftrt')",
            hint="give the serialized engine the builder wrote (trtexec --saveEngine, build_serialized_network)",
        )
    major, minor, patch, build = data[VERSION_OFFSET : VERSION_OFFSET + 4]
    return PlanHeader(TensorRTVersion(major, minor, patch, build))


def read_plan_header(path: Path) -> PlanHeader:
    with open(path, "rb") as handle:
        return parse_plan_header(handle.read(HEADER_BYTES), str(path))


def check_plan_for_target(path: Path, target: TensorRTVersion, target_name: str) -> PlanHeader:
    """Refuse an engine the target's TensorRT cannot load, naming both versions."""
    header = read_plan_header(path)
    if not header.matches(target):
        raise EngineBuildError(
            f"{path}: built by TensorRT {header.tensorrt}, but target {target_name} runs TensorRT {target}: the engine would not load",
            hint="rebuild the engine on the target (or an identical twin) with its own TensorRT",
        )
    return header
