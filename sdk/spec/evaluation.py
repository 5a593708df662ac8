"""The `evaluation` section: how `sdk evaluate` scores the model against labelled images.

An evaluation keeps every candidate down to a low score floor (the precision-recall curve needs the low scores) and
runs its own non-maximum suppression, so its settings are not the deployment's `postprocess` thresholds. The class
map says which label category each of the model's classes is scored against: by default a class goes to the category
of the same name (case, spaces and underscores aside; `motorbike`, `aeroplane`, `sofa` and `tvmonitor` find COCO's
`motorcycle`, `airplane`, `couch` and `tv`); `classes` names the others, and `null` leaves a class out. Beside COCO's
figures the evaluation reports each class's recall at a fixed precision (`recall_at_precision`), the recall and false
positives per image at an operating score (`operating_score`, by default the deployment's own threshold), and draws
the worst images. With `labels`, a deploy's or validation's own frames are scored against them on the host.
"""


from typing import Annotated, Literal

from pydantic import Field

from sdk.spec.bounds import Frozen, Int, Real

CATEGORY_NAME = Annotated[str, Field(min_length=1, max_length=200)]


class Evaluation(Frozen):
    # YOLOX's own COCO evaluation keeps candidates from 0.01 and runs per-class NMS at IoU 0.65; Ultralytics' from 0.001.
    score_threshold: Real("evaluation: candidates scoring below are dropped (a low floor: 0.001 to 0.01)", ge=0, le=1) = 0.001
    iou_threshold: Real("evaluation: non-maximum suppression overlap above which the lower score goes", gt=0, le=1) = 0.65
    max_detections: Int(1, 1000, "evaluation: detections kept per image, highest scores first (COCO scores 100)") = 100
    nms: Literal["per_class", "class_agnostic"] = "per_class"
    # The figures beside COCO's: per class the recall reached at this precision; the recall and the false positives per
    # image at the operating score (null: the deployment's postprocess.score_threshold); the images drawn in the report.
    recall_at_precision: Real("evaluation: the precision at which each class's recall is reported", gt=0, le=1) = 0.9
    operating_score: (
        Real(
            "evaluation: the score from which a detection counts for recall and false positives per image; null: postprocess.score_threshold",
            ge=0,
            le=1,
        )
        | None
    ) = None
    worst_images: Int(0, 100, "evaluation: images with the most missed and false boxes drawn in the report (0: none)") = 8
    # Model class name -> label category name; null: the class is left out of the scores (it has no category).
    classes: Annotated[dict[CATEGORY_NAME, CATEGORY_NAME | None], Field(max_length=10_000)] = {}
    # The labels of the frames a deploy or `sdk validate` runs (COCO detection JSON, an Ultralytics dataset YAML, a KITTI
    # label_2 folder or a MOTChallenge gt.txt, relative to this file's folder; read on the host only): the run's own
    # detections are scored against them and the budgets on labels judged. `images`: the labelled images' folder (COCO:
    # default images/ beside the JSON, else its folder; KITTI: image_2/ beside label_2; MOTChallenge: the sequence's img1/).
    labels: Annotated[str, Field(min_length=1, max_length=4096)] | None = None
    images: Annotated[str, Field(min_length=1, max_length=4096)] | None = None


__all__ = ["Evaluation"]
