"""Several cameras, one model: the `sources` mapping, the `batch` gathering policy, per-camera budgets.

`sources: {NAME: SOURCE}` takes, per camera, the block `source:` takes, plus the overrides that make
sense per camera (`crop`; the replay rate is the block's own `replay.rate_fps`). Everything after the
source (preprocess apart from the crop, model, postprocess, sinks) is shared. `source:` alone is one
camera named after the pipeline. The names follow the target names' rules (letters, digits, `_`, `-`).
"""


import re
from typing import Annotated, Literal
from urllib.parse import parse_qsl, urlencode

from pydantic import Field

from sdk.spec.bounds import Frozen, Int, Real
from sdk.spec.budgets import CameraBudget
from sdk.spec.preprocess import Crop
from sdk.spec.source import Source

CAMERA_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
CAMERA_NAME_RULE = "1 to 64 letters, digits, '_' or '-', beginning with a letter or digit (the target names' rule)"
MAX_CAMERAS = 32


class CameraSource(Source):
    """One camera of `sources`: the `source` block and its own crop (null: `preprocess.crop`)."""

    crop: Crop | None = None


class Batch(Frozen):
    """How frames of the cameras are gathered into one inference call.

    The gatherer waits for a frame of every camera up to `wait_ms` after the first one of the batch
    arrived, then runs with what arrived: a late or dead camera never stalls the others, and each
    slot it left empty is counted against it (`cameras.NAME.skipped_slots`)."""

    size: Literal["cameras", 1] = "cameras"  # frames per inference call: one per camera, or one at a time
    wait_ms: Real("longest wait for the other cameras' frames after a batch's first frame, ms", ge=0, le=10_000) = 20.0


def topic_cameras(source: dict) -> dict[str, dict] | None:
    """A `source:` block whose recording URI (mcap://, rosbag2://) names several `topic=`, as `sources:` (camera name ->
    the block with one topic each), named after the topics (`/front/image` -> `front_image`); None for any other."""
    uri = source.get("uri")
    if not isinstance(uri, str) or uri.partition("://")[0] not in ("mcap", "rosbag2"):
        return None
    head, _, query = uri.partition("?")
    pairs = parse_qsl(query, keep_blank_values=True)
    topics = [value for key, value in pairs if key == "topic"]
    if len(topics) < 2:
        return None
    others = [(key, value) for key, value in pairs if key != "topic"]
    cameras: dict[str, dict] = {}
    for topic in topics:
        name = (re.sub(r"[^A-Za-z0-9_-]+", "_", topic).strip("_-") or "camera")[:60]
        while name in cameras:
            name = f"{name}_{len(cameras)}"
        cameras[name] = {**source, "uri": f"{head}?{urlencode([*others, ('topic', topic)], safe='/')}"}
    return cameras


Cameras = Annotated[dict[str, CameraSource], Field(min_length=1, max_length=MAX_CAMERAS)]
CameraCount = Int(1, MAX_CAMERAS, "cameras")

__all__ = ["topic_cameras", "CAMERA_NAME", "CAMERA_NAME_RULE", "MAX_CAMERAS", "Batch", "CameraBudget", "CameraCount", "CameraSource", "Cameras"]
