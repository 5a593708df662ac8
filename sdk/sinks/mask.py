"""A segment decoder's masks as lossless PNGs, one per written frame: `PATH/NNNNNN.png` (frame index), 8-bit class
indices in source pixels (255 outside the crop). The newest `keep` are kept; older ones are deleted as new ones come.
A file is written under a temporary name and renamed: a reader never sees half a PNG. A folder removed
under the sink is made again."""

from __future__ import annotations

import os
from collections import deque
from pathlib import Path

from sdk.frame import Frame
from sdk.sinks.files import OutputStats, recreate_folder


class MaskSink:
    name = "mask"

    def __init__(self, folder: Path, *, every: int = 1, keep: int = 10_000) -> None:
        self.folder = Path(folder)
        self.every, self.keep = every, keep
        self.stats = OutputStats(self.folder.name)
        self._written: deque[Path] = deque()

    def open(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)

    def write(self, frame: Frame, result) -> None:
        import cv2

        mask = getattr(result, "mask", None)
        if mask is None or frame.index % self.every:
            return
        final = self.folder / f"{frame.index:06d}.png"
        partial = final.with_name(f".{final.name}.partial.png")
        if not cv2.imwrite(str(partial), mask) and (recreate_folder(self.folder) is not None or not cv2.imwrite(str(partial), mask)):
            self.stats.lost(f"cannot write {final.name}")  # the folder was removed and cannot be made again, or the disk is full
            return
        os.replace(partial, final)
        self._written.append(final)
        while len(self._written) > self.keep:
            self._written.popleft().unlink(missing_ok=True)
        self.stats.ok()

    def close(self) -> None:
        pass

    def describe(self) -> dict:
        return {"output": self.folder.name, **self.stats.as_dict()}
