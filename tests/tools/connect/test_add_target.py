"""`sdk targets add` against a real OpenSSH server: the host key is fetched once (key exchange only), shown as
OpenSSH's own fingerprint, pinned only when confirmed (terminal) or equal to --fingerprint, never over a file."""

from __future__ import annotations

import getpass
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tools.connect.ssh import SshConnection
from tools.targets import resolve_target
from tools.targets.sim import SimServer

REPO = Path(__file__).resolve().parents[3]
CLI = [sys.executable, "-c", "from tools.cli import main; main()"]


def openssh_fingerprint(public_key: Path) -> str:
    """`ssh-keygen -lf`: OpenSSH's own reading, independent of the code under test."""
    return subprocess.run(["ssh-keygen", "-lf", str(public_key)], capture_output=True, text=True, check=True).stdout.split()[1]


@pytest.fixture()
def env(tmp_path) -> dict:
    return {
        **os.environ,
        "SDK_TARGETS_DIR": str(tmp_path / "targets"),
        "SDK_STATE_DIR": str(tmp_path / "state"),
        "COLUMNS": "300",
        "NO_COLOR": "1",
    }


def add_argv(name: str, server: SimServer, *extra: str) -> list[str]:
    user = getpass.getuser()  # the simulated server lets in only this user
    return [*CLI, "targets", "add", name, "--host", "127.0.0.1", "--port", str(server.port), "--user", user, "--key", str(server.client_key), *extra]


def cli(argv: list[str], env: dict) -> subprocess.CompletedProcess:
    """The CLI as its own process, without a terminal."""
    return subprocess.run(argv, cwd=REPO, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)


@pytest.fixture()
def in_process(sdk, env, monkeypatch):
    """`cli` in this process (tools.cli.run, the CLI's own error boundary; stdin is not a terminal here either): the
    host key still comes from the real server over a real key exchange. The first test and the terminal's run the
    command as its own process."""

    def call(argv: list[str], _env: dict | None = None) -> subprocess.CompletedProcess:
        for name in ("SDK_TARGETS_DIR", "SDK_STATE_DIR"):
            monkeypatch.setenv(name, env[name])
        assert argv[: len(CLI)] == CLI
        return sdk(*argv[len(CLI) :])

    return call


def test_a_script_pins_the_key_with_its_fingerprint_and_the_target_then_connects(sim_server, env, tmp_path, monkeypatch):
    fingerprint = openssh_fingerprint(sim_server.host_key.with_suffix(".pub"))
    done = cli(add_argv("orin-01", sim_server, "--fingerprint", fingerprint, "--platform", "jetson-agx-orin", "--remote-root", "/tmp/p"), env)
    assert done.returncode == 0, done.stderr
    targets = tmp_path / "targets"
    assert f"host key {fingerprint} pinned in orin-01.known_hosts" in done.stdout and "next: sdk targets check orin-01" in done.stdout
    known_hosts = (targets / "orin-01.known_hosts").read_text().split()
    assert known_hosts[0] == f"[127.0.0.1]:{sim_server.port}"
    assert known_hosts[1:] == sim_server.host_key.with_suffix(".pub").read_text().split()[:2]  # exactly the server's key
    monkeypatch.setenv("SDK_TARGETS_DIR", str(targets))
    target = resolve_target("orin-01")  # the written file validates
    assert target.spec.platform == "jetson-agx-orin" and target.spec.remote_root == "/tmp/p" and target.spec.port == sim_server.port
    with SshConnection(target) as connection:  # and the pin and the key work for a real connection
        assert connection.run(["echo", "in"]).check("echo").stdout.strip() == "in"


def test_a_different_fingerprint_is_refused_and_nothing_is_written(in_process, sim_server, env, tmp_path):
    other = "SHA256:" + "A" * 43
    done = in_process(add_argv("orin-01", sim_server, "--fingerprint", other), env)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    received = openssh_fingerprint(sim_server.host_key.with_suffix(".pub"))
    assert lines[0] == f"error: 127.0.0.1:{sim_server.port}: HOST KEY MISMATCH: expected {other}, received {received} (ssh-ed25519)"
    assert lines[1].startswith("hint: ") and len(lines) == 2
    assert not (tmp_path / "targets").exists() or not list((tmp_path / "targets").iterdir())


