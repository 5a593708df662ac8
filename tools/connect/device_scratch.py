"""A scratch folder on a device: `REMOTE_ROOT/scratch/<name>-<random>`, beside the release store and never in it.

Filled in one stream (a tar unpacked by the device's Python, like the agent), read back file by file, and removed
when the `with` block ends, whatever happened in it. Used by `sdk selftest` for its test bundle (decision 0450) and by
`sdk evaluate --target` for the labelled images a target runs.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from pathlib import Path

from tools.connect.session_ssh import tar_bytes
from tools.connect.sessions import LocalSession

SCRATCH = "scratch"
UNPACK = (
    "import os, sys, tarfile; folder = sys.argv[1]; os.makedirs(folder); tar = tarfile.open(fileobj=sys.stdin.buffer, mode='r|'); "
    "tar.extractall(folder, filter='data') if hasattr(tarfile, 'data_filter') else tar.extractall(folder)"
)
REMOVE = (  # the folder, and scratch/ itself when nothing else is in it
    "import os, shutil, sys; shutil.rmtree(sys.argv[1], ignore_errors=True)\n"
    "try:\n    os.rmdir(os.path.dirname(sys.argv[1]))\nexcept OSError:\n    pass"
)


class DeviceScratch:
    """`with DeviceScratch(session, "selftest", files) as scratch:` the files are on the device under scratch.path."""

    def __init__(self, session, name: str, files: dict[str, Path | bytes]) -> None:
        self.session, self.files, self.name = session, files, name
        self.local = isinstance(session, LocalSession)
        root = str(session.store.root) if self.local else session.root
        self.path = f"{root}/{SCRATCH}/{name}-{secrets.token_hex(4)}"

    def __enter__(self) -> DeviceScratch:
        if self.local:
            folder = Path(self.path)
            folder.mkdir(parents=True)
            for name, content in self.files.items():
                (folder / name).parent.mkdir(parents=True, exist_ok=True)
                if isinstance(content, Path):
                    shutil.copyfile(content, folder / name)
                else:
                    (folder / name).write_bytes(content)
        else:
            connection = self.session.connection
            try:
                connection.run([self.session.python, "-c", UNPACK, self.path], stdin=tar_bytes(self.files)).check(f"sending the {self.name} files")
            except BaseException:
                self.remove()
                raise
        return self

    def fetch(self, name: str, destination: Path) -> bool:
        """Copy one file of the scratch folder to the host; False where the device has no such file."""
        destination.parent.mkdir(parents=True, exist_ok=True)
        if self.local:
            if not (Path(self.path) / name).is_file():
                return False
            shutil.copyfile(Path(self.path) / name, destination)
            return True
        sftp = self.session.connection.sftp()
        try:
            sftp.get(f"{self.path}/{name}", str(destination))
        except FileNotFoundError:
            return False
        return True

    def remove(self) -> None:
        if self.local:
            shutil.rmtree(self.path, ignore_errors=True)
            with contextlib.suppress(OSError):
                os.rmdir(os.path.dirname(self.path))
            return
        self.session.connection.run([self.session.python, "-c", REMOVE, self.path]).check(f"removing the {self.name} scratch folder")

    def __exit__(self, *exc: object) -> None:
        self.remove()
