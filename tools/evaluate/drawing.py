"""The worst images drawn for the report (JPEG, OpenCV): labels found in green, labels missed in orange (thick),
false positives in red, detections that hit a label in blue, ignore regions (crowds, DontCare) in grey; a caption with
the image's name, the missed labels and the false positives. The pixels come through the sources' own decoders (an
image file as `images://` reads it, a video's frame as `file://` does)."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from sdk.sinks.files import write_whole

FOUND, MISSED, HIT, FALSE, IGNORED = (60, 180, 60), (0, 140, 255), (255, 120, 30), (40, 40, 220), (150, 150, 150)  # BGR
JPEG_QUALITY = 90


def _pixels(entries: list[dict]) -> dict[int, np.ndarray | None]:
    """Pixels of each entry (None: it does not decode now), a video read once in order for all its frames."""
    from sdk.sources.base import CorruptFrame
    from sdk.sources.images import read_image

    out: dict[int, np.ndarray | None] = {}
    frames: dict[str, list[int]] = {}
    for n, entry in enumerate(entries):
        if entry["frame"] is None:
            try:
                out[n] = read_image(Path(entry["path"]))
            except (CorruptFrame, OSError):
                out[n] = None
        else:
            frames.setdefault(entry["path"], []).append(n)
    for video, wanted in frames.items():
        from sdk.sources import open_reader

        by_frame = {entries[n]["frame"]: n for n in wanted}
        with open_reader(f"file://{Path(video).name}", base=Path(video).parent) as reader:
            for index in range(max(by_frame) + 1):
                try:
                    image = reader.read()
                except CorruptFrame:
                    image = None
                if index in by_frame:
                    out[by_frame[index]] = None if image is None else np.array(image)
    return out


def _box(canvas: np.ndarray, bbox: list[float], colour: tuple[int, int, int], thickness: int, text: str | None = None) -> None:
    x, y, w, h = bbox
    top_left, bottom_right = (round(x), round(y)), (round(x + w), round(y + h))
    cv2.rectangle(canvas, top_left, bottom_right, colour, thickness, cv2.LINE_AA)
    if text:
        cv2.putText(canvas, text, (top_left[0] + 2, max(top_left[1] - 3, 10)), cv2.FONT_HERSHEY_SIMPLEX, 0.4, colour, 1, cv2.LINE_AA)


def draw(entry: dict, pixels: np.ndarray) -> np.ndarray:
    canvas = cv2.cvtColor(pixels, cv2.COLOR_GRAY2BGR) if pixels.ndim == 2 else np.ascontiguousarray(pixels[..., :3])
    for region in entry["ignore_regions"]:
        _box(canvas, region, IGNORED, 1)
    for label in entry["labels"]:
        _box(canvas, label["bbox"], FOUND if label["found"] else MISSED, 2 if label["found"] else 3, None if label["found"] else label["category"])
    for found in entry["detections"]:
        _box(canvas, found["bbox"], HIT if found["hit"] else FALSE, 1, f"{found['category']} {found['score']:.2f}")
    caption = f"{entry['image']}: {entry['missed']} missed, {entry['false_positives']} false"
    cv2.rectangle(canvas, (0, 0), (min(canvas.shape[1], 8 + 7 * len(caption)), 18), (0, 0, 0), -1)
    cv2.putText(canvas, caption, (4, 13), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (255, 255, 255), 1, cv2.LINE_AA)
    return canvas


def write_drawings(entries: list[dict], folder: Path) -> list[str]:
    """Each entry drawn to folder/entry["drawing"]; the names of those whose image no longer decodes."""
    missing = []
    pixels = _pixels(entries)
    for n, entry in enumerate(entries):
        if pixels.get(n) is None:
            missing.append(entry["image"])
            continue
        ok, data = cv2.imencode(".jpg", draw(entry, pixels[n]), [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
        target = folder / entry["drawing"]
        target.parent.mkdir(parents=True, exist_ok=True)
        write_whole(target, data.tobytes())
    return missing


__all__ = ["draw", "write_drawings"]
