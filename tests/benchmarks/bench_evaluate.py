"""Benchmark: COCO's evaluator on generated detections, pycocotools against faster-coco-eval, and `sdk evaluate` end to end.

1. The evaluator: N generated images of COCO-sized scenes (7 labels an image over 80 categories, sizes drawn from
   small to large; detections: 80 % of the labels found with jittered boxes, plus false positives, 100 an image
   at most), scored by pycocotools' COCOeval (evaluate + accumulate + summarize) and by faster-coco-eval's
   COCOeval_faster (the same API in C++), best of the rounds; the stats of both printed side by side.
2. The bootstrap over images (tools/evaluate/metrics.py: 2000 draws, fewer on a large set) on the same detections.
3. The example end to end: `sdk evaluate pipelines/yolox_nano.yaml` on its 29 labelled images (model prepared
   from the cache; the detection run, the scoring, the bootstrap), wall time.

    python tests/benchmarks/bench_evaluate.py [--images 5000] [--rounds 3] [--smoke]

faster-coco-eval is a reference package (pip install --no-deps -r tests/reference-packages.txt); without it that
column says so. `--smoke`: 5 images, one round, 100 draws; the example on 4 of its 29 labelled images with 100 draws
(once: no run that prepares the model first).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tools.evaluate import metrics  # noqa: E402


def generated(images: int, seed: int = 0) -> tuple[dict, list[dict]]:
    rng = np.random.default_rng(seed)
    truth = {"images": [], "categories": [{"id": c, "name": f"c{c}"} for c in range(1, 81)], "annotations": []}
    found = []
    for image in range(1, images + 1):
        truth["images"].append({"id": image, "width": 640, "height": 480})
        for _ in range(7):
            w, h = np.exp(rng.uniform(np.log(8), np.log(400), 2))
            x, y = rng.uniform(0, 640 - w), rng.uniform(0, 480 - h)
            category = int(rng.integers(1, 81))
            annotation = {"id": len(truth["annotations"]) + 1, "image_id": image, "category_id": category, "bbox": [x, y, w, h]}
            truth["annotations"].append(annotation | {"area": float(w * h), "iscrowd": 0})
            if rng.random() < 0.8:
                jitter = rng.normal(0, 0.08, 4) * [w, h, w, h]
                box = [x + jitter[0], y + jitter[1], max(1.0, w + jitter[2]), max(1.0, h + jitter[3])]
                found.append({"image_id": image, "category_id": category, "bbox": box, "score": float(rng.uniform(0.2, 1.0))})
        for _ in range(int(rng.integers(0, 60))):
            w, h = rng.uniform(10, 200, 2)
            box = [float(rng.uniform(0, 440)), float(rng.uniform(0, 280)), float(w), float(h)]
            found.append({"image_id": image, "category_id": int(rng.integers(1, 81)), "bbox": box, "score": float(rng.uniform(0.001, 0.6))})
    return truth, found


def faster(truth: dict, found: list[dict]) -> np.ndarray | None:
    try:
        from faster_coco_eval import COCO, COCOeval_faster
    except ImportError:
        return None
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(truth)
        evaluation = COCOeval_faster(gt, gt.loadRes(found), "bbox", print_function=lambda *a: None)
        evaluation.evaluate()
        evaluation.accumulate()
        evaluation.summarize()
    return np.asarray(evaluation.stats[:12])


def best(call, rounds: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(rounds):
        started = time.perf_counter()
        result = call()
        times.append(time.perf_counter() - started)
    return min(times), result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--images", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    images, rounds, draws = (5, 1, 100) if args.smoke else (args.images, args.rounds, 2000)
    truth, found = generated(images)
    ids, categories = [i["id"] for i in truth["images"]], list(range(1, 81))
    print(f"{images} generated images, {len(truth['annotations'])} labels, {len(found)} detections")
    seconds, evaluation = best(lambda: metrics.coco_eval(truth, found, categories, ids), rounds)
    print(f"pycocotools COCOeval:           {seconds:8.2f} s   mAP {evaluation.stats[0]:.6f}  AP50 {evaluation.stats[1]:.6f}")
    seconds, stats = best(lambda: faster(truth, found), rounds)
    if stats is None:
        print("faster-coco-eval COCOeval_faster: not installed (pip install --no-deps -r tests/reference-packages.txt)")
    else:
        same = float(np.abs(stats - evaluation.stats[:12]).max())
        print(f"faster-coco-eval COCOeval_faster:{seconds:8.2f} s   mAP {stats[0]:.6f}  AP50 {stats[1]:.6f}  (largest stat difference {same:.2e})")
    affordable = metrics.affordable_draws(draws, len(found))
    seconds, _ = best(lambda: metrics.bootstrap(evaluation, affordable), rounds)
    print(f"bootstrap over images, {affordable} draws: {seconds:8.2f} s")
    from tools.evaluate.run import Request, evaluate

    example = REPO / "pipelines" / "yolox_nano.yaml"
    labels, images = REPO / "pipelines" / "assets" / "coco_cc_by" / "instances.json", None
    if args.smoke:  # 4 of the 29 labelled images (their labels, every category), from the same folder
        whole = json.loads(labels.read_text())
        kept = whole["images"][:4]
        ids = {image["id"] for image in kept}
        labels, images = Path(tempfile.mkdtemp()) / "instances.json", labels.parent / "images"
        labels.write_text(json.dumps({**whole, "images": kept, "annotations": [a for a in whole["annotations"] if a["image_id"] in ids]}))
    else:  # the smoke mode's one evaluation prepares the model itself
        evaluate(Request(example, labels, draws=0))  # the model prepared into the cache once
    seconds, report = best(lambda: evaluate(Request(example, labels, images, draws=draws)), rounds)
    count = len(json.loads(labels.read_text())["images"])
    print(f"sdk evaluate of the example ({count} images, {draws} draws): {seconds:6.2f} s   mAP {report['map50_95']:.4f}  AP50 {report['map50']:.4f}")


if __name__ == "__main__":
    main()
