"""`sdk evaluate --target`: the labelled images run on simulated targets (real sshd) through their current release's own
runtime, one contiguous shard a target, and are scored here. Split over two targets, on one, and on `local` (the same
ONNX Runtime CPU backend), the detections and so every figure are the same; a target that fails is one error naming it
(or, asked, its images left out); an unknown target or an empty group is one error line before anything runs."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import pytest
import yaml

from sdk.errors import SdkError
from tools.evaluate.run import Request, evaluate
from tools.validation.evaluate_targets import detect_on_targets

DRAWS = 50  # bootstrap draws: identical detections give identical intervals at any count


@pytest.fixture(scope="module")
def fleet(labelled_example, sim_server, tmp_path_factory):
    """Targets sim-a and sim-b (two remote roots on one sshd) with the labelled example current on both (deployed to
    sim-a, whose store sim-b is a copy of: a twin imaged from it); sim-c with nothing deployed; groups `pair` (sim-a,
    sim-b), `broken` (sim-a, sim-c) and `empty` (no target). The deploy keeps the session's host state: it finds the
    labelled example's prepared model in its cache (the same model, keyed by its content) instead of preparing it again."""
    from tools.deploy.flow import Deploy

    folder = tmp_path_factory.mktemp("evaluate-targets")
    shutil.copytree(labelled_example.folder, folder / "p", ignore=shutil.ignore_patterns("cache"))
    path = folder / "p" / "pipeline.yaml"
    spec = yaml.safe_load(path.read_text())
    spec["source"]["replay"] = {"loop": True}  # three images: the deploy's health check needs five frames
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    targets = folder / "targets"
    for name in ("sim-a", "sim-b", "sim-c"):
        (folder / name).mkdir()
        sim_server.write_target(targets / f"{name}.yaml", remote_root=str(folder / name))
    (targets / "groups.yaml").write_text("pair: [sim-a, sim-b]\nbroken: [sim-a, sim-c]\nempty: []\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SDK_TARGETS_DIR", str(targets))
        Deploy(path, "sim-a", frames=2, report_dir=folder / "deploy")()
        shutil.rmtree(folder / "sim-b")
        shutil.copytree(folder / "sim-a", folder / "sim-b", symlinks=True)
        yield SimpleNamespace(pipeline=path, labels=folder / "p" / "instances.json", folder=folder)


def _evaluate(fleet, target: str, **settings) -> dict:
    return evaluate(Request(fleet.pipeline, fleet.labels, target=target, draws=DRAWS, **settings), on_targets=detect_on_targets)


FIGURES = ("map50_95", "map50", "metrics", "intervals", "per_class", "operating_point", "detections")


def test_a_split_over_two_targets_gives_the_same_metrics_as_one_target_and_as_local(fleet, labelled_example):
    split, one, local = (_evaluate(fleet, target) for target in ("pair", "sim-a", "local"))
    assert split["detections"] > 10 and split["map50_95"] > 0.1
    for figure in FIGURES:
        assert split[figure] == one[figure] == local[figure], figure
    files = [image["file_name"] for image in labelled_example.data["images"]]
    assert [(s["target"], s["images"], s["frames"], s["first"], s["last"]) for s in split["targets"]] == [
        ("sim-a", 1, 1, files[0], files[0]),
        ("sim-b", 2, 2, files[1], files[2]),
    ]  # each target's runtime ran its own part only
    assert all(s["release"] for s in split["targets"]) and "targets" not in local
    assert split["backend"].startswith("sim-a: ") and "sim-b: " in split["backend"] and "(2 shards)" in split["backend"]


def test_a_target_that_fails_leaves_its_images_out_only_when_asked(fleet, sdk):
    report = ["--report-dir", str(fleet.folder / "partial"), "--json", str(fleet.folder / "partial.json")]
    ran = sdk("evaluate", str(fleet.pipeline), "--labels", str(fleet.labels), "--target", "broken", "--allow-partial", *report)
    assert ran.returncode in (0, 3, 4), ran.stderr
    partial = json.loads((fleet.folder / "partial.json").read_text())
    assert partial["labels"]["images_scored"] == 1 and "sim-c failed" in " ".join(partial["notes"])
    assert [s.get("error", "").startswith("no release is current on sim-c") for s in partial["targets"]] == [False, True]
    assert "target sim-c: failed (no release is current on sim-c" in ran.stdout


def test_without_allow_partial_a_failed_target_is_one_error_naming_it_and_nothing_is_scored(fleet, monkeypatch):
    """The fleet's outcome as sim-c's real failure above gives it (the run itself is the test above): the gate alone."""
    from tools.deploy import fleet as pool
    from tools.deploy.fleet import FleetResult, TargetOutcome

    def sim_c_fails(targets, install, measure, frames, report_dir, progress, **_):
        why = {"sim-c": "no release is current on sim-c: there is nothing to validate pipeline.yaml against"}
        return FleetResult([TargetOutcome(t.name, None, why.get(t.name), None, report_dir / t.name) for t in targets], report_dir)

    monkeypatch.setattr(pool, "deploy_fleet", sim_c_fails)
    with pytest.raises(SdkError, match=r"^--target broken: sim-c did not run its 2 image\(s\): no release is current on sim-c") as failed:
        _evaluate(fleet, "broken")
    deploy = f"deploy --target sim-c {fleet.pipeline}"
    assert failed.value.hint == f"fix sim-c (deploy this pipeline to it: {deploy}), or score the images the other targets ran: --allow-partial"


@pytest.mark.parametrize(
    ("target", "extra", "error", "hint"),
    [
        ("sim-x", (), "error: unknown target 'sim-x'", "hint: target files are"),
        ("empty", (), "error: --target empty: group 'empty' in ", "hint: list its targets in groups.yaml"),
        ("pair", ("--shards", "2"), "error: --shards 2: with --target pair the targets are the shards", "hint: leave out --shards"),
    ],
)
def test_bad_targets_are_one_error_line_and_a_hint_before_anything_runs(fleet, sdk, target, extra, error, hint):
    ran = sdk("evaluate", str(fleet.pipeline), "--labels", str(fleet.labels), "--target", target, *extra)
    assert ran.returncode == 1
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith(error) and lines[1].startswith(hint), ran.stderr


def test_labels_over_a_video_are_refused_on_a_target_before_anything_runs(fleet, tmp_path):
    """Only image files travel to a target: MOTChallenge labels over a video are one error naming them and the way out."""
    from sdk.errors import ConfigError
    from sdk.spec import load_pipeline
    from tests.tools.evaluate.test_kitti_mot_labels import _mot
    from tools.evaluate.labels import load_labels

    gt, video = _mot(tmp_path, ["1,1,10,5,20,30,1,1,1"])
    with pytest.raises(ConfigError) as refused:
        detect_on_targets(load_pipeline(fleet.pipeline), load_labels(gt, video), None, "pair")
    assert refused.value.message == f"--labels {gt}: its frames are in a video; --target pair runs image files only"
    assert refused.value.hint == "give the sequence's frame folder (img1/) with --images, or evaluate with --target local"
