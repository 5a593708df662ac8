"""The same labels of the same images, kept as COCO JSON, a YOLO dataset, KITTI label files and MOTChallenge labels
beside a video, give the same mAP through `sdk evaluate`: the example's model on a few of its images (each format
read by its own loader, the frames of the video through the `file://` source)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import cv2
import pytest

from sdk.spec import load_pipeline
from tests.conftest import REPO
from tools.evaluate.report import write
from tools.evaluate.run import Request, evaluate

EXAMPLE = REPO / "pipelines" / "yolox_nano.yaml"
LABELS = REPO / "pipelines" / "assets" / "coco_cc_by" / "instances.json"
IMAGES = LABELS.parent / "images"
SUBSET = 6  # images: enough for several classes, cheap enough for every run of the suite
FIGURES = ("map50_95", "map50", "map75", "ar100")


def _pipeline(folder: Path, classes: dict[str, str | None]) -> Path:
    """The example's pipeline beside a copy of its model, with its class map (a pipeline's files stay in its folder)."""
    (folder / "assets" / "frames").mkdir(parents=True)
    shutil.copy(REPO / "pipelines" / "assets" / "yolox_nano.onnx", folder / "assets" / "yolox_nano.onnx")
    text = EXAMPLE.read_text().replace("images://assets/coco_cc_by/images", "images://assets/frames")
    text = text.replace("  max_detections: 100    # COCO scores", f"  classes: {json.dumps(classes)}\n  max_detections: 100    # COCO scores")
    (folder / "pipeline.yaml").write_text(text)
    return folder / "pipeline.yaml"


def _same(results: list[dict]) -> None:
    for result in results[1:]:
        assert result["labels"]["labels"] == results[0]["labels"]["labels"]
        for name in FIGURES:
            assert result["metrics"][name] == pytest.approx(results[0]["metrics"][name], abs=1e-6), (result["labels"]["format"], name)
        scored = {c["name"].replace("_", " "): c["ap50_95"] for c in result["per_class"] if c["ap50_95"] is not None}
        assert scored == {c["name"]: c["ap50_95"] for c in results[0]["per_class"] if c["ap50_95"] is not None}


def test_coco_json_a_yolo_dataset_and_kitti_labels_of_the_same_images_give_the_same_map(tmp_path):
    data = json.loads(LABELS.read_text())
    data["images"] = data["images"][:SUBSET]
    kept = {image["id"] for image in data["images"]}
    data["annotations"] = [a | {"area": a["bbox"][2] * a["bbox"][3]} for a in data["annotations"] if a["image_id"] in kept and not a["iscrowd"]]
    names = {c["id"]: c["name"] for c in data["categories"]}
    present = {names[a["category_id"]] for a in data["annotations"]}
    pipeline = _pipeline(tmp_path, {name: None for name in names.values() if name not in present})  # KITTI lists only the types it holds
    (tmp_path / "coco.json").write_text(json.dumps(data))
    order = {c["id"]: i for i, c in enumerate(data["categories"])}
    for folder in ("yolo/images/val", "yolo/labels/val", "kitti/image_2", "kitti/label_2"):
        (tmp_path / folder).mkdir(parents=True)
    for image in data["images"]:
        for folder in ("yolo/images/val", "kitti/image_2"):
            shutil.copy(IMAGES / image["file_name"], tmp_path / folder / image["file_name"])
        yolo, kitti = [], []
        for a in (a for a in data["annotations"] if a["image_id"] == image["id"]):
            x, y, w, h = a["bbox"]
            W, H = image["width"], image["height"]  # noqa: N806
            yolo.append(f"{order[a['category_id']]} {(x + w / 2) / W!r} {(y + h / 2) / H!r} {w / W!r} {h / H!r}")
            kitti.append(f"{names[a['category_id']].replace(' ', '_')} 0.00 0 0 {x!r} {y!r} {x + w!r} {y + h!r} 1 1 1 0 0 10 0")
        stem = Path(image["file_name"]).stem
        (tmp_path / "yolo" / "labels" / "val" / f"{stem}.txt").write_text("\n".join(yolo) + "\n")
        (tmp_path / "kitti" / "label_2" / f"{stem}.txt").write_text("\n".join(kitti) + "\n")
    (tmp_path / "yolo.yaml").write_text(json.dumps({"path": "yolo", "val": "images/val", "names": [c["name"] for c in data["categories"]]}))
    results = [
        evaluate(Request(pipeline, tmp_path / "coco.json", tmp_path / "yolo" / "images" / "val", draws=0)),
        evaluate(Request(pipeline, tmp_path / "yolo.yaml", draws=0)),
        evaluate(Request(pipeline, tmp_path / "kitti" / "label_2", draws=0)),
    ]
    assert [r["labels"]["format"] for r in results] == ["coco", "yolo", "kitti"] and results[0]["labels"]["labels"] == len(data["annotations"])
    assert results[0]["map50_95"] > 0.1  # the model finds things: equal figures are not equal zeros
    _same(results)


def test_motchallenge_labels_beside_a_video_give_the_map_of_the_same_frames_as_coco_json(tmp_path):
    """Three photographs cropped to one size as the frames of a lossless video; their people as MOTChallenge
    pedestrians (crowds as its crowd class, an ignore region), and the same as COCO JSON over the frames as PNG."""
    data = json.loads(LABELS.read_text())
    chosen = [image for image in data["images"] if image["file_name"] in ("000000126107.jpg", "000000184324.jpg", "000000423617.jpg")]
    width, height = 640, 400
    classes = load_pipeline(EXAMPLE).class_names()
    pipeline = _pipeline(tmp_path, {"person": "pedestrian"} | {name: None for name in classes if name != "person"})
    (tmp_path / "seq" / "gt").mkdir(parents=True)
    (tmp_path / "frames").mkdir()
    writer = cv2.VideoWriter(str(tmp_path / "seq" / "seq.avi"), cv2.VideoWriter_fourcc(*"FFV1"), 10, (width, height))
    rows, coco = [], {"images": [], "annotations": [], "categories": [{"id": 1, "name": "pedestrian"}]}
    for frame, image in enumerate(chosen, start=1):
        pixels = cv2.imread(str(IMAGES / image["file_name"]))[:height, :width]
        writer.write(pixels)
        cv2.imwrite(str(tmp_path / "frames" / f"{frame}.png"), pixels)
        coco["images"].append({"id": frame, "file_name": f"{frame}.png", "width": width, "height": height})
        for a in (a for a in data["annotations"] if a["image_id"] == image["id"] and a["category_id"] == 1):
            x, y, w, h = a["bbox"]
            rows.append(f"{frame},{len(rows) + 1},{x!r},{y!r},{w!r},{h!r},1,{13 if a['iscrowd'] else 1},1")
            clipped = [x, y, min(x + w, width) - x, min(y + h, height) - y]  # MOTChallenge's rows run past the frame; COCO's do not
            if clipped[2] > 0 and clipped[3] > 0:
                coco["annotations"].append(
                    {"id": len(rows), "image_id": frame, "category_id": 1, "bbox": clipped, "area": clipped[2] * clipped[3], "iscrowd": a["iscrowd"]}
                )
    writer.release()
    (tmp_path / "seq" / "gt" / "gt.txt").write_text("\n".join(rows) + "\n")
    (tmp_path / "coco.json").write_text(json.dumps(coco))
    # One frame a shard: each shard reads the video from its own first frame on.
    from_video = evaluate(Request(pipeline, tmp_path / "seq" / "gt" / "gt.txt", tmp_path / "seq" / "seq.avi", draws=0, shards=3))
    from_frames = evaluate(Request(pipeline, tmp_path / "coco.json", tmp_path / "frames", draws=0))
    assert from_video["labels"] | {"path": None} == from_frames["labels"] | {"path": None, "format": "mot"}
    assert from_video["labels"]["crowd_regions"] == 1 and from_video["labels"]["not_decoded"] == []
    assert from_video["map50_95"] > 0.1
    _same([from_frames, from_video])
    worst = from_video["worst_images"][0]
    assert worst["image"].startswith("seq.avi#") and worst["frame"] is not None
    write(from_video, tmp_path / "report")  # the worst frames drawn from the video, read again through the source
    drawn = cv2.imread(str(tmp_path / "report" / worst["drawing"]))
    assert drawn.shape == (height, width, 3) and from_video["worst_images"][0]["drawing"] == worst["drawing"]
