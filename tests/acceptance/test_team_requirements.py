"""How a team writes its own safety requirements: plain asserts on what the validation measured.

These are examples beside the declared budgets; they read the same single validation run.
"""

from __future__ import annotations

import numpy as np


def test_no_frame_is_lost(acceptance):
    assert acceptance.dropped == 0
    assert acceptance.report["corrupt_frames"] == 0 and not acceptance.report["stage_errors"]


def test_inference_dominates_the_frame(acceptance):
    # A pre/post-processing regression shows up here before it eats the deadline.
    assert acceptance.stage("infer").p50_ms >= acceptance.stage("postprocess").p50_ms


def test_raw_latencies_back_the_report(acceptance):
    e2e = acceptance.latencies_ms("end_to_end")
    assert len(e2e) == acceptance.report["measured_frames"]
    assert np.max(e2e) == acceptance.end_to_end.max_ms or abs(np.max(e2e) - acceptance.end_to_end.max_ms) < 1e-3
