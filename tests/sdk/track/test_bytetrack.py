"""ByteTrack on the real detector's output over the real clip: ids stable through an occlusion, ages and states honest.
The detections are stored (tests/sdk/track/clip_detections.py); the first test checks them against the detector."""

from __future__ import annotations

import numpy as np

from sdk.postprocess.detections import TRACK_STATES, Detections
from sdk.spec.track import Track
from sdk.track import create_tracker
from tests.sdk.track.clip_detections import FRAMES, detect
from tests.sdk.track.conftest import fill

GAP = 6  # frames the person is hidden (0.6 s at the clip's 10 fps)
SAMPLE = range(0, FRAMES, 88)  # ten frames from the first to the last second of the clip


def test_the_stored_detections_are_the_detectors_on_a_sample_of_frames(example_pipeline, prepared_example, video_path, clip_detections):
    """What the detector gives now on frames spread over the clip is what is stored: every detection, its box within
    half a pixel and its score within 0.001 (the arithmetic of another CPU's kernels may differ in the last bits). A
    detection within 0.01 of the score threshold may be on one side only, for the same reason."""
    spec = example_pipeline.spec
    edge = spec.postprocess.score_threshold + 0.01
    live = detect(spec, prepared_example, video_path, SAMPLE)
    hint = "the detector's output changed: write them again (python -m tests.sdk.track.clip_detections)"
    compared = 0
    for index in SAMPLE:
        stored, now = clip_detections[index], live[index]
        for a, b in ((stored, now), (now, stored)):
            for box, score in zip(a.boxes, a.scores, strict=True):
                near = (np.abs(b.boxes - box).max(axis=1) <= 0.5) & (np.abs(b.scores - score) <= 1e-3)
                assert near.any() or score < edge, f"frame {index}: {box} {score:.4f} is on one side only; {hint}"
                compared += 1
    assert compared >= 2 * 30, compared  # people on most of the sampled frames: the comparison covers real detections


def run(frames, spec: Track, hide: dict[int, set[int]] | None = None) -> list[dict[int, tuple[int, int, str]]]:
    """Per frame: detection row -> (track id, age, state); `hide` drops rows of frames (an occluded person)."""
    detections = Detections(100, ("person",))
    out = []
    with create_tracker(spec) as tracker:
        for index, frame in enumerate(frames):
            keep = [r for r in range(len(frame.scores)) if r not in (hide or {}).get(index, ())]
            fill(detections, frame, keep)
            tracker.update(detections)
            n = detections.count
            states = [TRACK_STATES[s] for s in detections.track_states[:n]]
            out.append({row: (int(detections.track_ids[i]), int(detections.track_ages[i]), states[i]) for i, row in enumerate(keep)})
    return out


def longest_track(result) -> tuple[int, list[tuple[int, int]]]:
    """The id seen on most consecutive frames, and its (frame, row) per frame."""
    runs: dict[int, list[tuple[int, int]]] = {}
    for index, frame in enumerate(result):
        for row, (track_id, _, _) in frame.items():
            if track_id >= 0:
                runs.setdefault(track_id, []).append((index, row))
    best = max(runs, key=lambda k: len(runs[k]) if [f for f, _ in runs[k]] == list(range(runs[k][0][0], runs[k][-1][0] + 1)) else 0)
    return best, runs[best]


def test_an_id_survives_a_short_occlusion_and_nothing_else_changes(clip_detections):
    spec = Track()
    plain = run(clip_detections, spec)
    track_id, path = longest_track(plain)
    assert len(path) >= 60, path  # a person walking through the scene, seen on every frame for 6 s or more
    start = len(path) // 2
    hidden = path[start : start + GAP]
    occluded = run(clip_detections, spec, hide={frame: {row} for frame, row in hidden})
    after_frame, after_row = path[start + GAP]
    before_frame, before_row = path[start - 1]
    assert occluded[before_frame][before_row][0] == track_id
    assert occluded[after_frame][after_row][0] == track_id  # the same id, GAP frames later, from the predicted box
    assert occluded[after_frame][after_row][2] == "tracked"
    assert occluded[after_frame][after_row][1] == plain[after_frame][after_row][1]  # the age counts the frames it was lost
    # Every other detection of the clip has the same id, age and state as without the occlusion.
    for index, (a, b) in enumerate(zip(plain, occluded, strict=True)):
        assert {r: v for r, v in a.items() if r in b} == b, index


def test_a_gap_longer_than_max_lost_frames_ends_the_track(clip_detections):
    spec = Track(max_lost_frames=GAP - 2)
    plain = run(clip_detections, spec)
    track_id, path = longest_track(plain)
    start = len(path) // 2
    occluded = run(clip_detections, spec, hide={frame: {row} for frame, row in path[start : start + GAP]})
    after_frame, after_row = path[start + GAP]
    assert occluded[path[start - 1][0]][path[start - 1][1]][0] == track_id
    assert occluded[after_frame][after_row][0] != track_id  # the track ended after max_lost_frames: the person is someone new
    assert all(v[0] != track_id for frame in occluded[path[start][0] :] for v in frame.values())  # and its id never comes back


def test_ages_grow_by_one_a_frame_and_states_follow_the_rules(clip_detections):
    spec = Track()
    result = run(clip_detections, spec)
    seen: dict[int, tuple[int, int]] = {}  # id -> (frame, age)
    ids_in_order = []
    for index, frame in enumerate(result):
        ids = [v[0] for v in frame.values() if v[0] >= 0]
        assert len(ids) == len(set(ids)), index  # one detection per track and frame
        for row, (track_id, age, state) in frame.items():
            score = clip_detections[index].scores[row]
            if state == "tracked":
                assert track_id >= 0 and age >= spec.min_hits
                if track_id in seen:
                    last_frame, last_age = seen[track_id]
                    assert age - last_age == index - last_frame  # frames lost count too
                else:
                    ids_in_order.append(track_id)
                seen[track_id] = (index, age)
            elif state == "tentative":
                assert track_id == -1 and 1 <= age < spec.min_hits
            else:
                assert state == "untracked" and track_id == -1 and age == 0
                assert score < spec.new_track_score  # a high-score detection never goes untracked: it starts a track
    assert ids_in_order == list(range(1, len(ids_in_order) + 1))  # ids given in order, never reused
    assert len(seen) >= 10


def test_two_runs_give_the_same_tracks_and_the_digest_covers_them(clip_detections):
    digests = []
    for _ in range(2):
        detections = Detections(100, ("person",))
        with create_tracker(Track()) as tracker:
            frame_digests = []
            for frame in clip_detections[:200]:
                fill(detections, frame)
                frame_digests.append(tracker.update(detections).digest())
        digests.append(frame_digests)
    assert digests[0] == digests[1]
    untracked = Detections(100, ("person",))
    fill(untracked, clip_detections[199])
    assert untracked.digest() != digests[0][-1]  # the ids are part of the frame's output


def test_no_track_section_no_tracker():
    assert create_tracker(None) is None
    detections = Detections(4, ("person",))
    detections.count = 1
    (detection,) = list(detections)
    assert detection.track_id is None and detection.track_age is None and detection.track_state is None
