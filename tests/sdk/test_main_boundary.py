"""The device's error boundary (sdk/__main__.py): a closed output is its own error, not the file system's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_an_output_whose_reader_is_gone_is_named_as_such_not_as_the_file_system(tmp_path):
    read_end, write_end = os.pipe()
    os.close(read_end)  # the host's side gone before the command prints
    try:
        done = subprocess.run([sys.executable, "-B", "-m", "sdk", "probe", str(tmp_path)], stdout=write_end, stderr=subprocess.PIPE,
                              text=True, cwd=REPO, timeout=120)  # fmt: skip
    finally:
        os.close(write_end)
    lines = done.stderr.splitlines()
    assert done.returncode == 141, done.stderr
    assert lines[0] == "error: `probe`: the reader of its output went away before the end (a closed pipe or SSH session)"
    assert lines[1].startswith("hint: nothing on the device needs checking") and len(lines) == 2  # no traceback, no exit noise
    assert "file system" not in done.stderr


def test_a_command_read_to_the_end_exits_as_before(tmp_path):
    done = subprocess.run([sys.executable, "-B", "-m", "sdk", "probe", str(tmp_path)], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0 and done.stdout.strip().startswith("{") and done.stderr == ""
