"""SSH to a target with paramiko, secure by default.

- The host key is checked against the target's pin (its own known_hosts file or a SHA256
  fingerprint) right after key exchange, before any authentication: an unknown or changed key
  ends the connection with both fingerprints named, and nothing of ours was sent. Never auto-add.
- Key-only: the server's offered methods are asked with `none` first; a server that does not
  offer `publickey` is refused without offering our key. No agent, no agent forwarding.
- The private key is checked like OpenSSH does (refused when group or others may read it); a
  passphrase-protected key is opened with the passphrase from the environment variable the target
  file names (`key_passphrase_env`), or asked on a terminal, once per process.
- Timeouts everywhere: connect, key exchange and auth, per command, keepalives, and an overall
  deadline, so a frozen peer cannot hang the tool.
- Remote commands are argv lists joined with `shlex.join`: user values never meet a shell unquoted.

paramiko's `Transport` is used directly (not `SSHClient`) to control the order above exactly.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import shlex
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sdk.errors import TargetError
from tools.connect.remote_process import RemoteProcess, send_all
from tools.connect.ssh_keys import load_private_key
from tools.connect.ssh_keys import reason as _reason
from tools.targets import RemoteTarget

WINDOW_BYTES = 32 * 1024 * 1024
# AES-GCM first (decision 0811): one AES-NI pass for cipher and MAC, about half the device's sshd CPU of
# aes128-ctr with hmac-sha2-256 (paramiko's first choice) and less of the host's. Everything else paramiko
# offers stays behind it, reordered only, so a server without GCM negotiates what it did before.
PREFERRED_CIPHERS = ("aes256-gcm@openssh.com", "aes128-gcm@openssh.com")
PREFERRED_MACS = ("hmac-sha2-256-etm@openssh.com", "hmac-sha2-512-etm@openssh.com")  # for a CTR cipher: encrypt-then-MAC


def prefer_fast_ciphers(options) -> None:
    """Reorder a paramiko transport's offer: GCM ciphers, then encrypt-then-MAC; nothing added or removed."""
    options.ciphers = _first(PREFERRED_CIPHERS, options.ciphers)
    options.digests = _first(PREFERRED_MACS, options.digests)


def _first(preferred: tuple[str, ...], offered) -> tuple[str, ...]:
    offered = tuple(offered)
    return tuple(name for name in preferred if name in offered) + tuple(name for name in offered if name not in preferred)


# paramiko logs its own tracebacks for failures we turn into one clear error; keep them off the terminal.
logging.getLogger("paramiko").addHandler(logging.NullHandler())


