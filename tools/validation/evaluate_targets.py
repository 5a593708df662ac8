"""`sdk evaluate --target T`: the labelled images run on a target, or split over a fleet's targets, scored on the host.

Each target runs its current release (which must run this very pipeline file, as for `sdk validate`) on its own shard
of the labelled images: a contiguous run of the labels' images (tools/evaluate/shards.py `split`, one part a target,
in the group's order), sent to a scratch folder on the device (tools/connect/device_scratch.py) and replayed by the
release's own runtime as an evaluation run (`python -m sdk run --evaluate DIR`, sdk/runtime/evaluation_run.py): its
engine or backend, its preprocessing, at the evaluation's thresholds. The targets run at once, through the fleet
deploy's own pool and sessions (tools/deploy/fleet.py; the on-device service paused meanwhile). Each shard's exact
detections come back by file name and are merged in the labels' order: the same detections, and so the same figures,
however the set is split. A target that fails is one error naming it, and nothing is scored, unless `partial` asks
for the images the others ran (the failed shards' images are then left out with their labels, and named).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from sdk.errors import SdkError
from sdk.spec.loader import PipelineFile
from tools.evaluate.classmap import ClassMap
from tools.evaluate.detect import DetectionRun
from tools.evaluate.labelled_run import DETECTIONS_FILE, first_frames
from tools.evaluate.labelset import LabelSet
from tools.evaluate.target_shards import PARTIAL_FLAG, TargetsRun, check_target_labels, resolve_fleet, shard_names
from tools.progress import Progress, SilentProgress

SCRATCH_NAME = "evaluate"
RUN_NAME = "evaluation"


def detect_on_targets(
    pipeline: PipelineFile, labels: LabelSet, mapping: ClassMap, target: str, progress: Progress | None = None, partial: bool = False
) -> TargetsRun:
    """The detections on every labelled image, each target running its shard (see the module's text)."""
    from tools.deploy.fleet import deploy_fleet
    from tools.evaluate.shards import split

    progress = progress or SilentProgress()
    targets = resolve_fleet(target)
    check_target_labels(labels, target)
    parts = split(labels, len(targets))
    used = targets[: len(parts)]  # fewer images than targets: the last targets have nothing to run
    shard_of = {t.name: part for t, part in zip(used, parts, strict=True)}
    runs: dict[str, DetectionRun] = {}
    frames: dict[str, int] = {}  # the frames each target's runtime ran (its part's images, less any it could not decode)

    def install(session, _target):
        from tools.release.current import current_release, require_current

        require_current(session, pipeline)  # the release must run this very pipeline file
        return current_release(session)

    def run_shard(session, staged, folder: Path) -> dict:
        report = _run_shard(session, staged, folder, shard_of[session.name], progress)
        runs[session.name] = _shard_detections(folder / DETECTIONS_FILE, shard_of[session.name], mapping, pipeline.class_names())
        runs[session.name].backend, runs[session.name].postprocess = f"{session.name}: {report.get('backend', '')}", report.get("postprocess", "")
        frames[session.name] = report.get("frames")
        return report

    with tempfile.TemporaryDirectory(prefix="sdk-evaluate-") as scratch:
        result = deploy_fleet(used, install, run_shard, None, Path(scratch), progress, parallel=len(used), canary=False, kind=None)
    failed = [o for o in result.outcomes if o.error is not None]
    if failed and (not partial or len(failed) == len(used)):
        first = failed[0]
        more = f" (and {len(failed) - 1} more target(s): {', '.join(o.target for o in failed[1:])})" if len(failed) > 1 else ""
        also = f", or score the images the other targets ran: {PARTIAL_FLAG}" if len(used) > 1 and len(failed) < len(used) else ""
        raise SdkError(
            f"--target {target}: {first.target} did not run its {len(shard_of[first.target].images)} image(s): {first.error}{more}",
            hint=f"fix {first.target} (deploy this pipeline to it: deploy --target {first.target} {pipeline.path}){also}",
        )
    from tools.evaluate.shards import merge

    merged = merge([runs[t.name] for t in used if t.name in runs])
    done = TargetsRun(merged)
    for outcome, part in zip(result.outcomes, parts, strict=True):
        names = [image.name for image in part.images]
        entry = {"target": outcome.target, "release": outcome.release, "images": len(names), "first": names[0], "last": names[-1]}
        entry["frames"] = frames.get(outcome.target)
        if outcome.error is not None:
            done.not_run += names
            entry["error"] = outcome.error
        done.shards.append(entry)
    return done


def _run_shard(session, staged, folder: Path, part: LabelSet, progress: Progress) -> dict:
    from tools.connect.device_scratch import DeviceScratch
    from tools.deploy.flow import measure

    files = {name: image.path for name, image in shard_names(part).items()}
    with DeviceScratch(session, SCRATCH_NAME, files) as scratch:
        return measure(session, staged, folder, None, progress, run_name=RUN_NAME, evaluate=scratch.path)


def _shard_detections(path: Path, part: LabelSet, mapping: ClassMap, class_names) -> DetectionRun:
    """COCO results of the shard, from the target's detections.jsonl, in the shard's order; an image without a line
    (the target's source skipped it: it did not decode there) is `not_decoded`."""
    frames = first_frames(path)
    class_ids = {name: index for index, name in enumerate(class_names)}
    run = DetectionRun()
    for name, image in shard_names(part).items():
        found = frames.get(name)
        if found is None:
            run.not_decoded.append((image.name, "the target did not decode it (no frame of it in its detections)"))
            continue
        for label, score, box in found:
            category = mapping.to_category.get(class_ids.get(label, -1))
            if category is None:
                continue
            x1, y1, x2, y2 = box
            run.detections.append({"image_id": image.id, "category_id": category, "bbox": [x1, y1, x2 - x1, y2 - y1], "score": score})
    return run


__all__ = ["detect_on_targets"]
