"""The real detector's output over the real clip (vtest.avi, a pedestrian street scene): the detections the tracker
tests feed to ours and to the reference tracker, stored in the repository (tests/sdk/track/clip_detections.py says
why and how they are made; test_bytetrack.py checks them against the detector)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.sdk.track.clip_detections import Frame, load


@pytest.fixture(scope="session")
def clip_detections() -> list[Frame]:
    return load()


def fill(detections, frame: Frame, keep=None) -> None:
    """Put a frame's detections (or the `keep` rows of them) into a Detections, as postprocess leaves them."""
    rows = np.arange(len(frame.scores)) if keep is None else np.asarray(keep, np.intp)
    n = len(rows)
    detections.boxes[:n] = frame.boxes[rows]
    detections.scores[:n] = frame.scores[rows]
    detections.class_ids[:n] = 0
    detections.count = n
