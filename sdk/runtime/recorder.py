"""Per-frame timestamps and output digests in preallocated arrays: recording a frame allocates nothing."""

from __future__ import annotations

import numpy as np

# Columns: when the frame was captured, when the pipeline took it, and when each stage ended.
STAGES = ("preprocess", "infer", "postprocess", "sink")
CAPTURE, START = 0, 1
COLUMNS = 2 + len(STAGES)


class LatencyRecorder:
    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._times = np.zeros((capacity, COLUMNS), np.int64)
        self._frames = np.zeros(capacity, np.int64)
        self._digests = np.zeros(capacity, np.uint64)  # 64-bit hash of each frame's detections
        # np.zeros maps untouched pages that the kernel commits on first write: the ring would then
        # grow the process by 64 bytes a frame until it wraps (4 MB over 36 minutes at 30 fps: the
        # soak's "leak"). Writing every page now makes the memory resident up front.
        for array in (self._times, self._frames, self._digests):
            array.fill(0)
        self.count = 0  # frames recorded in all (the array keeps the newest `capacity`)

    def record(self, frame_index: int, marks: list[int], digest: int = 0) -> None:
        row = self.count % self.capacity
        self._times[row] = marks
        self._frames[row] = frame_index
        self._digests[row] = digest
        self.count += 1

    def rows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(frame indices, timestamps, digests) of the kept frames, oldest first."""
        n = min(self.count, self.capacity)
        if self.count <= self.capacity:
            return self._frames[:n].copy(), self._times[:n].copy(), self._digests[:n].copy()
        start = self.count % self.capacity
        order = np.r_[start : self.capacity, 0:start]
        return self._frames[order], self._times[order], self._digests[order]

    def latencies_ms(self, skip: int = 0) -> dict[str, np.ndarray]:
        """Per stage and end to end, in milliseconds, without the first `skip` kept frames."""
        _, times, _ = self.rows()
        return latencies_from_times(times[skip:])


def latencies_from_times(times: np.ndarray, stages: tuple[str, ...] = STAGES) -> dict[str, np.ndarray]:
    """Stage latency = difference of consecutive marks; queue = pickup - capture; end to end = last mark - capture."""
    result: dict[str, np.ndarray] = {}
    previous = times[:, START]
    for i, stage in enumerate(stages):
        end = times[:, START + 1 + i]
        result[stage] = (end - previous) / 1e6
        previous = end
    result["queue"] = (times[:, START] - times[:, CAPTURE]) / 1e6
    result["end_to_end"] = (times[:, -1] - times[:, CAPTURE]) / 1e6
    return result
