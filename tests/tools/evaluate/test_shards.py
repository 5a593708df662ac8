"""A labelled set split into shards, detected apart and merged in the labels' order, gives the unsplit run's
detections and so the same figures, to the last digit: over two workers here, and on a local Ray where it is installed."""

from __future__ import annotations

import sys

import pytest

from sdk.errors import ConfigError
from tools.evaluate import metrics
from tools.evaluate.run import checked_inputs
from tools.evaluate.shards import RAY_INSTALL, detect_shards, split


@pytest.fixture(scope="module")
def example(labelled_example):
    pipeline, artifacts = labelled_example.pipeline, labelled_example.artifacts
    labels, mapping = checked_inputs(pipeline, labelled_example.folder / "instances.json", None)
    whole = detect_shards(pipeline, artifacts, labels, mapping, shards=1)
    return pipeline, artifacts, labels, mapping, whole


def _scored(labels, mapping, run) -> metrics.Metrics:
    categories = sorted(set(mapping.to_category.values()))
    return metrics.evaluate(labels.ground_truth(), run.detections, categories, [i.id for i in labels.images], draws=300)


def test_shards_are_contiguous_in_order_and_never_empty(example):
    _, _, labels, _, _ = example
    parts = split(labels, 2)
    assert [[i.id for i in p.images] for p in parts] == [[labels.images[0].id], [i.id for i in labels.images[1:]]]
    assert sum(len(p.annotations) for p in parts) == len(labels.annotations)
    assert len(split(labels, 10)) == len(labels.images)
    with pytest.raises(ConfigError, match="--shards 0: allowed: 1 or more"):
        split(labels, 0)


def test_a_split_over_two_workers_gives_the_same_metrics_as_one(example):
    pipeline, artifacts, labels, mapping, whole = example
    split_run = detect_shards(pipeline, artifacts, labels, mapping, shards=2)
    assert split_run.detections == whole.detections and len(whole.detections) > 10
    one, two = _scored(labels, mapping, whole), _scored(labels, mapping, split_run)
    assert (two.stats, two.intervals, two.per_class) == (one.stats, one.intervals, one.per_class)


def test_without_ray_installed_ray_is_one_error_line_with_the_install_command(example, monkeypatch):
    pipeline, artifacts, labels, mapping, _ = example
    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed
    with pytest.raises(ConfigError, match="--ray: Ray is not installed") as refused:
        detect_shards(pipeline, artifacts, labels, mapping, shards=2, ray="local")
    assert refused.value.hint == f"install the optional extra: {RAY_INSTALL}"


def test_on_a_local_ray_the_shards_give_the_same_detections(example):
    pytest.importorskip("ray", reason=f"Ray is not installed: {RAY_INSTALL}")
    pipeline, artifacts, labels, mapping, whole = example
    assert detect_shards(pipeline, artifacts, labels, mapping, shards=2, ray="local").detections == whole.detections


def test_an_unreachable_ray_and_a_failed_ray_task_are_one_error_each(example, monkeypatch):
    from types import SimpleNamespace

    from sdk.errors import SdkError
    from tools.evaluate import shards

    pipeline, artifacts, labels, mapping, _ = example

    class RayTaskError(Exception):
        def __init__(self, cause):
            super().__init__("traceback text")
            self.cause = cause

    def refuse(**_):
        raise ConnectionError("Could not find any running Ray instance")

    def fail(_):
        raise RayTaskError(ValueError("no such file: /data/images/000001.png"))

    fake = SimpleNamespace(is_initialized=lambda: False, init=refuse, shutdown=lambda: None, exceptions=SimpleNamespace(RayTaskError=RayTaskError))
    monkeypatch.setattr(shards, "require_ray", lambda: fake)
    with pytest.raises(ConfigError, match=r"--ray 10.0.0.9:6379: cannot start or reach the Ray cluster at 10.0.0.9:6379: Could not find"):
        detect_shards(pipeline, artifacts, labels, mapping, shards=2, ray="10.0.0.9:6379")
    fake.init = lambda **_: None
    fake.remote = lambda **_: lambda function: SimpleNamespace(remote=lambda *args: None)
    fake.get = fail
    with pytest.raises(SdkError, match=r"a Ray task failed: no such file: /data/images/000001.png") as failed:
        detect_shards(pipeline, artifacts, labels, mapping, shards=2, ray="10.0.0.9:6379")
    assert "same paths" in failed.value.hint