def test_the_fingerprint_of_another_key_type_of_the_server_is_found(in_process, tmp_path, env):
    from tools.connect.add_target import fetch_host_key, host_key_with_fingerprint

    with SimServer(tmp_path / "two-keys", extra_host_keys=("ecdsa",)) as server:
        first = fetch_host_key("127.0.0.1", server.port)
        ecdsa = openssh_fingerprint(server.folder / "ssh_host_ecdsa_key.pub")
        assert first.key_type == "ssh-ed25519"  # what a key exchange gets first
        found = host_key_with_fingerprint("127.0.0.1", server.port, ecdsa, first)
        assert found is not None and found.key_type == "ecdsa-sha2-nistp256" and found.fingerprint == ecdsa
        done = in_process(add_argv("two", server, "--fingerprint", ecdsa), env)
        assert done.returncode == 0, done.stderr
        assert (tmp_path / "targets" / "two.known_hosts").read_text().split()[1] == "ecdsa-sha2-nistp256"


def test_an_existing_target_file_is_never_overwritten(in_process, sim_server, env, tmp_path):
    targets = tmp_path / "targets"
    targets.mkdir()
    (targets / "orin-01.yaml").write_text("# mine\n")
    fingerprint = openssh_fingerprint(sim_server.host_key.with_suffix(".pub"))
    done = in_process(add_argv("orin-01", sim_server, "--fingerprint", fingerprint), env)
    assert done.returncode == 1 and f"error: {targets / 'orin-01.yaml'} already exists; not overwritten" in done.stderr
    assert (targets / "orin-01.yaml").read_text() == "# mine\n" and not (targets / "orin-01.known_hosts").exists()


def test_without_a_terminal_the_key_is_shown_but_not_pinned(in_process, sim_server, env, tmp_path):
    done = in_process(add_argv("orin-01", sim_server), env)
    fingerprint = openssh_fingerprint(sim_server.host_key.with_suffix(".pub"))
    assert done.returncode == 1
    assert f"host key of 127.0.0.1:{sim_server.port}: ssh-ed25519 {fingerprint}" in done.stdout
    assert "without a terminal; nothing was written" in done.stderr and "--fingerprint SHA256:" in done.stderr
    assert not (tmp_path / "targets" / "orin-01.yaml").exists()


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--user", "Not A User"], "--user 'Not A User'"),
        (["--key", "/nonexistent/key"], "--key /nonexistent/key: /nonexistent/key does not exist"),
        (["--remote-root", "relative/path"], "--remote-root 'relative/path'"),
        (["--fingerprint", "MD5:aa:bb"], "--fingerprint 'MD5:aa:bb': expected OpenSSH's SHA256:... form"),
    ],
)
def test_bad_values_are_refused_before_any_connection(in_process, env, tmp_path, argv, expected):
    values = {"--host": "127.0.0.1", "--port": "9", "--user": "nvidia", "--key": str(REPO / "pyproject.toml")}
    for flag, value in zip(argv[::2], argv[1::2], strict=True):
        values[flag] = value
    done = in_process([*CLI, "targets", "add", "orin-01", *[part for item in values.items() for part in item]], env)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"error: {expected}") and "cannot connect" not in done.stderr  # refused before the network (port 9 is closed)
    assert not (tmp_path / "targets").exists()


def on_a_terminal(argv: list[str], env: dict, answer: str, timeout: float = 60) -> tuple[int, str]:
    """Run argv with a pseudo-terminal as stdin and stdout; type `answer` at the confirmation prompt."""
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(REPO)
        os.execvpe(argv[0], argv, {**env, "TERM": "dumb"})
    output, typed, deadline = b"", False, time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        output += chunk
        if not typed and b"[y/N]" in output:
            os.write(fd, answer.encode() + b"\n")
            typed = True
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), output.decode(errors="replace")


def test_on_a_terminal_the_fingerprint_is_confirmed_by_a_person(sim_server, env, tmp_path):
    fingerprint = openssh_fingerprint(sim_server.host_key.with_suffix(".pub"))
    code, output = on_a_terminal(add_argv("orin-02", sim_server), env, "n")
    assert code == 1 and f"ssh-ed25519 {fingerprint}" in output and "pin this key for orin-02? [y/N]" in output
    assert "not confirmed; nothing was written" in output and not (tmp_path / "targets" / "orin-02.yaml").exists()
    code, output = on_a_terminal(add_argv("orin-02", sim_server), env, "y")
    assert code == 0, output
    assert (tmp_path / "targets" / "orin-02.yaml").is_file() and (tmp_path / "targets" / "orin-02.known_hosts").is_file()
