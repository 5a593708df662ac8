"""What a GStreamer pipeline hands its appsink: the pixel format and YUV colour of NV12 frames.

OpenCV's GStreamer backend passes NV12 caps through unconverted, as one (H * 3/2) x W single-channel
Mat (Y rows, then the interleaved UV rows; cap_gstreamer.cpp, retrieveVideoFrame); for any other
caps it delivers BGR (or gray). So the caps before `appsink` decide what a `gst://` source delivers.

The colour of NV12 comes from the caps' `colorimetry` field: a name (`bt601`, `bt709`) or GStreamer's
`range:matrix:transfer:primaries` numbers (GstVideoColorRange 1 = 0-255, 2 = 16-235; GstVideoColorMatrix
3 = BT.709, 4 = BT.601). Without it, GStreamer's own default applies (video-info.c,
set_default_colorimetry): YUV frames up to 576 rows are BT.601 limited range, taller ones BT.709
limited range (2160 rows and more BT.2020, which the kernels do not convert). NVIDIA's NvBufSurface
buffer pools pick NVBUF_COLOR_FORMAT_NV12 (BT.601 limited), _NV12_ER (0-255), _NV12_709 or _NV12_709_ER
from the same caps field (DeepStream's gstnvipcbufferpool.c, get_nvbuf_surface_format), so the caps
are where the colour of NVMM NV12 is stated.
"""

from __future__ import annotations

import re

from sdk.errors import SourceError
from sdk.pixels import YuvColour

_NAMED = {"bt601": YuvColour("bt601", "limited"), "bt709": YuvColour("bt709", "limited")}
_RANGES = {"1": "full", "2": "limited"}
_MATRICES = {"3": "bt709", "4": "bt601"}
_FIELD = re.compile(r"([A-Za-z][\w-]*)\s*=\s*(?:\([A-Za-z]+\))?\s*\"?([^,\"]+)\"?")
SD_ROWS = 576  # video-info.c: YUV frames up to this height default to BT.601, taller to BT.709
UHD_ROWS = 2160


def appsink_caps(pipeline: str) -> dict[str, str]:
    """The fields of the raw-video caps right before the pipeline's appsink ({} if there are none)."""
    elements = [part.strip() for part in pipeline.split("!")]
    for i, element in enumerate(elements):
        if element.split(" ", 1)[0] == "appsink" and i > 0:
            caps = elements[i - 1]
            if caps.startswith("video/x-raw"):
                return {key.lower(): value.strip() for key, value in _FIELD.findall(caps.partition(",")[2])}
            return {}
    return {}


def colour_from_colorimetry(colorimetry: str | None, height: int, where: str) -> YuvColour:
    """The YUV colour of NV12 frames of `height` rows whose caps say `colorimetry` (None: not given)."""
    if colorimetry is None:
        if height >= UHD_ROWS:
            raise SourceError(
                f"{where}: NV12 frames of {height} rows without colorimetry in the caps are BT.2020 by GStreamer's default, "
                "which the kernels do not convert",
                hint="add colorimetry=bt709 (or bt601) to the caps before appsink",
            )
        return _NAMED["bt601"] if height <= SD_ROWS else _NAMED["bt709"]
    text = colorimetry.strip().lower()
    if text in _NAMED:
        return _NAMED[text]
    parts = text.split(":")
    if len(parts) == 4 and parts[0] in _RANGES and parts[1] in _MATRICES:
        return YuvColour(_MATRICES[parts[1]], _RANGES[parts[0]])
    raise SourceError(
        f"{where}: NV12 colorimetry {colorimetry!r} is not converted by the kernels; allowed: bt601, bt709, "
        "or range:matrix:transfer:primaries with range 1 (full) or 2 (limited) and matrix 3 (BT.709) or 4 (BT.601)",
        hint="set colorimetry in the caps before appsink, e.g. colorimetry=bt601",
    )


def caps_deliver_nv12(pipeline: str) -> bool:
    return appsink_caps(pipeline).get("format", "").upper() == "NV12"


__all__ = ["appsink_caps", "caps_deliver_nv12", "colour_from_colorimetry"]
