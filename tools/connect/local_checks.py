"""What this host can see of a target without connecting: the key file (present, readable, not open to others, as
`ssh` requires), the host-key pin (a fingerprint, or a known_hosts file that exists and holds a key for the host) and
the signing key. Used first by `sdk targets check` (before the network) and by `sdk check --target`."""

from __future__ import annotations

import shlex
import stat

from sdk.errors import TargetError
from tools.targets import RemoteTarget

OK, BLOCKED = "ok", "blocked"  # the statuses of tools/connect/check_target.py (which imports this module)
Finding = tuple[str, str, str, str | None]  # status, what, detail, hint


def key_file_hint(target: RemoteTarget) -> str:
    path = target.host_path(target.spec.key_file)
    login = f"{target.spec.user}@{target.spec.host}" if target.spec.host else "USER@DEVICE"
    return (
        f"create it (ssh-keygen -t ed25519 -f {shlex.quote(str(path))}) and install it on the device "
        f"(ssh-copy-id -i {shlex.quote(str(path))}.pub {login}), or set key_file in {target.path.name} to your key"
    )


def known_hosts_hint(target: RemoteTarget) -> str:
    name = target.name.removeprefix("labgrid:")
    return (
        f"pin the device's host key: `sdk targets add {name} --host HOST --user USER --key KEY` fetches it and writes the file once you "
        'confirm its fingerprint, or set host_key: {fingerprint: "SHA256:..."} (on the device: ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub)'
    )


def local_findings(target: RemoteTarget) -> list[Finding]:
    spec = target.spec
    found = [_key_file(target, "key file", spec.key_file, key_file_hint(target))]
    if spec.host_key.fingerprint is not None:
        found.append((OK, "host key pin", f"fingerprint {spec.host_key.fingerprint}", None))
    else:
        found.append(_known_hosts(target))
    if spec.sign_key is not None:
        found.append(_key_file(target, "sign key", spec.sign_key, f"set sign_key in {target.path.name} to the Ed25519 key that signs releases"))
    return found


def _key_file(target: RemoteTarget, what: str, relative: str, missing_hint: str) -> Finding:
    path = target.host_path(relative)
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return (BLOCKED, what, f"{path} does not exist ({target.path.name})", missing_hint)
    except OSError as exc:
        return (BLOCKED, what, f"cannot read {path}: {exc.strerror or exc}", "check the path and its permissions")
    if mode & 0o077:
        return (
            BLOCKED,
            what,
            f"{path} has permissions {mode:04o}: others may read it, and a private key must not be (ssh refuses it too)",
            f"chmod 600 {shlex.quote(str(path))}",
        )
    return (OK, what, f"{path} (mode {mode:04o})", None)


def _known_hosts(target: RemoteTarget) -> Finding:
    from tools.connect.known_hosts import read_pins

    spec = target.spec
    path = target.host_path(spec.host_key.known_hosts)
    if not path.is_file():
        return (BLOCKED, "host key pin", f"the known_hosts file {path} does not exist ({target.path.name})", known_hosts_hint(target))
    if spec.host is None:  # a labgrid place: the address comes from its NetworkService
        return (OK, "host key pin", f"{path} (checked against the place's address when connecting)", None)
    name = spec.host if spec.port == 22 else f"[{spec.host}]:{spec.port}"
    try:
        pins = read_pins(path, name, str(target.path))
    except TargetError as exc:
        return (BLOCKED, "host key pin", exc.message, known_hosts_hint(target))
    if not pins.keys:
        return (BLOCKED, "host key pin", f"{path} holds no key for {name}", known_hosts_hint(target))
    skipped = f"; skipped: {'; '.join(pins.skipped)}" if pins.skipped else ""
    return (OK, "host key pin", f"{len(pins.keys)} key(s) for {name} in {path.name}{skipped}", None)


__all__ = ["key_file_hint", "known_hosts_hint", "local_findings"]
