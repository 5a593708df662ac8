"""Selftest check `nv12_camera_layout`: what the release's NV12 camera really delivers on this device.

Two things no host can settle (decision 0418):
- **The colour.** The Argus pipeline pins `colorimetry=bt601` in the caps after nvvidconv (sdk/sources/opencv_capture.py),
  and the kernel converts BT.601 limited range. Whether nvvidconv negotiates that (or refuses, or converts) is read
  here from the caps the appsink really got: GStreamer's "bt601" is limited range, BT.601 matrix
  (gst_video_colorimetry_from_string; `2:4:...` as range:matrix:transfer:primaries).
- **The layout.** `Nv12Image.from_opencv` reads OpenCV's NV12 Mat as (H x 3/2) x W: Y rows of W bytes, the UV rows
  right after them. That holds only where the buffer is tight: plane 0 stride = W, plane 1 stride = W and offset = W x H.
  NVMM surfaces are pitch-linear with padded rows; after nvvidconv to system memory GStreamer describes the real
  strides and offsets in the buffer's GstVideoMeta (or the caps' defaults, GstVideoInfo, where there is none). This
  check reads them from one frame; a padded layout fails it with the numbers, since the SDK's reader would read
  skewed rows.
The decision is `layout_problems` (plain Python, tested); the GStreamer part (PyGObject: `gi`, JetPack's python3-gi) is
a thin read of one sample. N/A without an NV12 camera source; SKIP without GStreamer's Python bindings.
"""

from __future__ import annotations

from pathlib import Path

from sdk.pixels import YuvColour

PASS, FAIL, SKIP, NOT_APPLICABLE = "PASS", "FAIL", "SKIP", "N/A"


def layout_problems(
    width: int, height: int, strides: tuple[int, int], offsets: tuple[int, int], colour: YuvColour | None, expected: YuvColour
) -> list[str]:
    """What differs between the NV12 a camera delivers and what the SDK's reader and kernel assume (empty: nothing)."""
    problems = []
    if strides[0] != width or strides[1] != width:
        problems.append(f"row strides {strides[0]} (Y) and {strides[1]} (UV) bytes, the reader assumes {width} (tight rows)")
    if offsets[0] != 0 or offsets[1] != width * height:
        problems.append(f"plane offsets {offsets[0]} and {offsets[1]}, the reader assumes 0 and {width * height} (UV right after Y)")
    if colour is None:
        problems.append("the caps name no colorimetry the kernel converts")
    elif colour != expected:
        problems.append(f"the caps say {colour.name}, the pipeline converts as {expected.name}")
    return problems


def nv12_camera_pipeline(release: Path) -> tuple[str, str] | None:
    """(GStreamer pipeline, what) of the release's NV12 camera, or None where its source delivers no NV12 from a camera."""
    from sdk.release import load_release
    from sdk.sources.gst_caps import caps_deliver_nv12
    from sdk.sources.opencv_capture import argus_pipeline
    from sdk.sources.uri import parse_source_uri

    _, pipeline, _ = load_release(release)
    for name, camera in pipeline.spec.cameras.items():
        if not camera.uri.startswith(("csi://", "gst://")):
            continue
        uri = parse_source_uri(camera.uri)
        if uri.scheme == "csi" and uri.params.get("format") == "nv12":
            text = argus_pipeline(int(uri.target), uri.int_param("width", 1920), uri.int_param("height", 1080), uri.int_param("fps", 30), nv12=True)
            return text, f"camera {name} ({camera.uri})"
        if uri.scheme == "gst" and caps_deliver_nv12(uri.target):
            return uri.target, f"camera {name} ({camera.uri})"
    return None


def _one_sample(pipeline: str, timeout_s: float = 10.0):
    """(width, height, strides, offsets, colorimetry string) of one frame at the appsink, read with GStreamer itself."""
    import gi

    gi.require_version("Gst", "1.0")
    gi.require_version("GstVideo", "1.0")
    from gi.repository import Gst, GstVideo

    Gst.init(None)
    named = pipeline.replace("appsink", "appsink name=selftest_sink", 1)
    element = Gst.parse_launch(named)
    sink = element.get_by_name("selftest_sink")
    element.set_state(Gst.State.PLAYING)
    try:
        sample = sink.emit("try-pull-sample", int(timeout_s * Gst.SECOND))
        if sample is None:
            raise RuntimeError(f"no frame within {timeout_s:.0f} s")
        caps, buffer = sample.get_caps(), sample.get_buffer()
        info = GstVideo.VideoInfo.new_from_caps(caps)
        meta = GstVideo.buffer_get_video_meta(buffer)
        strides, offsets = (meta.stride, meta.offset) if meta is not None else (info.stride, info.offset)
        colorimetry = caps.get_structure(0).get_string("colorimetry")
        return info.width, info.height, (int(strides[0]), int(strides[1])), (int(offsets[0]), int(offsets[1])), colorimetry
    finally:
        element.set_state(Gst.State.NULL)


def nv12_camera_layout(release: Path) -> tuple[str, str]:
    import importlib.util

    from sdk.errors import SdkError
    from sdk.sources.gst_caps import appsink_caps, colour_from_colorimetry

    found = nv12_camera_pipeline(release)
    if found is None:
        return NOT_APPLICABLE, "the release's sources deliver no NV12 from a camera (csi://N?format=nv12 or NV12 gst caps)"
    if importlib.util.find_spec("gi") is None:
        return SKIP, "GStreamer's Python bindings are not installed (apt-get install python3-gi gir1.2-gst-plugins-base-1.0)"
    pipeline, what = found
    width, height, strides, offsets, colorimetry = _one_sample(pipeline)
    try:
        colour = colour_from_colorimetry(colorimetry, height, what) if colorimetry else None
    except SdkError:
        colour = None
    expected = colour_from_colorimetry(appsink_caps(pipeline).get("colorimetry"), height, what)  # what the SDK's reader uses
    problems = layout_problems(width, height, strides, offsets, colour, expected)
    detail = f"{what}: {width}x{height}, strides {strides}, offsets {offsets}, colorimetry {colorimetry!r}"
    return (FAIL, f"{detail}: " + "; ".join(problems)) if problems else (PASS, detail)


__all__ = ["layout_problems", "nv12_camera_layout", "nv12_camera_pipeline"]
