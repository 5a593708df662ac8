"""Plan headers: crafted plans are parsed, and an engine for another TensorRT is refused naming both versions."""

from __future__ import annotations

import struct

import pytest

from sdk.engine.plan_header import check_plan_for_target, parse_plan_header
from sdk.engine.platforms import TensorRTVersion
from sdk.errors import EngineBuildError


def crafted_plan(version: tuple[int, int, int, int], magic: int = 0x74727466, size: int = 64) -> bytes:
    data = bytearray(size)
    struct.pack_into("<I", data, 0, magic)
    data[24:28] = bytes(version)
    data[8:24] = bytes(range(16))  # whatever TensorRT keeps there must not matter
    return bytes(data)


def test_magic_is_ftrt_in_the_file():
    assert crafted_plan((10, 3, 0, 26))[:4] == b"ftrt"


@pytest.mark.parametrize("version", [(8, 6, 1, 6), (10, 3, 0, 26), (11, 4, 0, 106)])
def test_the_builder_version_is_read_from_bytes_24_to_27(version):
    header = parse_plan_header(crafted_plan(version), "engine.plan")
    assert (header.tensorrt.major, header.tensorrt.minor, header.tensorrt.patch, header.tensorrt.build) == version


@pytest.mark.parametrize(
    ("data", "message"),
    [(b"ftrt" + bytes(10), "too short"), (crafted_plan((10, 3, 0, 26), magic=0x464C457F), "not a TensorRT plan (magic 0x464c457f")],
)
def test_what_is_not_a_plan_is_refused(data, message):
    with pytest.raises(EngineBuildError, match=message.replace("(", r"\(")):
        parse_plan_header(data, "engine.plan")


@pytest.mark.parametrize(
    ("built", "target", "loads"),
    [
        ((10, 3, 0, 26), "10.3.0", True),
        ((10, 3, 0, 26), "10.3.0.26", True),
        ((10, 3, 0, 26), "10.3.0.30", False),
        ((10, 3, 0, 26), "10.4", False),
        ((8, 6, 1, 6), "10.3", False),
    ],
)
def test_a_mismatch_names_both_versions(tmp_path, built, target, loads):
    path = tmp_path / "model.engine"
    path.write_bytes(crafted_plan(built))
    version = TensorRTVersion.parse(target)
    if loads:
        assert check_plan_for_target(path, version, "orin-01").tensorrt.build == built[3]
        return
    with pytest.raises(EngineBuildError) as info:
        check_plan_for_target(path, version, "orin-01")
    assert f"built by TensorRT {'.'.join(map(str, built))}" in info.value.message
    assert f"target orin-01 runs TensorRT {version}" in info.value.message
