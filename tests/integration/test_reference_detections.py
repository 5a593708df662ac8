"""The cut, the anchors and the decoding are right: prepared model + our preprocessing + our SSD
postprocessing reproduce the whole original graph (its own TF preprocessing, Loops and NMS) on
real frames of vtest.avi."""

from __future__ import annotations

import cv2
import onnxruntime as ort
import pytest

from tests.example_detector import detect_frames

# Every 26th frame over the whole clip: 30 frames hold about 115 detections above the report threshold (the whole clip's
# crowd, near and far). A wrong anchor, box coding or preprocessing moves most boxes on every frame, and the matches here
# agree to IoU 0.99997 and a score to 2e-5 against limits of 0.9 and 0.03: more frames of the same video add no power.
FRAMES = 30
REPORT_THRESHOLD = 0.5
# One thread on both sides: the numbers are ONNX Runtime's either way, and on a busy 2-core machine a second thread
# costs more CPU (spinning, waiting) than it saves; the original graph alone took 88 ms of CPU a frame on two, 37 on one.
THREADS = 1


def iou(a, b) -> float:
    x1, y1, x2, y2 = max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3])
    inter = max(0.0, x2 - x1) * max(0.0, y2 - y1)
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def original_detections(session, bgr):
    n, boxes, scores, _ = session.run(None, {"image_tensor:0": cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)[None]})
    h, w = bgr.shape[:2]
    found = []
    for k in range(int(n[0])):
        y1, x1, y2, x2 = boxes[0, k]
        found.append((float(scores[0, k]), [x1 * w, y1 * h, x2 * w, y2 * h]))
    return found


@pytest.mark.slow
def test_prepared_pipeline_reproduces_the_whole_graph(example_pipeline, prepared_example, detector_path, video_path):
    spec = example_pipeline.spec
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = THREADS
    original = ort.InferenceSession(str(detector_path), options, providers=["CPUExecutionProvider"])
    capture = cv2.VideoCapture(str(video_path))
    total = int(capture.get(cv2.CAP_PROP_FRAME_COUNT))
    capture.release()
    wanted = set(range(0, total, total // FRAMES)[:FRAMES])
    checked = matched = 0
    worst_score, worst_iou = 0.0, 1.0
    for index, bgr, found in detect_frames(spec, prepared_example, video_path, wanted, threads=THREADS):
        ours = [(d.score, list(d.box)) for d in found]
        theirs = original_detections(original, bgr)
        checked += 1
        used = set()
        for score, box in theirs:
            if score < REPORT_THRESHOLD:
                continue
            candidates = [(iou(box, b), k) for k, (s, b) in enumerate(ours) if k not in used]
            best_iou, k = max(candidates, default=(0.0, -1))
            assert best_iou >= 0.9, f"frame {index}: original detection {score:.3f} {box} has no match (best IoU {best_iou:.3f})"
            assert abs(ours[k][0] - score) <= 0.03, f"frame {index}: score {ours[k][0]:.3f} vs original {score:.3f}"
            used.add(k)
            matched += 1
            worst_iou = min(worst_iou, best_iou)
            worst_score = max(worst_score, abs(ours[k][0] - score))
        for k, (score, box) in enumerate(ours):
            if score >= REPORT_THRESHOLD and k not in used:
                # Ours above 0.5 must exist in the original (a score on the edge may sit just below 0.5 there).
                near = [s for s, b in theirs if iou(box, b) >= 0.9]
                assert near and max(near) >= REPORT_THRESHOLD - 0.03, f"frame {index}: extra detection {score:.3f} {box}"
    assert checked == FRAMES and checked >= 30
    assert matched >= 100, f"only {matched} detections compared: the test would prove little"
    print(f"{checked} frames, {matched} detections matched; worst IoU {worst_iou:.6f}, worst score difference {worst_score:.6f}")
