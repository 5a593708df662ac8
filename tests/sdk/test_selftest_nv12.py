"""The selftest's `nv12_camera_layout` check: the decision in plain Python (what the SDK's NV12 reader and kernel assume
against what GStreamer describes), and its N/A where the release has no NV12 camera. The GStreamer read runs on a
device with a camera (`sdk selftest`)."""

from __future__ import annotations

import pytest

from sdk.pixels import BT601_LIMITED, YuvColour
from sdk.selftest_nv12 import layout_problems, nv12_camera_layout, nv12_camera_pipeline


def test_a_tight_bt601_frame_is_what_the_reader_assumes():
    assert layout_problems(1920, 1080, (1920, 1920), (0, 1920 * 1080), BT601_LIMITED, BT601_LIMITED) == []


def test_padded_rows_a_gap_between_the_planes_or_another_colour_are_each_named():
    """Pitch-linear NVMM surfaces pad rows (to 256 bytes here) and may align the chroma plane's offset."""
    problems = layout_problems(1920, 1080, (2048, 2048), (0, 2048 * 1088), YuvColour("bt709", "limited"), BT601_LIMITED)
    assert problems == [
        "row strides 2048 (Y) and 2048 (UV) bytes, the reader assumes 1920 (tight rows)",
        "plane offsets 0 and 2228224, the reader assumes 0 and 2073600 (UV right after Y)",
        "the caps say bt709 limited range, the pipeline converts as bt601 limited range",
    ]
    assert layout_problems(1280, 720, (1280, 1280), (0, 1280 * 720), None, BT601_LIMITED) == ["the caps name no colorimetry the kernel converts"]


def test_the_argus_nv12_pipeline_of_a_csi_camera_is_what_is_checked(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from sdk import release as release_module

    spec = SimpleNamespace(cameras={"front": SimpleNamespace(uri="csi://0?format=nv12&width=1280&height=720")})
    monkeypatch.setattr(release_module, "load_release", lambda folder: (None, SimpleNamespace(spec=spec), None))
    pipeline, what = nv12_camera_pipeline(tmp_path)
    assert "nvarguscamerasrc sensor-id=0" in pipeline and "format=NV12,colorimetry=bt601" in pipeline and what.startswith("camera front")
    spec.cameras["front"] = SimpleNamespace(uri="csi://0")  # BGR from the camera: nothing of NV12 to check
    assert nv12_camera_pipeline(tmp_path) is None


def test_a_release_without_an_nv12_camera_is_not_applicable(example_pipeline, tmp_path, monkeypatch):
    """The example replays a file: there is no camera whose NV12 could be checked."""
    from sdk import release as release_module

    monkeypatch.setattr(release_module, "load_release", lambda folder: (None, example_pipeline, None))
    status, detail = nv12_camera_layout(tmp_path)
    assert status == "N/A" and "no NV12 from a camera" in detail


@pytest.mark.parametrize("colorimetry", ["bt601", "2:4:5:4"])
def test_gstreamers_names_for_bt601_limited_are_what_the_kernel_converts(colorimetry):
    from sdk.sources.gst_caps import colour_from_colorimetry

    assert colour_from_colorimetry(colorimetry, 1080, "caps") == BT601_LIMITED
