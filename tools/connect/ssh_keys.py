"""The target's SSH private key, opened as `ssh` opens it: refused when group or others may read it; a
passphrase-protected key opened with the passphrase from the environment variable the target file names
(`key_passphrase_env`), or asked on a terminal, once per process and key."""

from __future__ import annotations

import getpass
import os
import shlex
import stat
import sys
import threading

from sdk.errors import TargetError
from tools.targets import RemoteTarget

_KEYS: dict[tuple, object] = {}
_KEYS_LOCK = threading.Lock()


def load_private_key(target: RemoteTarget):
    """The target's private key (a paramiko PKey), opened as `ssh` would open it, or one TargetError."""
    path = target.host_path(target.spec.key_file)
    where = f"{target.path}: key_file"
    try:
        info = path.stat()
    except FileNotFoundError:
        from tools.connect.local_checks import key_file_hint

        raise TargetError(f"{where}: {path} does not exist", hint=key_file_hint(target)) from None
    except OSError as exc:
        raise TargetError(f"{where}: cannot read {path}: {exc.strerror or exc}", hint="check the path and its permissions") from None
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        raise TargetError(
            f"{where}: Permissions {mode:04o} for '{path}' are too open. It is required that your private key files are NOT accessible by others.",
            hint=f"chmod 600 {shlex.quote(str(path))}",
        )
    identity = (str(path), info.st_dev, info.st_ino, info.st_mtime_ns, info.st_size)
    with _KEYS_LOCK:  # a fleet connects in parallel: one prompt at a time, and only one per key
        if identity not in _KEYS:
            _KEYS[identity] = _open_key(target, path, where)
        return _KEYS[identity]


def _open_key(target: RemoteTarget, path, where: str):
    import paramiko

    try:
        return paramiko.PKey.from_path(path)
    except (TypeError, paramiko.PasswordRequiredException):
        pass  # encrypted: cryptography says "password was not provided" with a TypeError, older paramiko its own class
    except (paramiko.SSHException, OSError, ValueError) as exc:
        raise TargetError(f"{where}: cannot load {path}: {_reason(exc)}") from None
    variable = target.spec.key_passphrase_env
    if variable and os.environ.get(variable):
        source, passphrase = f"the passphrase in ${variable}", os.environ[variable]
        retry = f"set {variable} to the passphrase of {path} (check it with: ssh-keygen -y -f {shlex.quote(str(path))})"
    elif sys.stdin is not None and sys.stdin.isatty():
        try:
            passphrase = getpass.getpass(f"Enter passphrase for key '{path}': ")
        except (EOFError, OSError):
            passphrase = ""
        source, retry = "the passphrase typed", "run again and type the key's passphrase"
        if not passphrase:
            raise TargetError(f"{where}: the key {path} is protected by a passphrase and none was typed", hint=retry)
    else:
        wanted = f"set {variable}" if variable else "name an environment variable holding it in the target file (key_passphrase_env: NAME)"
        raise TargetError(
            f"{where}: the key {path} is protected by a passphrase; {wanted} or run in a terminal",
            hint="the passphrase is read from that variable, or asked on a terminal; it is never stored",
        )
    try:
        return paramiko.PKey.from_path(path, passphrase.encode())
    except (paramiko.SSHException, OSError, ValueError, TypeError) as exc:
        if not _opens_with(path, passphrase.encode()):
            raise TargetError(f"{where}: {source} does not open the key {path} (wrong passphrase)", hint=retry) from None
        raise TargetError(f"{where}: cannot load {path}: {_reason(exc)}") from None


def _opens_with(path, passphrase: bytes) -> bool:
    """Whether the passphrase decrypts the key (paramiko's own errors do not tell a wrong passphrase apart)."""
    from cryptography.hazmat.primitives import serialization

    data = path.read_bytes()
    for loader in (serialization.load_ssh_private_key, serialization.load_pem_private_key):
        try:
            loader(data, password=passphrase)
            return True
        except (ValueError, TypeError):
            continue
        except Exception:  # an unsupported key type: decrypted, but not usable here
            return True
    return False


def reason(exc: BaseException) -> str:
    """An exception as words, never blank."""
    text = str(exc).strip()
    if isinstance(exc, OSError) and exc.strerror:
        text = exc.strerror
    if not text and isinstance(exc, EOFError):
        text = "the other side closed the connection"
    return text or type(exc).__name__


_reason = reason
