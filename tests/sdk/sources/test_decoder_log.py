"""The FFmpeg log tap never costs a frame its wait once something else holds fd 2 (a test harness, a log rotation),
and never loses the last lines of a process that exits with it in place.

Found when pytest's capture replaced fd 2 under a calibration: every frame's checkpoint waited its full timeout; and
when a health check on a loaded machine saw a runtime exit with status 1 and an empty stderr (its `error:` line was
still in the pipe when the interpreter stopped the pump)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SCRIPT = """
import os, time
from sdk.sources.decoder_log import DecoderLog
log = DecoderLog.acquire()
started = time.monotonic()
log.checkpoint(timeout_s=5.0)
print("in_place", log.in_place(), round(time.monotonic() - started, 3))
os.dup2(os.open(os.devnull, os.O_WRONLY), 2)  # another owner of fd 2
started = time.monotonic()
for _ in range(10):
    log.checkpoint(timeout_s=5.0)
print("displaced", log.in_place(), round(time.monotonic() - started, 3))
"""


def test_checkpoints_do_not_wait_once_fd_2_is_someone_elses():
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    (first, second) = [line.split() for line in done.stdout.splitlines()]
    assert first[:2] == ["in_place", "True"] and float(first[2]) < 5.0  # the pump answered: no timeout
    assert second[:2] == ["displaced", "False"] and float(second[2]) < 1.0  # ten checkpoints, none waited


LAST_WORDS = """
import sys, time
from sdk.sources.decoder_log import DecoderLog
forward = DecoderLog._forward
def starved(self, data):  # the pump thread of a loaded machine: scheduled late
    time.sleep(0.5)
    forward(self, data)
DecoderLog._forward = starved
DecoderLog.acquire()  # a source opened and never closed: the error is raised past it
sys.stderr.write("error: cannot open broken.avi\\nhint: check the file\\n")
sys.exit(1)
"""


def test_a_process_exiting_with_the_tap_in_place_still_says_its_last_words():
    done = subprocess.run([sys.executable, "-c", LAST_WORDS], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.splitlines() == ["error: cannot open broken.avi", "hint: check the file"]
