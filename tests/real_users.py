"""Real local users for the privilege-boundary tests: the deploy login that owns a store, and a service user.

They are system users without a home or a shell, made once with `useradd` and kept (a user is a line of /etc/passwd,
not a process: nothing runs as them after a test). Tests that need them need root, and skip without it."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

LOGIN = "sdk-test-login"  # owns the store and the agent, as an SSH deploy login does
SERVICE = "sdk-test-svc"  # runs the service, as `service.user` does


def real_user(name: str) -> pwd.struct_passwd:
    if os.geteuid() != 0:
        pytest.skip("real local users need root (useradd, setuid)")
    if shutil.which("useradd") is None:
        pytest.skip("useradd is not installed here (Debian package: passwd)")
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    command = ["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", "--user-group", name]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    if done.returncode not in (0, 9):  # 9: made meanwhile by another worker
        pytest.fail(f"useradd {name}: {done.stderr.strip()}")
    return pwd.getpwnam(name)


@contextmanager
def open_folder() -> Iterator[Path]:
    """A folder under /tmp that every user may traverse (pytest's own temporary folders are closed to other users):
    root's, 0755, in the sticky /tmp, so it is root's all the way up; removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="sdk-root-boundary-"))
    try:
        folder.chmod(0o755)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def chown_tree(path: Path, user: pwd.struct_passwd) -> None:
    for top, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            os.lchown(os.path.join(top, name), user.pw_uid, user.pw_gid)
    os.lchown(path, user.pw_uid, user.pw_gid)


def run_as(user: pwd.struct_passwd, argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    """`argv` as `user` (its own group only), as a real process of that user."""
    return subprocess.run(argv, user=user.pw_uid, group=user.pw_gid, extra_groups=[], capture_output=True, text=True, timeout=120, **kwargs)


__all__ = ["LOGIN", "SERVICE", "chown_tree", "open_folder", "real_user", "run_as"]
