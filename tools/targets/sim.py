"""A simulated target: a real OpenSSH server on loopback, as the current user, with fresh keys.

`sdk targets sim` starts it and writes `targets/sim.yaml`, so `deploy --target sim` runs over
real SSH on a laptop through the same bundle, upload, trial activation and remote run as a
vehicle. The tests use the same class for their SSH targets.
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from sdk.errors import TargetError

SSHD_CANDIDATES = ("/usr/sbin/sshd", "/usr/local/sbin/sshd")
SFTP_CANDIDATES = ("/usr/lib/openssh/sftp-server", "/usr/libexec/openssh/sftp-server", "/usr/libexec/sftp-server")


def find_sshd() -> str:
    for candidate in (*SSHD_CANDIDATES, shutil.which("sshd") or ""):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise TargetError("OpenSSH server (sshd) is not installed", hint="install it: apt-get install openssh-server")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _keygen(path: Path, key_type: str = "ed25519") -> None:
    path.unlink(missing_ok=True)
    path.with_suffix(".pub").unlink(missing_ok=True)
    subprocess.run(["ssh-keygen", "-q", "-t", key_type, "-N", "", "-C", "sdk-sim", "-f", str(path)], check=True)


def _connection_processes(listener: int) -> list[int]:
    """What sshd forked for its connections (its children named `sshd: ...`) and what they run, from /proc."""
    from sdk.service.instance import command_line, parent_pid

    pids = [int(entry) for entry in os.listdir("/proc") if entry.isdigit()] if os.path.isdir("/proc") else []
    parents = {pid: parent_pid(pid) for pid in pids}  # None: ended meanwhile
    found = [pid for pid, parent in parents.items() if parent == listener and "".join(command_line(pid)[:1]).startswith("sshd")]
    queue = list(found)
    while queue:
        parent_of_these = queue.pop()
        children = [pid for pid, parent in parents.items() if parent == parent_of_these]
        found += children
        queue += children
    return found


def _alive(pid: int) -> bool:
    """Whether the process runs (a zombie waiting for its parent to reap it does not)."""
    if os.path.isdir("/proc/self"):
        try:
            with open(f"/proc/{pid}/stat") as handle:
                return handle.read().rpartition(")")[2].split()[0] != "Z"
        except OSError:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


SIM_HEADER = "# Simulated target: a real OpenSSH server on loopback (sdk targets sim).\n"


def is_sim_file(path: Path) -> bool:
    """Whether `path` is a target file `sdk targets sim` wrote (and may replace or remove)."""
    try:
        return path.read_text().startswith(SIM_HEADER)
    except OSError:
        return False


@dataclass
class SimServer:
    """sshd on 127.0.0.1:port with its own host key, one authorized client key, key-only auth."""

    folder: Path
    port: int = 0
    password_only: bool = False  # for tests: a server that refuses keys
    address: str = "127.0.0.1"
    netns: str | None = None  # run inside this network namespace (test hosts with their own address)
    extra_host_keys: tuple[str, ...] = ()  # more host key types (e.g. "ecdsa", "rsa"), as a real device has

    def __post_init__(self) -> None:
        self.folder = Path(self.folder).resolve()
        self.port = self.port or free_port()

    @property
    def host_key(self) -> Path:
        return self.folder / "ssh_host_ed25519_key"

    @property
    def client_key(self) -> Path:
        return self.folder / "client_ed25519_key"

    @property
    def known_hosts(self) -> Path:
        return self.folder / "known_hosts"

    @property
    def remote_root(self) -> Path:
        return self.folder / "root"

    @property
    def log(self) -> Path:
        return self.folder / "sshd.log"

    @property
    def pid_file(self) -> Path:
        return self.folder / "sshd.pid"

    def start(self) -> SimServer:
        sshd = find_sshd()
        self.folder.mkdir(parents=True, exist_ok=True)
        self.remote_root.mkdir(exist_ok=True)
        _keygen(self.host_key)
        for key_type in self.extra_host_keys:
            _keygen(self.folder / f"ssh_host_{key_type}_key", key_type)
        if not self.client_key.exists():
            _keygen(self.client_key)
        (self.folder / "authorized_keys").write_text(self.client_key.with_suffix(".pub").read_text())
        (self.folder / "authorized_keys").chmod(0o600)
        host_public = self.host_key.with_suffix(".pub").read_text().split()
        name = self.address if self.port == 22 else f"[{self.address}]:{self.port}"  # known_hosts' own convention
        self.known_hosts.write_text(f"{name} {host_public[0]} {host_public[1]}\n")
        sftp = next((c for c in SFTP_CANDIDATES if os.path.exists(c)), "internal-sftp")
        config = [
            f"Port {self.port}",
            f"ListenAddress {self.address}",
            f"HostKey {self.host_key}",
            *(f"HostKey {self.folder / f'ssh_host_{key_type}_key'}" for key_type in self.extra_host_keys),
            f"PidFile {self.pid_file}",
            f"AuthorizedKeysFile {self.folder / 'authorized_keys'}",
            f"PubkeyAuthentication {'no' if self.password_only else 'yes'}",
            f"PasswordAuthentication {'yes' if self.password_only else 'no'}",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "StrictModes no",
            "AllowAgentForwarding no",
            "X11Forwarding no",
            "PermitRootLogin prohibit-password",
            f"AllowUsers {getpass.getuser()}",
            "LogLevel VERBOSE",
            "MaxStartups 50",
            f"Subsystem sftp {sftp}",
        ]
        (self.folder / "sshd_config").write_text("\n".join(config) + "\n")
        if os.geteuid() == 0:
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation directory
        self.pid_file.unlink(missing_ok=True)
        prefix = ["ip", "netns", "exec", self.netns] if self.netns else []
        done = subprocess.run([*prefix, sshd, "-f", str(self.folder / "sshd_config"), "-E", str(self.log)], capture_output=True, text=True)
        if done.returncode != 0:
            raise TargetError(f"sshd did not start: {done.stderr.strip() or self.log.read_text()[-500:]}")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection((self.address, self.port), timeout=0.5).close()
            except OSError:
                time.sleep(0.05)
                continue
            if self.pid is not None:  # sshd listens a moment before its pid file is written: wait for both
                return self
            time.sleep(0.05)
        raise TargetError(f"sshd did not listen on {self.address}:{self.port} with its pid in {self.pid_file}: {self.log.read_text()[-500:]}")

    @property
    def pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text())
        except (OSError, ValueError):
            return None

    def stop(self, wait_s: float = 5.0) -> None:
        """SIGTERM to sshd and to its connections' processes, then wait (at most `wait_s`) until they are gone: a
        stopped server leaves no process behind. sshd's listener leaves its connections (and the commands they run)
        running when it ends; one whose client vanished (a cable pulled in a network namespace) would wait on its
        dead socket for ever. Detached processes (a service's supervisor) are no connection's and stay."""
        pid = self.pid
        if pid is not None:
            pids = [pid, *_connection_processes(pid)]
            for each in pids:
                try:
                    os.kill(each, signal.SIGTERM)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + wait_s
            while any(_alive(each) for each in pids) and time.monotonic() < deadline:
                time.sleep(0.02)
        self.pid_file.unlink(missing_ok=True)

    def __enter__(self) -> SimServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def target_document(self, **overrides) -> dict:
        document = {
            "host": self.address,
            "port": self.port,
            "user": getpass.getuser(),
            "key_file": str(self.client_key),
            "host_key": {"known_hosts": str(self.known_hosts)},
            "platform": "linux-generic",
            "remote_root": str(self.remote_root),
            "python": sys.executable,
            "timeouts": {"connect_s": 10, "command_s": 300, "deadline_s": 1800, "keepalive_s": 5},
        }
        document.update(overrides)
        return document

    def write_target(self, path: Path, **overrides) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(SIM_HEADER + yaml.safe_dump(self.target_document(**overrides), sort_keys=False))
        return path
