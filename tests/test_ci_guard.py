"""CI installs what the tests need (.ci/run) and says so with SDK_CI=1: there, a tool it installs that is missing fails
here, instead of its tests skipping one by one unnoticed (without SDK_CI the tests that need it skip and say why)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CI = REPO / ".ci" / "run"
# What .ci/run installs, as the tests look for it: (the command, the apt package that brings it).
TOOLS = (
    ("ffmpeg", "ffmpeg"),
    ("sshd", "openssh-server"),
    ("ip", "iproute2"),
    ("systemd-analyze", "systemd"),
    ("mender", "mender-client"),
    ("mender-artifact", "mender-artifact"),
    ("cmake", "cmake"),
    ("g++", "g++"),
    ("aarch64-linux-gnu-g++", "g++-aarch64-linux-gnu"),
    ("qemu-aarch64-static", "qemu-user-static"),
    ("chromium", "chromium"),
)


def test_every_tool_of_the_guard_is_installed_by_ci():
    """The list above and .ci/run name the same packages: a tool dropped from CI fails here, not silently."""
    script = CI.read_text()
    assert "export SDK_CI=1" in script
    missing = [package for _, package in TOOLS if package not in script]
    assert not missing, f".ci/run does not install {missing}"


@pytest.mark.skipif(os.environ.get("SDK_CI") != "1", reason="CI's guard: runs only under SDK_CI=1 (set by .ci/run)")
def test_ci_has_every_tool_it_installs_and_runs_in_a_virtual_environment():
    path = os.environ.get("PATH", "") + os.pathsep + "/usr/sbin:/sbin"
    missing = [f"{tool} (apt-get install {package})" for tool, package in TOOLS if shutil.which(tool, path=path) is None]
    assert not missing, "CI lacks what .ci/run installs: " + ", ".join(missing)
    assert sys.prefix != sys.base_prefix, "CI's tests run in the virtual environment .ci/run makes (PEP 668: Debian's python3 refuses pip install)"
