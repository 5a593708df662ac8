"""What a pipeline's source holds, read on the host before a run: its frame rate, frame size and frame count.

`sdk init` sizes the file it writes from them (a still image or a clip shorter than a backed p99 loops; a still has no
frame rate of its own); `sdk check` compares the count with `--frames`, `replay.frames` and `health.min_frames`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sdk.errors import ConfigError, SdkError
from sdk.sources.images import IMAGE_SUFFIXES  # what images:// reads
from sdk.sources.uri import RECORDING_SCHEMES

DEFAULT_FPS = 30.0  # a camera's rate where the source does not say
STILL_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp")


@dataclass(frozen=True)
class SourceFacts:
    fps: float  # stated by the clip or the URI, else DEFAULT_FPS
    size: tuple[int, int] | None  # (width, height) where known
    frames: int | None  # frames a single play-through holds; None: live, or not told
    still: bool = False  # a single image given as file://photo.jpg: no frame rate of its own, one frame
    fps_stated: bool = True  # False: DEFAULT_FPS stands in for a rate the source does not have or tell


def is_still(path: Path) -> bool:
    return path.suffix.lower() in STILL_SUFFIXES


def file_frames(path: Path) -> int | None:
    """The frames of a clip (its container's count) or 1 for a still image; None where the container does not tell."""
    if is_still(path):
        return 1
    import cv2

    capture = cv2.VideoCapture(str(path))
    count = int(capture.get(cv2.CAP_PROP_FRAME_COUNT)) if capture.isOpened() else 0
    capture.release()
    return count if count > 0 else None


def source_facts(uri: str, folder: Path) -> SourceFacts:
    """The facts of `uri`, its path relative to `folder` (the pipeline file's)."""
    from urllib.parse import parse_qs, urlsplit

    scheme, _, rest = uri.partition("://")
    query = {k: v[0] for k, v in parse_qs(urlsplit(uri).query).items()}
    stated, size, frames, still = query.get("fps"), None, None, False
    if query.get("width", "").isdigit() and query.get("height", "").isdigit():
        size = (int(query["width"]), int(query["height"]))
    if scheme == "synthetic":
        from sdk.sources.synthetic import DEFAULT_FRAMES

        given = query.get("frames", str(DEFAULT_FRAMES))
        frames = int(given) if given.isdigit() else None
    path = folder / rest.split("?")[0]
    if scheme == "file" and path.is_file():
        import cv2

        still, frames = is_still(path), file_frames(path)
        capture = cv2.VideoCapture(str(path))
        if capture.isOpened():
            stated = None if still else capture.get(cv2.CAP_PROP_FPS)  # FFmpeg says 25 for any image: not a rate
            width, height = int(capture.get(cv2.CAP_PROP_FRAME_WIDTH)), int(capture.get(cv2.CAP_PROP_FRAME_HEIGHT))
            size = (width, height) if width > 0 and height > 0 else size
        capture.release()
    elif scheme in RECORDING_SCHEMES:
        stated, size, frames = _recording_facts(uri, folder)
    elif scheme == "images" and path.is_dir():
        import cv2

        images = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        frames = len(images)
        image = cv2.imread(str(images[0])) if images else None
        size = (image.shape[1], image.shape[0]) if image is not None else size
    try:
        fps = float(stated) if stated else 0.0
    except ValueError:
        fps = 0.0
    known = 1.0 <= fps <= 1000.0
    return SourceFacts(round(fps, 2) if known else DEFAULT_FPS, size if size and min(size) > 0 else None, frames, still, known)


def _recording_facts(uri: str, folder: Path) -> tuple[float | None, tuple[int, int] | None, int | None]:
    """A recording's camera topic: its frame rate (from the recording's index), its first frame's size and its frame
    count. The topic and its encoding are checked as a run checks them: a topic not in the recording lists those that are."""
    from sdk.sources import open_reader

    try:
        with open_reader(uri, folder) as reader:
            image = reader.read()
            count = getattr(reader, "frame_count", None)
            return reader.nominal_fps, (image.shape[1], image.shape[0]) if image is not None else None, count
    except SdkError as exc:
        raise ConfigError(f"--source {uri}: {exc.message}", hint=exc.hint) from None


__all__ = ["DEFAULT_FPS", "IMAGE_SUFFIXES", "STILL_SUFFIXES", "SourceFacts", "file_frames", "is_still", "source_facts"]
