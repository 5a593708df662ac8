"""A picture of what Foxglove draws for a detections MCAP: one frame of the file's camera images with that frame's
`foxglove.ImageAnnotations` (the mcap sink's, `images: true`) drawn over it, as a JPEG for the docs.

    python -m tools.docs.mcap_picture detections.mcap picture.jpg [--frame N]

Annotations are matched to the image logged at the same time on the same camera (the sink logs both at the frame's
stamp). Closed lines are drawn in their outline colour and thickness, texts on their background colour, as
Foxglove's Image panel draws them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

IMAGE, ANNOTATIONS = "foxglove.CompressedImage", "foxglove.ImageAnnotations"


def _bgr(colour) -> tuple[int, int, int]:
    return (round(colour.b * 255), round(colour.g * 255), round(colour.r * 255))


def frames_of(path: Path) -> list[tuple[int, object, object]]:
    """(log time, image message, annotations message) of every frame with both, in log-time order."""
    from mcap.reader import make_reader
    from mcap_protobuf.decoder import DecoderFactory

    images: dict[int, dict[str, object]] = {}  # log time -> topic -> image
    notes: list[tuple[int, str | None, object]] = []
    with path.open("rb") as handle:
        for schema, channel, message, decoded in make_reader(handle, decoder_factories=[DecoderFactory()]).iter_decoded_messages():
            if schema.name == IMAGE:
                images.setdefault(message.log_time, {})[channel.topic] = decoded
            elif schema.name == ANNOTATIONS:
                camera = next((kv.value for kv in decoded.metadata if kv.key == "camera"), None)  # several cameras: TOPIC/NAME
                notes.append((message.log_time, camera, decoded))
    out = []
    for log_time, camera, decoded in sorted(notes, key=lambda note: note[0]):
        at = images.get(log_time, {})
        image = next((m for topic, m in at.items() if camera is None or topic.endswith(f"/{camera}")), None)
        if image is not None:
            out.append((log_time, image, decoded))
    return out


def render(image_message, annotations) -> np.ndarray:
    import cv2

    image = cv2.imdecode(np.frombuffer(image_message.data, np.uint8), cv2.IMREAD_COLOR)
    for points in annotations.points:
        corners = np.array([[round(p.x), round(p.y)] for p in points.points], np.int32)
        cv2.polylines(image, [corners], isClosed=True, color=_bgr(points.outline_color), thickness=max(1, round(points.thickness)))
    for text in annotations.texts:
        scale = text.font_size / 28
        (width, height), base = cv2.getTextSize(text.text, cv2.FONT_HERSHEY_SIMPLEX, scale, 1)
        x, y = round(text.position.x), round(text.position.y)
        top = max(0, y - height - base)
        cv2.rectangle(image, (x, top), (x + width + 4, top + height + base + 2), _bgr(text.background_color), thickness=-1)
        cv2.putText(image, text.text, (x + 2, top + height + 1), cv2.FONT_HERSHEY_SIMPLEX, scale, _bgr(text.text_color), 1, cv2.LINE_AA)
    return image


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.docs.mcap_picture", description=__doc__.split("\n\n")[0])
    parser.add_argument("mcap", type=Path)
    parser.add_argument("output", type=Path, help="the JPEG to write")
    parser.add_argument("--frame", type=int, default=0, help="which frame with both an image and annotations (0: the first)")
    args = parser.parse_args(argv)
    import cv2

    try:
        frames = frames_of(args.mcap)
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"error: {args.mcap}: cannot read it as MCAP: {exc}\nhint: give the mcap sink's file (images: true)\n")
        return 1
    if not 0 <= args.frame < len(frames):
        sys.stderr.write(
            f"error: {args.mcap}: --frame {args.frame}; allowed: 0 to {len(frames) - 1} (frames with both an image and annotations)\n"
            "hint: write the file with the mcap sink's images: true\n"
        )
        return 1
    if args.output.resolve() == args.mcap.resolve():
        sys.stderr.write(f"error: {args.output}: is the MCAP file read; allowed: another path\nhint: name a .jpg file\n")
        return 1
    _, image, notes = frames[args.frame]
    cv2.imwrite(str(args.output), render(image, notes), [cv2.IMWRITE_JPEG_QUALITY, 88])
    print(f"{args.output}: frame {args.frame} of {len(frames)}, {len(notes.points)} box(es)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
