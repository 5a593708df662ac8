"""Damaged recordings with a known truth, cut with FFmpeg from the real one into a test's own folder."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

CLIP_FRAMES = 60  # 6 s at 10 fps, 192 x 144, every frame a key frame: a cut damages nothing around it
DROP_20_TO_29 = ("-c", "copy", "-bsf:v", "noise=drop=between(n\\,20\\,29)")  # the packets of frames 20 to 29, gone


def ffmpeg_or_skip() -> str:
    """The ffmpeg on PATH; without one the test skips, except under CI (SDK_CI=1, set by .ci/run, which installs it):
    there a missing ffmpeg fails, so that these tests never stop running unnoticed."""
    found = shutil.which("ffmpeg")
    if found is None:
        why = "ffmpeg is needed to cut the damaged recordings: apt-get install ffmpeg (or brew install ffmpeg)"
        if os.environ.get("SDK_CI") == "1":
            pytest.fail(f"{why}; CI (SDK_CI=1) installs it, so its absence is a CI fault", pytrace=False)
        pytest.skip(why)
    return found


def make(out: Path, *args: str) -> Path:
    """`ffmpeg ARGS OUT`, checked."""
    subprocess.run([ffmpeg_or_skip(), "-hide_banner", "-loglevel", "error", "-y", *args, str(out)], check=True, timeout=120)
    return out


def clip(folder: Path, video: Path) -> Path:
    """The first 60 frames of `video`, intra-only MPEG-4 part 2 in AVI (its header counts 60)."""
    args = ("-frames:v", str(CLIP_FRAMES), "-vf", "scale=192:144", "-c:v", "mpeg4", "-g", "1", "-q:v", "4")
    return make(folder / "clip.avi", "-i", str(video), *args)


def cut_clip(folder: Path, video: Path, name: str = "cut.avi") -> Path:
    """The clip without frames 20 to 29 (their packets dropped, the others as they were): 50 frames, 10 lost."""
    return make(folder / name, "-i", str(clip(folder, video)), *DROP_20_TO_29)
