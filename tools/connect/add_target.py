"""`sdk targets add NAME --host H --user U --key K`: a new target file with the device's host key pinned.

The host key is fetched once with an SSH key exchange only (paramiko's Transport, no authentication:
nothing of ours is sent), shown as its SHA256 fingerprint and pinned only after a person confirmed it
on a terminal, or when it equals the `--fingerprint` a script passed. The pin is a known_hosts file
beside the target file (`NAME.known_hosts`), which also tells the deploy which key type to ask for.
An existing target file is never overwritten.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import ValidationError

from sdk.errors import ConfigError, TargetError
from tools.targets import BUILT_IN, TARGET_NAME, targets_dir
from tools.targets.spec import TargetSpec

DEFAULT_PLATFORM = "linux-generic"
CONNECT_S = 10.0


@dataclass(frozen=True)
class HostKey:
    """One SSH host key as the server presented it."""

    key_type: str
    base64: str
    fingerprint: str

    def known_hosts_line(self, host: str, port: int) -> str:
        name = host if port == 22 else f"[{host}]:{port}"  # OpenSSH's own convention
        return f"{name} {self.key_type} {self.base64}\n"


def fetch_host_key(host: str, port: int, key_types: tuple[str, ...] | None = None, timeout: float = CONNECT_S) -> HostKey:
    """The server's host key (of the first of `key_types` it has), from a key exchange only: no authentication."""
    import paramiko

    from tools.connect.ssh import fingerprint_of

    where = f"{host}:{port}"
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError as exc:
        raise TargetError(
            f"{where}: cannot connect: {exc.strerror or exc}", hint="is the device on, reachable, and its SSH server running?"
        ) from None
    sock.settimeout(timeout)
    transport = paramiko.Transport(sock)
    transport.banner_timeout = transport.handshake_timeout = transport.auth_timeout = timeout
    if key_types:
        options = transport.get_security_options()
        options.key_types = key_types
    try:
        transport.start_client(timeout=timeout)
        key = transport.get_remote_server_key()
    except (paramiko.SSHException, OSError, EOFError) as exc:
        raise TargetError(
            f"{where}: SSH key exchange failed: {str(exc).strip() or type(exc).__name__}", hint="is an SSH server listening there?"
        ) from None
    finally:
        transport.close()
    return HostKey(key.get_name(), key.get_base64(), fingerprint_of(key))


def host_key_with_fingerprint(host: str, port: int, fingerprint: str, first: HostKey, timeout: float = CONNECT_S) -> HostKey | None:
    """The server's key of that fingerprint: the first one seen, or one of its other key types (a server usually has
    several; the fingerprint given may be of its RSA or ECDSA key)."""
    import paramiko

    if first.fingerprint == fingerprint:
        return first
    for key_type in paramiko.Transport._preferred_keys:
        if key_type == first.key_type:
            continue
        try:
            key = fetch_host_key(host, port, (key_type,), timeout)
        except TargetError:
            continue  # the server has no key of this type
        if key.fingerprint == fingerprint:
            return key
    return None


def default_remote_root(user: str) -> str:
    """A folder the login may create without sudo: its home's `perception`."""
    return "/root/perception" if user == "root" else f"/home/{user}/perception"


def _key_file_value(key: str) -> str:
    """As written in the target file: `~/...` kept (portable), anything else absolute (the file resolves relative paths beside itself)."""
    return key if key.startswith("~") else str(Path(key).resolve())


@dataclass(frozen=True)
class AddedTarget:
    path: Path
    known_hosts: Path
    host_key: HostKey


