"""One form for every label format: the images (id, file, size) in the labels' order and COCO's ground-truth
dictionary, boxes in pixels `[x, y, w, h]`, crowd and ignore regions kept (`iscrowd: 1`). A label may carry more
than COCO reads (KITTI's `truncated` and `occluded`, MOTChallenge's `visibility`): pycocotools passes over them and the
recall bins read them. A frame of a video is an image whose `path` is the video and `frame` its index (0 first)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sdk.errors import ConfigError
from sdk.sources.images import IMAGE_SUFFIXES

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
EDGE_SLACK_PX = 1.0  # labels are rounded: a box may run this far past the image's edge


@dataclass(frozen=True)
class LabelledImage:
    id: int
    path: Path
    width: int
    height: int
    frame: int | None = None  # a video's frame (0 first): `path` is the video

    @property
    def name(self) -> str:
        """How reports name it: the file, or `video.mp4#frame 12` (the frame's number as the labels count it)."""
        return self.path.name if self.frame is None else f"{self.path.name}#{self.frame + 1}"


@dataclass
class LabelSet:
    source: Path  # the labels file (COCO JSON or the dataset YAML)
    format: str  # "coco", "yolo", "kitti" or "mot"
    images: list[LabelledImage]
    categories: dict[int, str]  # category id -> name
    annotations: list[dict] = field(default_factory=list)  # COCO's: id, image_id, category_id, bbox, area, iscrowd
    notes: list[str] = field(default_factory=list)  # what the reader changed or left out (e.g. boxes clipped to the image)

    @property
    def labels(self) -> int:
        """The objects to find (crowd and ignore regions aside)."""
        return sum(1 for a in self.annotations if not a["iscrowd"])

    @property
    def regions(self) -> int:
        """Crowd and ignore regions, each counted once (KITTI's DontCare is one region per category)."""
        return len({(a["image_id"], tuple(a["bbox"])) for a in self.annotations if a["iscrowd"]})

    def ground_truth(self) -> dict:
        """COCO's ground-truth dictionary (pycocotools' `COCO.dataset`)."""
        return {
            "images": [{"id": i.id, "width": i.width, "height": i.height, "file_name": i.name} for i in self.images],
            "categories": [{"id": cid, "name": name} for cid, name in self.categories.items()],
            "annotations": self.annotations,
        }


def check_box(x: float, y: float, w: float, h: float, image: LabelledImage, where: str) -> None:
    """A box with a positive size, inside its image (within the labels' rounding)."""
    if w <= 0 or h <= 0:
        raise ConfigError(
            f"{where}: box [{x:g}, {y:g}, {w:g}, {h:g}] has width or height {min(w, h):g}; allowed: above 0", hint="fix or drop the label"
        )
    if x < -EDGE_SLACK_PX or y < -EDGE_SLACK_PX or x + w > image.width + EDGE_SLACK_PX or y + h > image.height + EDGE_SLACK_PX:
        raise ConfigError(
            f"{where}: box [{x:g}, {y:g}, {w:g}, {h:g}] leaves the {image.width}x{image.height} image; allowed: inside it",
            hint="labels are in the image's own pixels: check the image or the label's coordinates",
        )


def image_size(file: Path, labels: Path) -> tuple[int, int]:
    """(width, height) of an image the labels do not give the size of (YOLO, KITTI), or an error naming it. A PNG's
    size is read from its header (KITTI's 7,481 images in well under a second); other images are decoded."""
    import cv2

    with open(file, "rb") as handle:
        head = handle.read(24)
    if head[:8] == PNG_SIGNATURE and head[12:16] == b"IHDR":
        width, height = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
        if width > 0 and height > 0:
            return width, height
    image = cv2.imread(str(file), cv2.IMREAD_UNCHANGED)
    if image is None:
        raise ConfigError(f"{labels}: image {file} does not decode", hint="remove it from the set or replace the file")
    return image.shape[1], image.shape[0]


def image_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)


IMAGES_FLAG = "--images"  # where the images come from by default: sdk evaluate's flag


def given_with(images_from: str) -> str:
    """How a hint says to give the images: `with --images`, or `as evaluation.images` (a pipeline's key)."""
    return f"with {images_from}" if images_from.startswith("--") else f"as {images_from.rpartition(': ')[2]}"


__all__ = ["EDGE_SLACK_PX", "IMAGES_FLAG", "LabelSet", "LabelledImage", "check_box", "given_with", "image_files", "image_size"]
