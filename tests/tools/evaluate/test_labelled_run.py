"""An acceptance run judged on labels (`evaluation.labels`): each labelled image finds the run's own detections by the
file name detections.jsonl gives its frame, pycocotools scores them, and the budgets on labels are judged; a source that
cannot name its frames' files, or labels the class map cannot cover, are refused before anything runs."""

from __future__ import annotations

import json

import cv2
import numpy as np
import pytest
import yaml

from sdk.errors import ConfigError, SdkError
from sdk.frame import Frame
from sdk.sinks.jsonl import JsonlSink
from sdk.sources import FrameStream, open_reader
from sdk.spec import load_pipeline
from sdk.spec.schema import Replay
from tools.evaluate.labelled_run import checked_labels, score_run
from tools.history.label_matches import read_matches, write_matches


@pytest.fixture(scope="module")
def labelled(labelled_example):
    return labelled_example.folder, labelled_example.data


def _lines(data: dict, frames: list[tuple[str, bool]]) -> str:
    """detections.jsonl of frames (file, whether its detections are the labels themselves, else none)."""
    names = {c["id"]: c["name"] for c in data["categories"]}
    by_file = {i["file_name"]: i["id"] for i in data["images"]}
    lines = []
    for index, (file, perfect) in enumerate(frames):
        found = [
            {"label": names[a["category_id"]], "score": 0.9, "box": [x, y, x + w, y + h]}
            for a in data["annotations"]
            for x, y, w, h in [a["bbox"]]
            if perfect and a["image_id"] == by_file[file] and not a["iscrowd"]
        ]
        lines.append(json.dumps({"frame": index, "t_capture_ns": index, "file": file, "detections": found}))
    return "\n".join(lines) + "\n"


def test_each_labelled_image_is_scored_on_its_first_frame_and_the_budgets_judged(labelled, tmp_path):
    folder, data = labelled
    files = [i["file_name"] for i in data["images"]]
    # A looped replay: the first two images twice (the second time with nothing found), the third never.
    (tmp_path / "detections.jsonl").write_text(_lines(data, [(files[0], True), (files[1], True), (files[0], False), (files[1], False)]))
    scored = score_run(load_pipeline(folder / "pipeline.yaml"), tmp_path)
    section = scored.section
    assert section["map50_95"] == pytest.approx(1.0) and section["labels"]["images_scored"] == 2
    assert section["not_run"] == [files[2]] and files[2] in section["notes"][0]
    assert [(c.name, c.status, c.frames) for c in scored.checks] == [("accuracy.map50_95", "PASS", 2), ("accuracy.map50", "PASS", 2)]
    assert "the run's own detections at the deployment's thresholds" in scored.checks[0].detail
    assert read_matches(write_matches(scored.matches, tmp_path)).figures() == pytest.approx([1.0, 1.0])


def test_a_run_that_found_nothing_fails_its_budgets_on_labels(labelled, tmp_path):
    folder, data = labelled
    (tmp_path / "detections.jsonl").write_text(_lines(data, [(i["file_name"], False) for i in data["images"]]))
    scored = score_run(load_pipeline(folder / "pipeline.yaml"), tmp_path)
    assert scored.section["map50_95"] == 0.0 and {c.status for c in scored.checks} == {"FAIL"}


def test_a_run_none_of_whose_frames_is_labelled_leaves_the_budgets_inconclusive(labelled, tmp_path):
    folder, _ = labelled
    (tmp_path / "detections.jsonl").write_text(json.dumps({"frame": 0, "t_capture_ns": 0, "file": "other.jpg", "detections": []}) + "\n")
    scored = score_run(load_pipeline(folder / "pipeline.yaml"), tmp_path)
    assert scored.matches is None and {c.status for c in scored.checks} == {"INCONCLUSIVE"}
    assert "none of the 3 labelled images was among the run's frames" in scored.checks[0].detail


