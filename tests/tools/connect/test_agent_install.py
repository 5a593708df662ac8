"""The first contact's device agent unpacks itself from the very stream it then serves requests on: whatever the
tar's length, the first request after it is read as a request, never the tar's padding. The case that broke it:
the archive's two end blocks straddle a 10 KiB record, and tarfile stops reading after the first of them."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile

import pytest

from tools.connect.session_ssh import INSTALL_AND_SERVE, sized, tar_bytes
from tools.connect.ssh_agent import agent_command
from tools.release.bundle import runtime_files


def end_of_members(files: dict) -> int:
    """Where the archive's end marker starts in `tar_bytes(files)`."""
    with tarfile.open(fileobj=io.BytesIO(tar_bytes(files))) as tar:
        tar.getmembers()
        return tar.offset


def padded(blocks: int) -> dict:
    return {**runtime_files(), "sdk/zz_padding.txt": b"x" * (512 * blocks)}


def straddling() -> dict:
    """Files whose archive's first end block is the last block of a record: its second end block and the rest of the
    padding record follow in a record tarfile never reads."""
    for blocks in range(21):
        files = padded(blocks)
        if end_of_members(files) % tarfile.RECORDSIZE == tarfile.RECORDSIZE - tarfile.BLOCKSIZE:
            return files
    raise AssertionError("no padding makes the end marker straddle a record")


@pytest.mark.parametrize("case", ["straddling", "small", "aligned"])
def test_the_agent_installs_then_serves_whatever_the_tars_length(tmp_path, case):
    files = straddling() if case == "straddling" else padded(1 if case == "small" else 0)
    root, agent = tmp_path / "root", tmp_path / "root" / "agent" / "v1"
    agent.parent.mkdir(parents=True)
    request = json.dumps({"argv": ["status"]}).encode() + b"\n"
    done = subprocess.run(
        agent_command(str(agent), sys.executable, str(root), INSTALL_AND_SERVE),
        input=sized(tar_bytes(files)) + request,
        capture_output=True,
        timeout=120,
    )
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert answers[0] == {"install": True} and answers[1].get("ready") is True, done.stderr
    assert "ok" in answers[2] and answers[2]["ok"]["committed"] is None, answers[2]
    assert (agent / "sdk" / "agent" / "serve.py").is_file() and (agent / "sdk" / "zz_padding.txt").is_file()