@dataclass
class AddTarget:
    """Settings in the constructor; calling it fetches the host key, has it confirmed, and writes the files."""

    name: str
    host: str
    user: str
    key: str
    platform: str = DEFAULT_PLATFORM
    port: int = 22
    remote_root: str | None = None
    fingerprint: str | None = None
    # Called with the key when no fingerprint was given: True pins it. None: no terminal to ask on.
    confirm: Callable[[HostKey], bool] | None = None
    on_key: Callable[[HostKey], None] | None = None  # shows the fetched key before it is confirmed

    @property
    def path(self) -> Path:
        return targets_dir() / f"{self.name}.yaml"

    @property
    def known_hosts(self) -> Path:
        return targets_dir() / f"{self.name}.known_hosts"

    def document(self) -> dict:
        return {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "key_file": _key_file_value(self.key),
            "host_key": {"known_hosts": self.known_hosts.name},
            "platform": self.platform,
            "remote_root": self.remote_root or default_remote_root(self.user),
            "python": "python3",
        }

    def check(self) -> dict:
        """Everything that can be refused before the network: the name, existing files, the values, the key file."""
        if not TARGET_NAME.match(self.name) or self.name in BUILT_IN:
            raise TargetError(
                f"invalid target name {self.name!r}: use letters, digits, '-' and '_' (at most 64), not {', '.join(BUILT_IN)}",
                hint="e.g. sdk targets add orin-01 --host 192.168.55.1 --user nvidia --key ~/.ssh/orin_deploy_ed25519",
            )
        for existing in (self.path, self.known_hosts):
            if existing.exists():
                raise TargetError(
                    f"{existing} already exists; not overwritten",
                    hint=f"choose another name, or remove {existing} first (`sdk targets check {self.name}` tests the existing one)",
                )
        if self.fingerprint is not None and not self.fingerprint.startswith("SHA256:"):
            raise ConfigError(
                f"--fingerprint {self.fingerprint!r}: expected OpenSSH's SHA256:... form",
                hint="on the device: ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub",
            )
        document = self.document()
        try:
            TargetSpec.model_validate(document)
        except ValidationError as exc:
            error = exc.errors(include_url=False)[0]
            field = ".".join(str(part) for part in error["loc"])
            flag = {"remote_root": "--remote-root", "key_file": "--key"}.get(field, f"--{field}")
            raise ConfigError(
                f"{flag} {error.get('input')!r}: {error['msg'].removeprefix('Value error, ')}", hint="see targets/orin-01.yaml.example"
            ) from None
        if self.fingerprint is not None:
            TargetSpec.model_validate({**document, "host_key": {"fingerprint": self.fingerprint}})  # its pattern
        key = Path(os.path.expanduser(self.key))
        if not key.is_file():
            raise ConfigError(
                f"--key {self.key}: {key} does not exist",
                hint=f"create one: `ssh-keygen -t ed25519 -f {self.key}`, install it: `ssh-copy-id -i {self.key}.pub {self.user}@{self.host}`",
            )
        if key.suffix == ".pub":
            raise ConfigError(f"--key {self.key}: this is a public key", hint=f"give the private key: --key {self.key.removesuffix('.pub')}")
        return document

    def __call__(self) -> AddedTarget:
        document = self.check()
        seen = fetch_host_key(self.host, self.port)
        if self.fingerprint is not None:
            pinned = host_key_with_fingerprint(self.host, self.port, self.fingerprint, seen)
            if pinned is None:
                raise TargetError(
                    f"{self.host}:{self.port}: HOST KEY MISMATCH: expected {self.fingerprint}, received {seen.fingerprint} ({seen.key_type})",
                    hint="someone may be impersonating the device, or it was reinstalled: verify out of band; nothing was written",
                )
        else:
            if self.on_key is not None:
                self.on_key(seen)
            if self.confirm is None:
                raise TargetError(
                    f"{self.host}:{self.port}: cannot confirm host key {seen.fingerprint} ({seen.key_type}) without a terminal; nothing was written",
                    hint="compare it with the device's own (on its console: ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub), "
                    "then pass it: --fingerprint SHA256:...",
                )
            if not self.confirm(seen):
                raise TargetError(
                    f"{self.host}:{self.port}: host key {seen.fingerprint} not confirmed; nothing was written",
                    hint="verify it out of band, then run again",
                )
            pinned = seen
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.known_hosts.open("x") as handle:  # "x": never overwrite, even when another run raced this one
            handle.write(pinned.known_hosts_line(self.host, self.port))
        try:
            with self.path.open("x") as handle:
                handle.write(target_file_text(self.name, document, pinned))
        except BaseException:
            self.known_hosts.unlink(missing_ok=True)
            raise
        return AddedTarget(self.path, self.known_hosts, pinned)


def target_file_text(name: str, document: dict, key: HostKey) -> str:
    """The target file, commented; it loads back to exactly `document`."""
    value = {k: json.dumps(v) if isinstance(v, str) else v for k, v in document.items() if k != "host_key"}
    text = f"""\
# Target {name}, written by `sdk targets add` (every key: targets/orin-01.yaml.example).
host: {value["host"]}
port: {value["port"]}
user: {value["user"]}
# The private key on this machine; a passphrase-protected one can name the variable holding its passphrase:
# key_passphrase_env: {name.upper().replace("-", "_")}_KEY_PASSPHRASE
key_file: {value["key_file"]}
# Pinned on confirmation: {key.key_type} {key.fingerprint}. A changed key stops every connection.
host_key:
  known_hosts: {json.dumps(document["host_key"]["known_hosts"])}
# jetson-agx-orin, jetson-orin-nx, jetson-orin-nano, jetson-thor, drive-orin or linux-generic.
platform: {value["platform"]}
remote_root: {value["remote_root"]}
python: {value["python"]}
"""
    assert yaml.safe_load(text) == document, "the target file must load back to what was validated"
    return text


__all__ = ["AddTarget", "AddedTarget", "HostKey", "default_remote_root", "fetch_host_key"]