def test_labels_a_source_cannot_name_or_the_class_map_cannot_cover_are_refused_before_anything_runs(labelled):
    folder, _ = labelled
    spec = yaml.safe_load((folder / "pipeline.yaml").read_text())
    spec["source"]["uri"] = "synthetic://boxes?width=64&height=48"
    (folder / "synthetic.yaml").write_text(yaml.safe_dump(spec))
    with pytest.raises(ConfigError, match=r"evaluation.labels needs one images:// source .* synthetic://"):
        checked_labels(load_pipeline(folder / "synthetic.yaml"))
    spec = yaml.safe_load((folder / "pipeline.yaml").read_text())
    spec["evaluation"]["classes"] = {"person": "pedestrian"}
    (folder / "unmapped.yaml").write_text(yaml.safe_dump(spec))
    with pytest.raises(ConfigError, match=r"^evaluation.labels: .*pedestrian"):
        checked_labels(load_pipeline(folder / "unmapped.yaml"))


def test_a_folder_of_images_names_each_frames_file_in_detections_jsonl_past_a_corrupt_one(tmp_path):
    encoded = cv2.imencode(".jpg", np.full((48, 64, 3), 90, np.uint8))[1].tobytes()
    for name in ("a", "b", "d"):
        (tmp_path / f"{name}.jpg").write_bytes(encoded)
    (tmp_path / "c.jpg").write_bytes(encoded[: len(encoded) // 2])  # cut short: skipped, so frame 2 is d.jpg
    stream = FrameStream(open_reader(f"images://{tmp_path.name}", tmp_path.parent), Replay())
    with stream:
        frames = [(frame.index, frame.file) for frame in stream]
    assert frames == [(0, "a.jpg"), (1, "b.jpg"), (2, "d.jpg")]
    sink = JsonlSink(tmp_path / "detections.jsonl")
    line = json.loads(sink.line(Frame(index=2, t_capture_ns=0, image=np.zeros((2, 2, 3), np.uint8), file="d.jpg"), []))
    assert line["file"] == "d.jpg"


def test_a_cut_detections_line_is_one_error_naming_the_file_and_line(labelled, tmp_path):
    folder, data = labelled
    line = json.dumps({"frame": 0, "t_capture_ns": 0, "file": data["images"][0]["file_name"], "detections": [{"label": "person", "score": 0.5}]})
    (tmp_path / "detections.jsonl").write_text(line + "\n")
    with pytest.raises(SdkError, match=r"detections.jsonl:1: not a detections line \('box'\)"):
        score_run(load_pipeline(folder / "pipeline.yaml"), tmp_path)


def test_missing_labels_are_one_error_naming_the_pipeline_file_and_its_key(labelled):
    folder, _ = labelled
    spec = yaml.safe_load((folder / "pipeline.yaml").read_text())
    spec["evaluation"]["labels"] = "gone.json"
    (folder / "gone.yaml").write_text(yaml.safe_dump(spec))
    with pytest.raises(ConfigError, match=r"gone.yaml: evaluation.labels: .*gone.json: no such file"):
        checked_labels(load_pipeline(folder / "gone.yaml"))
    spec["evaluation"] |= {"labels": "instances.json", "images": "nowhere"}
    (folder / "nowhere.yaml").write_text(yaml.safe_dump(spec))
    with pytest.raises(ConfigError, match=r"nowhere.yaml: evaluation.images: .*nowhere: no such folder"):
        checked_labels(load_pipeline(folder / "nowhere.yaml"))
    (folder / "seq.avi").write_bytes(b"")  # MOTChallenge over a video: sdk evaluate reads it, a replay cannot
    spec["evaluation"] |= {"labels": "instances.json", "images": "seq.avi"}
    (folder / "video.yaml").write_text(yaml.safe_dump(spec))
    with pytest.raises(ConfigError, match=r"video.yaml: evaluation.images: .*seq.avi: not a folder \(an acceptance run finds its frames by file"):
        checked_labels(load_pipeline(folder / "video.yaml"))
    (folder / "label_2").mkdir(exist_ok=True)  # a KITTI label folder is labels too (here without label files)
    spec["evaluation"] = {"labels": "label_2"}
    (folder / "kitti.yaml").write_text(yaml.safe_dump(spec))
    with pytest.raises(ConfigError, match=r"evaluation.labels: --labels .*label_2: a folder without KITTI label files"):
        checked_labels(load_pipeline(folder / "kitti.yaml"))


def test_a_source_folder_other_than_the_labelled_images_folder_is_refused(labelled):
    import shutil

    folder, _ = labelled
    shutil.copytree(folder / "images", folder / "other", dirs_exist_ok=True)  # the same file names, other pictures
    spec = yaml.safe_load((folder / "pipeline.yaml").read_text())
    spec["source"]["uri"] = "images://other"
    (folder / "other.yaml").write_text(yaml.safe_dump(spec))
    with pytest.raises(ConfigError, match=r"other.yaml: source.uri .*other: not the labelled images' folder; allowed: .*images") as caught:
        checked_labels(load_pipeline(folder / "other.yaml"))
    assert "evaluation.images" in caught.value.message and caught.value.hint
    assert checked_labels(load_pipeline(folder / "pipeline.yaml")) is not None


def test_errors_about_a_pipelines_label_images_name_its_evaluation_images_not_a_flag(labelled):
    folder, _ = labelled
    (folder / "kitti" / "label_2").mkdir(parents=True, exist_ok=True)  # no image_2 beside it
    (folder / "kitti" / "label_2" / "000000.txt").write_text("Car 0 0 0 1 2 30 40 1 1 1 0 0 0 0\n")
    spec = yaml.safe_load((folder / "pipeline.yaml").read_text())
    spec["evaluation"] = {"labels": "kitti/label_2"}
    (folder / "kitti.yaml").write_text(yaml.safe_dump(spec))
    with pytest.raises(ConfigError, match=r"kitti.yaml: evaluation.images .*image_2: no such folder") as refused:
        checked_labels(load_pipeline(folder / "kitti.yaml"))
    assert "--images" not in refused.value.message + refused.value.hint and "as evaluation.images" in refused.value.hint


def test_a_budget_on_a_classs_recall_at_precision_is_judged_on_the_runs_own_detections(labelled, tmp_path):
    folder, data = labelled
    files = [i["file_name"] for i in data["images"]]
    names = {c["id"]: c["name"] for c in data["categories"]}
    labelled_class = names[data["annotations"][0]["category_id"]]
    spec = yaml.safe_load((folder / "pipeline.yaml").read_text())
    spec["budgets"]["accuracy"] = {"min_recall_at_precision": {labelled_class: 0.9, "toothbrush": 0.5}}
    (folder / "recall.yaml").write_text(yaml.safe_dump(spec))
    pipeline = load_pipeline(folder / "recall.yaml")
    (tmp_path / "detections.jsonl").write_text(_lines(data, [(file, True) for file in files]))
    scored = score_run(pipeline, tmp_path)
    checks = {c.name.rpartition(".")[2]: c for c in scored.checks}
    assert (checks[labelled_class].status, checks[labelled_class].measured, checks[labelled_class].bound) == ("PASS", 1.0, 1.0)
    assert checks["toothbrush"].status == "INCONCLUSIVE" and "no label of its category" in checks["toothbrush"].detail
    assert scored.section["operating_point"]["precision"] == pipeline.spec.evaluation.recall_at_precision
    (tmp_path / "detections.jsonl").write_text(_lines(data, [(file, False) for file in files]))
    assert score_run(pipeline, tmp_path).checks[0].status == "FAIL"  # nothing found: recall 0 under the minimum
    spec["evaluation"]["classes"] = {"toothbrush": None}
    (folder / "left_out.yaml").write_text(yaml.safe_dump(spec))
    with pytest.raises(ConfigError, match=r"min_recall_at_precision.toothbrush: class 'toothbrush' is left out of the scores"):
        checked_labels(load_pipeline(folder / "left_out.yaml"))
