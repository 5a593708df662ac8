"""Private keys against a real OpenSSH server: passphrases (environment or terminal), wrong ones, loose permissions."""

from __future__ import annotations

import io
import os
import pty
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sdk.errors import ConfigError, TargetError
from tools.connect.ssh import SshConnection
from tools.targets import resolve_target

REPO = Path(__file__).resolve().parents[3]
CLI = [sys.executable, "-c", "from tools.cli import main; main()"]
PASSPHRASE = "correct horse battery staple"


def protected_copy(server, folder: Path, passphrase: str = PASSPHRASE) -> Path:
    """The server's authorized client key, re-encrypted with a passphrase by ssh-keygen (OpenSSH format, bcrypt KDF)."""
    key = folder / "protected_ed25519"
    shutil.copyfile(server.client_key, key)
    key.chmod(0o600)
    subprocess.run(["ssh-keygen", "-q", "-p", "-P", "", "-N", passphrase, "-f", str(key)], check=True, capture_output=True)
    return key


def connects(name: str = "sim") -> str:
    with SshConnection(resolve_target(name)) as connection:
        return connection.run(["echo", "in"]).check("echo").stdout.strip()


@pytest.fixture()
def no_terminal(monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))


def test_the_passphrase_from_the_named_environment_variable_opens_the_key(ssh_target, tmp_path, monkeypatch, no_terminal):
    key = protected_copy(ssh_target.server, tmp_path)
    ssh_target.write(key_file=str(key), key_passphrase_env="ORIN01_KEY_PASSPHRASE")
    monkeypatch.setenv("ORIN01_KEY_PASSPHRASE", PASSPHRASE)
    assert connects() == "in"


def test_a_pem_key_with_a_passphrase_opens_too(ssh_target, tmp_path, monkeypatch, no_terminal):
    """The legacy PEM form (`ssh-keygen -m PEM`): cryptography's own TypeError today, never a traceback."""
    key = tmp_path / "protected_rsa"
    subprocess.run(["ssh-keygen", "-q", "-t", "rsa", "-b", "2048", "-m", "PEM", "-N", PASSPHRASE, "-f", str(key)], check=True)
    ssh_target.write(key_file=str(key), key_passphrase_env="RSA_PASSPHRASE")
    monkeypatch.setenv("RSA_PASSPHRASE", "wrong")
    with pytest.raises(TargetError, match=r"the passphrase in \$RSA_PASSPHRASE does not open the key .*protected_rsa \(wrong passphrase\)"):
        connects()
    monkeypatch.setenv("RSA_PASSPHRASE", PASSPHRASE)
    with pytest.raises(TargetError, match="refused the key"):  # opened; this one is simply not authorized
        connects()


def test_no_terminal_and_no_variable_is_one_clear_error(ssh_target, tmp_path, monkeypatch, no_terminal):
    key = protected_copy(ssh_target.server, tmp_path)
    ssh_target.write(key_file=str(key))
    with pytest.raises(TargetError) as caught:
        connects()
    assert caught.value.message.endswith(
        f"key_file: the key {key} is protected by a passphrase; "
        "name an environment variable holding it in the target file (key_passphrase_env: NAME) or run in a terminal"
    )
    ssh_target.write(key_file=str(key), key_passphrase_env="ORIN01_KEY_PASSPHRASE")
    monkeypatch.delenv("ORIN01_KEY_PASSPHRASE", raising=False)
    with pytest.raises(TargetError, match=rf"the key {key} is protected by a passphrase; set ORIN01_KEY_PASSPHRASE or run in a terminal$"):
        connects()


def test_a_wrong_passphrase_exits_1_through_the_cli_without_a_traceback(ssh_target, tmp_path):
    key = protected_copy(ssh_target.server, tmp_path)
    ssh_target.write(key_file=str(key), key_passphrase_env="ORIN01_KEY_PASSPHRASE")
    env = {**os.environ, "ORIN01_KEY_PASSPHRASE": "not it", "COLUMNS": "300"}
    done = subprocess.run([*CLI, "targets", "probe", "sim"], cwd=REPO, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[0].startswith("error: ")
    assert lines[0].endswith(f"the passphrase in $ORIN01_KEY_PASSPHRASE does not open the key {key} (wrong passphrase)")
    assert lines[1].startswith("hint: set ORIN01_KEY_PASSPHRASE to the passphrase of")
    # And without any passphrase source, the same single error line.
    del env["ORIN01_KEY_PASSPHRASE"]
    done = subprocess.run([*CLI, "targets", "probe", "sim"], cwd=REPO, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "protected by a passphrase; set ORIN01_KEY_PASSPHRASE or run in a terminal" in done.stderr


def on_a_terminal(argv: list[str], answer: str, timeout: float = 60) -> tuple[int, str]:
    """Run argv with a pseudo-terminal as its controlling terminal; type `answer` at the passphrase prompt."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: its stdin is the terminal, as in an interactive shell
        os.chdir(REPO)
        os.execvpe(argv[0], argv, {**os.environ, "COLUMNS": "300", "NO_COLOR": "1", "TERM": "dumb"})
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
        if not typed and b"Enter passphrase for key" in output:
            os.write(fd, answer.encode() + b"\n")
            typed = True
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), output.decode(errors="replace")


def test_on_a_terminal_the_passphrase_is_asked_once(ssh_target, tmp_path):
    key = protected_copy(ssh_target.server, tmp_path)
    ssh_target.write(key_file=str(key))
    code, output = on_a_terminal([*CLI, "targets", "probe", "sim"], PASSPHRASE)
    assert code == 0, output
    assert output.count(f"Enter passphrase for key '{key}':") == 1
    assert PASSPHRASE not in output  # not echoed
    assert '"target": "sim"' in output
    code, output = on_a_terminal([*CLI, "targets", "probe", "sim"], "typo")
    assert code == 1 and "Traceback" not in output
    assert f"the passphrase typed does not open the key {key} (wrong passphrase)" in output


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_a_key_others_may_read_is_refused_with_the_chmod_hint(ssh_target, tmp_path, mode):
    key = tmp_path / "loose key"
    shutil.copyfile(ssh_target.server.client_key, key)
    key.chmod(mode)
    ssh_target.write(key_file=str(key))
    with pytest.raises(TargetError) as caught:
        connects()
    assert caught.value.message.endswith(
        f"key_file: Permissions {mode:04o} for '{key}' are too open. It is required that your private key files are NOT accessible by others."
    )
    assert caught.value.hint == f"chmod 600 '{key}'"
    key.chmod(0o600)
    assert connects() == "in"


@pytest.mark.parametrize("name", ["1ABC", "MY-VAR", "A B", "$(reboot)", ""])
def test_key_passphrase_env_must_name_a_variable(ssh_target, name):
    ssh_target.write(key_passphrase_env=name)
    with pytest.raises(ConfigError, match="key_passphrase_env"):
        resolve_target("sim")
