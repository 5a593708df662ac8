"""A real OpenSSH server on loopback for the deploy-over-SSH tests (Debian's openssh-server)."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from sdk.errors import TargetError
from tools.targets.sim import SimServer, find_sshd


def _require_sshd() -> None:
    try:
        find_sshd()
    except TargetError:
        if os.environ.get("CI"):
            pytest.fail("CI must install openssh-server (.ci/run does)")
        pytest.skip("sshd is not installed here (apt-get install openssh-server)")


@pytest.fixture(scope="session")
def sim_server(tmp_path_factory):
    _require_sshd()
    server = SimServer(tmp_path_factory.mktemp("sim")).start()
    yield server
    server.stop()


@pytest.fixture()
def ssh_target(sim_server, tmp_path, monkeypatch):
    """Target `sim` on the shared server, with a remote root of its own for this test."""
    targets, state, root = tmp_path / "targets", tmp_path / "state", tmp_path / "remote"
    root.mkdir()
    sim_server.write_target(targets / "sim.yaml", remote_root=str(root))
    monkeypatch.setenv("SDK_TARGETS_DIR", str(targets))
    monkeypatch.setenv("SDK_STATE_DIR", str(state))

    def write(name: str = "sim", **overrides) -> Path:
        return sim_server.write_target(targets / f"{name}.yaml", **{"remote_root": str(root), **overrides})

    return SimpleNamespace(name="sim", root=root, targets=targets, state=state, server=sim_server, write=write)


def _in_process_sdk(capture, monkeypatch):
    import subprocess

    from tools.cli import run

    monkeypatch.setenv("COLUMNS", "400")

    def call(*args: str) -> subprocess.CompletedProcess:
        capture.readouterr()  # what earlier steps printed is not this command's
        try:
            code = run(list(args))
        except SystemExit as exc:  # usage errors
            code = exc.code
        out, err = capture.readouterr()
        return subprocess.CompletedProcess(["sdk", *args], code, out, err)

    return call


@pytest.fixture()
def sdk(capsys, monkeypatch):
    """`sdk ARGS` in this process (tools.cli.run, the CLI's own error boundary), for tests whose subject is not the
    process boundary: the commands reach the device through their session (a local agent process, or SSH) either way,
    and a fresh interpreter per call only adds 2-3 CPU-seconds of imports. Returns a CompletedProcess (exit code,
    stdout, stderr); COLUMNS=400 so that printed lines are never wrapped."""
    return _in_process_sdk(capsys, monkeypatch)


@pytest.fixture()
def sdk_fd(capfd, monkeypatch):
    """`sdk` with file-descriptor capture, for commands that read video on the host (the FP32 reference of an accuracy
    budget): the decoder's log pump redirects fd 2, which Python-level capture does not have."""
    return _in_process_sdk(capfd, monkeypatch)