def fingerprint_of(key) -> str:
    """OpenSSH's `SHA256:...` form of a public key."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    exit_code: int
    stdout: str
    stderr: str

    def check(self, what: str) -> CommandResult:
        if self.exit_code != 0:
            # paramiko's -1: no exit status came (the command was killed by a signal, or the link dropped).
            status = "it ended without an exit status (killed, or the connection dropped)" if self.exit_code == -1 else None
            message = error_line(self.stderr) or status or f"exit status {self.exit_code}"
            raise TargetError(f"{what} failed on the target: {message}", hint="see the target's message above")
        return self


def error_line(stderr: str) -> str:
    """The `error:` line a runtime or store command printed (the CLI's one-line contract), else its last line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("error:"):
            return line.removeprefix("error:").strip()
    return lines[-1] if lines else ""


def sftp_refused(exc: BaseException) -> bool:
    """Whether the exception is the SFTP server's answer (a status paramiko turned into an OSError), not a lost link:
    both are OSErrors, so the raising frame tells them apart."""
    if not isinstance(exc, OSError):
        return False
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_code.co_name == "_convert_status"


def sftp_reason(exc: BaseException) -> str:
    """Why an SFTP operation failed, never blank. paramiko raises the server's status as an OSError: with an errno
    for "no such file" and "permission denied", else only the server's text ("Failure": OpenSSH's sftp-server
    answers a full disk, a read-only filesystem and most other errors with SSH_FX_FAILURE)."""
    if isinstance(exc, OSError) and not isinstance(exc, socket.timeout):
        text = (exc.strerror or (str(exc.args[0]) if len(exc.args) == 1 else "")).strip()
        if exc.errno is None:
            return f'the SFTP server answered "{text}"' if text else "the SFTP server answered a failure without a reason"
        return f"{text or os.strerror(exc.errno)} (errno {exc.errno})"
    if isinstance(exc, socket.timeout):
        return "timed out"
    if isinstance(exc, EOFError):
        return str(exc).strip() or "the server closed the SFTP session"
    return _reason(exc)


REVOKED = "@revoked"  # in _pinned_keys' answer: the keys a known_hosts file withdrew for this host


class SshConnection:
    """Opens lazily on first use; a context manager that always closes."""

    def __init__(self, target: RemoteTarget, *, jump: SshConnection | None = None) -> None:
        self.target = target
        self.spec = target.spec
        self.jump = jump
        self._transport = None
        self._sftp = None
        self._deadline = time.monotonic() + self.spec.timeouts.deadline_s

    def __enter__(self) -> SshConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def where(self) -> str:
        return f"{self.target.name} ({self.spec.user}@{self.spec.host}:{self.spec.port})"

    def remaining(self, limit: float | None = None) -> float:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TargetError(f"{self.where}: the overall deadline of {self.spec.timeouts.deadline_s:g} s has passed")
        return min(left, limit) if limit is not None else left

    # Connection ---------------------------------------------------------------------------
    def transport(self):
        if self._transport is None or not self._transport.is_active():
            self._transport = self._connect()
        return self._transport

    def _connect(self):
        import paramiko

        timeouts = self.spec.timeouts
        key = load_private_key(self.target)  # before any connection: a passphrase prompt races no timeout
        sock = self._socket()
        # A window well above one round trip's worth of data keeps SFTP's pipelined writes flowing.
        transport = paramiko.Transport(sock, default_window_size=WINDOW_BYTES)
        transport.banner_timeout = timeouts.connect_s
        transport.handshake_timeout = timeouts.connect_s
        transport.auth_timeout = timeouts.connect_s
        prefer_fast_ciphers(transport.get_security_options())
        pinned = self._pinned_keys()
        if pinned is not None:
            pinned = dict(pinned)
            # Ask the server for the key type we pinned, so a host with several keys is not misread as changed.
            options = transport.get_security_options()
            preferred = [t for t in options.key_types if t in pinned and t != REVOKED] or list(options.key_types)
            options.key_types = preferred + [t for t in options.key_types if t not in preferred]
        try:
            transport.start_client(timeout=self.remaining(timeouts.connect_s))
        except (paramiko.SSHException, OSError, EOFError) as exc:
            transport.close()
            raise TargetError(f"{self.where}: SSH handshake failed: {exc or type(exc).__name__}") from None
        try:
            try:
                server_key = transport.get_remote_server_key()
            except paramiko.SSHException:
                raise TargetError(f"{self.where}: SSH handshake timed out after {timeouts.connect_s:g} s", hint="the target may be frozen") from None
            self._check_host_key(server_key, pinned)
            self._authenticate(transport, key)
        except BaseException:
            transport.close()
            raise
        transport.set_keepalive(max(1, int(timeouts.keepalive_s)))
        return transport

    def _socket(self):
        host, port = self.spec.host, self.spec.port
        timeout = self.remaining(self.spec.timeouts.connect_s)
        if self.jump is not None:
            try:
                channel = self.jump.transport().open_channel("direct-tcpip", (host, port), ("127.0.0.1", 0), timeout=timeout)
            except Exception as exc:  # paramiko raises ChannelException or SSHException
                raise TargetError(f"{self.where}: cannot reach it through jump host {self.jump.target.name}: {exc}") from None
            return channel
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise TargetError(f"{self.where}: cannot connect: {exc.strerror or exc}", hint="is the target on and reachable?") from None
        sock.settimeout(self.spec.timeouts.connect_s)
        return sock

    def _pinned_keys(self) -> dict | None:
        """key type -> key from the target's known_hosts file (read as OpenSSH reads it, tools/connect/known_hosts.py), or None
        when a fingerprint is pinned. Revoked keys ride along under REVOKED."""
        from tools.connect.known_hosts import read_pins

        if self.spec.host_key.known_hosts is None:
            return None
        path = self.target.host_path(self.spec.host_key.known_hosts)
        name = self.spec.host if self.spec.port == 22 else f"[{self.spec.host}]:{self.spec.port}"
        if not path.is_file():
            from tools.connect.local_checks import known_hosts_hint

            raise TargetError(f"{self.target.path}: host_key.known_hosts: {path} does not exist", hint=known_hosts_hint(self.target))
        pins = read_pins(path, name, str(self.target.path))
        return {**pins.keys, REVOKED: pins.revoked} if pins.revoked else dict(pins.keys)

    def _check_host_key(self, key, pinned: dict | None) -> None:
        received = fingerprint_of(key)
        revoked = (pinned or {}).pop(REVOKED, [])
        if any(k.asbytes() == key.asbytes() for k in revoked):
            raise TargetError(
                f"{self.where}: HOST KEY REVOKED: {received} ({key.get_name()}) is marked @revoked in {self.spec.host_key.known_hosts}",
                hint="the target presents a key that was withdrawn: do not connect; verify the device out of band",
            )
        if pinned is None:
            expected = self.spec.host_key.fingerprint
            if received != expected:
                raise TargetError(
                    f"{self.where}: HOST KEY MISMATCH: expected {expected}, received {received} ({key.get_name()})",
                    hint="someone may be impersonating the target, or it was reinstalled: verify out of band, then update the pin",
                )
            return
        if not pinned:
            raise TargetError(
                f"{self.where}: unknown host: no key for it in {self.spec.host_key.known_hosts}; received {received} ({key.get_name()})",
                hint="verify the fingerprint out of band (on the device: ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub), then pin it",
            )
        expected_key = pinned.get(key.get_name())
        if expected_key is None or expected_key.asbytes() != key.asbytes():
            expected = ", ".join(f"{fingerprint_of(k)} ({t})" for t, k in pinned.items())
            raise TargetError(
                f"{self.where}: HOST KEY MISMATCH: expected {expected}, received {received} ({key.get_name()})",
                hint="someone may be impersonating the target, or it was reinstalled: verify out of band, then update the pin",
            )

    def _authenticate(self, transport, key) -> None:
        import paramiko

        user = self.spec.user
        try:
            transport.auth_none(user)  # learns the offered methods; sends no credential
            return  # a server that lets anyone in: accepted, nothing of ours exposed
        except paramiko.BadAuthenticationType as exc:
            offered = list(exc.allowed_types)
        except paramiko.SSHException as exc:
            raise TargetError(f"{self.where}: authentication failed: {exc}") from None
        if "publickey" not in offered:
            raise TargetError(
                f"{self.where}: the server offers only {', '.join(offered) or 'nothing'}; this tool authenticates with keys only",
                hint="enable PubkeyAuthentication on the target and install the key from the target file",
            )
        key_path = self.target.host_path(self.spec.key_file)
        try:
            transport.auth_publickey(user, key)
        except paramiko.AuthenticationException:
            raise TargetError(
                f"{self.where}: the target refused the key {key_path} for user {user}",
                hint="install its public key in the user's authorized_keys",
            ) from None
        except paramiko.SSHException as exc:
            raise TargetError(f"{self.where}: authentication failed: {exc}") from None

    # Commands -----------------------------------------------------------------------------
    def run(
        self,
        argv: list[str],
        *,
        stdin: bytes | None = None,
        timeout: float | None = None,
        on_stdout_line: Callable[[str], None] | None = None,
        silence_s: float | None = None,
    ) -> CommandResult:
        """Run argv on the target (joined with shlex.join, never concatenated) and wait for it.
        `silence_s`: how long it may print nothing (default: the target's command timeout)."""
        command = shlex.join(argv)
        limit = self.remaining(timeout or self.spec.timeouts.command_s)
        transport = self.transport()
        try:
            channel = transport.open_session(timeout=self.spec.timeouts.connect_s)
        except Exception as exc:  # paramiko's SSHException / ChannelException
            raise TargetError(f"{self.where}: cannot open a session: {exc}") from None
        channel.settimeout(1.0)
        out, err, pending = bytearray(), bytearray(), bytearray()
        started = time.monotonic()
        try:
            channel.exec_command(command)
            silence = silence_s or self.spec.timeouts.command_s
            if stdin is not None:  # a busy device may start its interpreter for seconds with the window full
                send_all(channel, stdin, timeout=min(silence, limit))
            channel.shutdown_write()
            last_data = started
            while True:
                now = time.monotonic()
                if now - started > limit:
                    raise TargetError(f"{self.where}: `{argv[0]}` did not finish within {limit:.0f} s", hint="the target may be frozen or overloaded")
                if now - last_data > silence:
                    raise TargetError(f"{self.where}: `{argv[0]}` sent nothing for {silence:g} s", hint="the link or the target may be down")
                if not transport.is_active():
                    raise TargetError(f"{self.where}: the connection dropped while `{argv[0]}` ran")
                got = False
                while channel.recv_ready():
                    chunk = channel.recv(65536)
                    out += chunk
                    got = True
                    if on_stdout_line is not None:
                        pending += chunk
                        *lines, rest = pending.split(b"\n")
                        pending = bytearray(rest)
                        for line in lines:
                            on_stdout_line(line.decode("utf-8", "replace"))
                while channel.recv_stderr_ready():
                    err += channel.recv_stderr(65536)
                    got = True
                if channel.exit_status_ready() and not channel.recv_ready() and not channel.recv_stderr_ready():
                    break
                if got:
                    last_data = time.monotonic()
                else:
                    time.sleep(0.01)
            code = channel.recv_exit_status()
        except TimeoutError:
            raise TargetError(f"{self.where}: `{argv[0]}` timed out") from None
        finally:
            channel.close()
        return CommandResult(tuple(argv), code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))

    def start(self, argv: list[str]) -> RemoteProcess:
        """Start argv on the target and leave it running (its stdin open) until `close()`."""
        transport = self.transport()
        try:
            channel = transport.open_session(timeout=self.spec.timeouts.connect_s)
            channel.exec_command(shlex.join(argv))
        except Exception as exc:  # paramiko's SSHException / ChannelException
            raise TargetError(f"{self.where}: cannot start `{argv[0]}`: {exc}") from None
        return RemoteProcess(channel, self.where)

    @contextmanager
    def transfer(self, what: str) -> Iterator[Callable[[], None]]:
        """Guard a transfer: yields `tick`, to call whenever bytes move.

        A pulled cable loses packets without resetting anything, and paramiko would wait on its
        socket forever; a watchdog closes the connection when no tick came for `command_s`, which
        wakes the blocked call. Any lost connection becomes one TargetError (the device keeps the
        partial upload, so the next deploy resumes it).
        """
        import paramiko

        limit = self.spec.timeouts.command_s
        state = {"last": time.monotonic(), "done": False, "stalled": False}

        def tick() -> None:
            state["last"] = time.monotonic()

        def watch() -> None:
            while not state["done"]:
                if time.monotonic() - state["last"] > limit:
                    state["stalled"] = True
                    self.abort()
                    return
                time.sleep(0.2)

        watchdog = threading.Thread(target=watch, name="sdk-ssh-watchdog", daemon=True)
        watchdog.start()
        try:
            yield tick
        except (OSError, EOFError, paramiko.SSHException) as exc:
            if isinstance(exc, FileNotFoundError) and not state["stalled"]:
                raise
            if state["stalled"]:
                reason = f"no progress for {limit:g} s"
            elif sftp_refused(exc) and self.alive():  # the link is up: the SFTP server refused something
                raise TargetError(
                    f"{self.where}: {what} failed: {sftp_reason(exc)}",
                    hint="the current release is untouched; check the target's disk and filesystem, then deploy again",
                ) from None
            else:
                reason = _reason(exc)
            raise TargetError(
                f"{self.where}: connection lost while {what}: {reason}",
                hint="the current release is untouched; deploy again to resume",
            ) from None
        finally:
            state["done"] = True
            watchdog.join()

    def alive(self) -> bool:
        """Whether the SSH connection is still up (a failed SFTP call with a live link was refused, not cut)."""
        return self._transport is not None and self._transport.is_active()

    def abort(self) -> None:
        """Tear the connection down from another thread: blocked reads and writes fail at once."""
        transport = self._transport
        if transport is not None:
            try:
                transport.sock.close()
            except OSError:
                pass
            transport.close()

    def sftp(self):
        import paramiko

        if self._sftp is None:
            try:
                self._sftp = paramiko.SFTPClient.from_transport(self.transport())
            except paramiko.SSHException as exc:
                raise TargetError(f"{self.where}: SFTP is not available: {exc}", hint="enable the sftp subsystem in sshd_config") from None
            self._sftp.get_channel().settimeout(self.spec.timeouts.command_s)
        return self._sftp

    def close(self) -> None:
        if self._sftp is not None:
            self._sftp.close()
            self._sftp = None
        if self._transport is not None:
            self._transport.close()
            self._transport = None
        if self.jump is not None:
            self.jump.close()


def connect(target: RemoteTarget) -> SshConnection:
    """A lazy connection to the target, through its jump host (itself a target) when it names one."""
    from tools.targets import resolve_target

    jump = None
    if target.spec.jump:
        jump_target = resolve_target(target.spec.jump)
        if not isinstance(jump_target, RemoteTarget):
            raise TargetError(f"{target.path}: jump: {target.spec.jump!r} is not a remote target")
        if jump_target.spec.jump:
            raise TargetError(f"{target.path}: jump: {target.spec.jump!r} has a jump host of its own; one hop is supported")
        jump = SshConnection(jump_target)
    return SshConnection(target, jump=jump)
