"""`sdk targets check` against a real OpenSSH server: each thing that would block a deploy is one `blocked` line
and exit 1; a target that can be deployed to exits 0. The facts' meaning is also checked without a device."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tools.connect.check_target import BLOCKED, NOTE, OK, WARN, CheckResult, Finding, check_facts
from tools.targets.sim import free_port

REPO = Path(__file__).resolve().parents[3]
CLI = [sys.executable, "-c", "from tools.cli import main; main()"]


def check(sdk, name: str = "sim") -> subprocess.CompletedProcess:
    """`sdk targets check NAME` in this process (the CLI's own error boundary; ssh_target set the environment): the
    device's answers come over real SSH either way. The example's checks below run the command as its own process."""
    return sdk("targets", "check", name)


def statuses(output: str) -> dict[str, str]:
    """`  blocked  login: ...` -> {"login": "blocked"}"""
    found = {}
    for line in output.splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2 and parts[0] in (OK, NOTE, WARN, BLOCKED) and ":" in parts[1]:
            found[parts[1].split(":", 1)[0]] = parts[0]
    return found


def test_a_deployable_target_passes_every_check(ssh_target, sdk):
    done = check(sdk)
    assert done.returncode == 0, done.stdout + done.stderr
    found = statuses(done.stdout)
    for what in ("reachable", "host key", "login", "python", "remote root", "free disk", "runtime modules"):
        assert found[what] == OK, done.stdout
    assert found["TensorRT/CUDA"] == NOTE  # linux-generic without TensorRT: the CPU backend, not a problem
    assert done.stdout.strip().splitlines()[-1] == "nothing blocks a deploy to sim"
    assert not list(ssh_target.root.iterdir())  # read-only: nothing was created on the device


def test_an_unreachable_target_is_blocked(ssh_target, sdk):
    ssh_target.write(port=free_port())  # nothing listens there
    done = check(sdk)
    # What this host sees is reported too: the pin in known_hosts is for the old port.
    assert done.returncode == 1 and statuses(done.stdout) == {"key file": OK, "host key pin": BLOCKED, "reachable": BLOCKED}
    assert "hint: is the device on" in done.stdout and "holds no key for [127.0.0.1]:" in done.stdout
    assert done.stdout.strip().splitlines()[-1] == "2 problem(s) block a deploy to sim: host key pin, reachable"


def test_a_changed_host_key_is_blocked_before_the_login(ssh_target, sdk, tmp_path):
    other = tmp_path / "other_host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    known_hosts = tmp_path / "known_hosts"
    kind, key = other.with_suffix(".pub").read_text().split()[:2]
    known_hosts.write_text(f"[127.0.0.1]:{ssh_target.server.port} {kind} {key}\n")
    ssh_target.write(host_key={"known_hosts": str(known_hosts)})
    done = check(sdk)
    assert done.returncode == 1 and statuses(done.stdout) == {"key file": OK, "host key pin": OK, "reachable": OK, "host key": BLOCKED}
    assert "HOST KEY MISMATCH" in done.stdout


def test_a_key_the_device_does_not_accept_is_blocked(ssh_target, sdk, tmp_path):
    stranger = tmp_path / "stranger_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    ssh_target.write(key_file=str(stranger))
    done = check(sdk)
    assert done.returncode == 1 and statuses(done.stdout) == {"key file": OK, "host key pin": OK, "reachable": OK, "login": BLOCKED}
    assert "refused the key" in done.stdout


def test_a_remote_root_that_cannot_be_created_is_blocked(ssh_target, sdk, tmp_path):
    (tmp_path / "a-file").write_text("")
    ssh_target.write(remote_root=str(tmp_path / "a-file" / "perception"))
    done = check(sdk)
    assert done.returncode == 1 and statuses(done.stdout)["remote root"] == BLOCKED
    assert f"{tmp_path / 'a-file'} is a file, not a folder" in done.stdout


def test_a_device_python_without_the_runtime_is_told_which_wheels_the_deploy_ships(ssh_target, sdk):
    device_python = "/usr/bin/python3"
    if not Path(device_python).exists() or subprocess.run([device_python, "-c", "import numpy"], capture_output=True).returncode == 0:
        pytest.skip("needs a system python3 without numpy (apt-get install python3)")
    ssh_target.write(python=device_python)
    done = check(sdk)
    assert done.returncode == 0, done.stdout
    line = next(line for line in done.stdout.splitlines() if "runtime modules:" in line)
    assert line.split()[0] == NOTE and "numpy" in line and "the deploy ships wheels for" in line


def example_copied(tmp_path: Path) -> dict:
    """targets/orin-01.yaml.example copied as it is (its address moved to a closed port here, so that nothing waits),
    with a HOME that holds no key: the environment of `sdk` for it."""
    targets, home = tmp_path / "targets", tmp_path / "home"
    targets.mkdir(parents=True)
    home.mkdir()
    text = (REPO / "targets" / "orin-01.yaml.example").read_text().replace("host: 192.168.55.1", "host: 127.0.0.1")
    (targets / "orin-01.yaml").write_text(text.replace("port: 22", f"port: {free_port()}"))
    return {**os.environ, "HOME": str(home), "SDK_TARGETS_DIR": str(targets), "SDK_STATE_DIR": str(tmp_path / "state"), "COLUMNS": "300"}


def test_the_example_copied_as_it_is_reports_what_this_host_sees_besides_unreachable(tmp_path):
    env = example_copied(tmp_path)
    done = subprocess.run([*CLI, "targets", "check", "orin-01"], cwd=REPO, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    assert done.returncode == 1 and statuses(done.stdout) == {"key file": BLOCKED, "host key pin": BLOCKED, "reachable": BLOCKED}, done.stdout
    assert f"{tmp_path}/home/.ssh/orin_deploy_ed25519 does not exist" in done.stdout and "hint: create it (ssh-keygen -t ed25519" in done.stdout
    assert "the known_hosts file" in done.stdout and "orin-01.known_hosts does not exist" in done.stdout
    assert "hint: pin the device's host key: `sdk targets add orin-01" in done.stdout
    key = Path(env["HOME"]) / ".ssh" / "orin_deploy_ed25519"  # a key others may read
    key.parent.mkdir()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    key.chmod(0o644)
    done = subprocess.run([*CLI, "targets", "check", "orin-01"], cwd=REPO, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    assert statuses(done.stdout)["key file"] == BLOCKED and "has permissions 0644: others may read it" in done.stdout
    assert f"hint: chmod 600 {key}" in done.stdout


def test_a_deploy_to_the_example_copied_as_it_is_names_the_missing_key_and_how_to_make_one(tmp_path, monkeypatch, capsys):
    from tools.cli import run

    for key, value in example_copied(tmp_path).items():
        monkeypatch.setenv(key, value)
    assert run(["deploy", "--target", "orin-01", str(REPO / "pipelines" / "pedestrian.yaml")]) == 1
    err = capsys.readouterr().err
    assert "key_file: " in err and "orin_deploy_ed25519 does not exist" in err, err
    assert "hint: create it (ssh-keygen -t ed25519 -f" in err and "sdk targets list" not in err, err


def test_targets_add_says_in_its_help_that_without_a_terminal_it_needs_the_fingerprint():
    from tools.cli import build_parser

    commands = build_parser()._subparsers._group_actions[0].choices
    add = commands["targets"]._subparsers._group_actions[0].choices["add"]
    assert "required without a terminal" in " ".join(add.format_help().split())


FACTS = {
    "python": "3.10.12",
    "python_executable": "/usr/bin/python3",
    "arch": "aarch64",
    "python_abi": "cp310",
    "missing_modules": [],
    "tensorrt": "10.3.0",
    "cuda": "12.6",
    "compute_capability": "8.7",
    "soc": "tegra234",
}
ROOT = {"existing": "/home/nvidia", "folder": True, "writable": True, "free": 40 * 10**9}


def judged(platform: str = "jetson-agx-orin", root: dict | None = None, **facts) -> dict[str, Finding]:
    result = CheckResult("orin-01", "nvidia@orin")
    check_facts(result, platform, {**FACTS, **facts}, {**ROOT, **(root or {})}, "/home/nvidia/perception")
    return {f.what: f for f in result.findings}


def test_a_jetpack_6_orin_passes():
    found = judged()
    assert {what: f.status for what, f in found.items()} == {
        "python": OK,
        "remote root": OK,
        "free disk": OK,
        "runtime modules": OK,
        "TensorRT/CUDA": OK,
    }
    assert found["TensorRT/CUDA"].detail == "TensorRT 10.3.0, CUDA driver 12.6, compute capability 8.7"


def test_an_old_python_a_full_disk_and_a_read_only_root_block():
    found = judged(python="3.8.10", root={"free": 100 * 1024**2, "writable": False})
    assert found["python"].status == BLOCKED and "needs 3.10 or newer" in found["python"].detail
    assert found["free disk"].status == BLOCKED and found["remote root"].status == BLOCKED
    assert judged(root={"free": 1024**3})["free disk"].status == WARN


def test_a_jetson_without_tensorrt_is_warned_and_a_tegra_called_generic_too():
    assert judged(tensorrt=None, cuda=None)["TensorRT/CUDA"].status == WARN
    found = judged("linux-generic")
    assert found["platform"].status == WARN and "tegra234" in found["platform"].detail
    assert judged("jetson-agx-orin", arch="x86_64")["platform"].status == WARN
