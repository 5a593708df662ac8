"""A device for the Mender tests: the real `mender` client (Debian's mender-client) in standalone mode.

Each command runs in a private mount namespace (`unshare -m`) where the test's own folders are bind-mounted
over /usr/share/mender/modules/v3 (the update module `sdk export --mender-module` wrote) and /etc/mender
(mender.conf, artifact_info, perception-release.conf), with a data folder of its own (`--data`, holding
`device_type` and Mender's database): nothing of the host's Mender setup is read or changed.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest

DEVICE_TYPE = "sdk-test-device"
FACTORY = "factory-image"


# Debian's Mender client (3.4, Go) can break a download by itself under load: a finalizer of the previous stream
# opens `stream-next` as a reader for a moment, the client's next name write succeeds against that reader, which then
# closes; the write fails with EPIPE and the module reads an empty name, the end of the payload (or the name is lost
# and both sides wait). The module refuses the incomplete release and the previous one stays current (decision 0912).
# The tests run the client without garbage collection (GOGC=off); should the signature still appear, install checks
# that nothing changed and tries once more.
MENDER_STREAM_RACE = "stream-next: broken pipe"


def require_mender() -> None:
    """Skip (fail in CI, which installs them: .ci/run) without the client, the artifact tool or a mount namespace."""
    missing = [package for tool, package in (("mender", "mender-client"), ("mender-artifact", "mender-artifact")) if not shutil.which(tool)]
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"CI must install {' and '.join(missing)} (.ci/run does)")
        pytest.skip(f"{' and '.join(missing)} not installed here (apt-get install {' '.join(missing)})")
    if subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        pytest.skip("a private mount namespace (unshare -m) needs root here")


@dataclass
class MenderDevice:
    folder: Path
    store: Path

    @property
    def etc(self) -> Path:
        return self.folder / "etc"

    @property
    def modules(self) -> Path:
        return self.folder / "modules"

    @property
    def data(self) -> Path:
        return self.folder / "data"

    def setup(self) -> MenderDevice:
        from tools.deploy.export import write_module

        for folder in (self.etc, self.modules, self.data):
            folder.mkdir(parents=True, exist_ok=True)
        _, config = write_module(self.modules, python=sys.executable, root=str(self.store), target="mender-test")
        config.rename(self.etc / config.name)
        (self.etc / "artifact_info").write_text(f"artifact_name={FACTORY}\n")
        (self.data / "device_type").write_text(f"device_type={DEVICE_TYPE}\n")
        self.configure()
        return self

    def configure(self, verify_key: Path | None = None) -> None:
        """mender.conf: standalone (no server); with `verify_key`, Mender refuses artifacts it does not verify."""
        config = {}
        if verify_key is not None:
            shutil.copyfile(verify_key, self.etc / "artifact-verify-key.pem")
            config["ArtifactVerifyKey"] = "/etc/mender/artifact-verify-key.pem"
        (self.etc / "mender.conf").write_text(json.dumps(config))

    def mender(self, *args: str) -> subprocess.CompletedProcess:
        script = 'mount --make-rprivate / && mount --bind "$1" /usr/share/mender/modules/v3 && mount --bind "$2" /etc/mender && shift 2 && exec "$@"'
        command = ["mender", "--no-syslog", "-l", "info", "--config", "/etc/mender/mender.conf", "--data", str(self.data), *args]
        # GOGC=off: no garbage collection in the short-lived client, so none of its FIFO finalizers runs mid-download
        # (MENDER_STREAM_RACE); its own session, so that a hang ends with the whole group (client and module) killed.
        env = {**os.environ, "GOGC": "off"}
        argv = ["unshare", "-m", "sh", "-c", script, "sh", str(self.modules), str(self.etc), *command]
        with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True) as process:
            try:
                out, err = process.communicate(timeout=300)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.communicate()
                raise
        return subprocess.CompletedProcess(argv, process.returncode, out, err)

    def install(self, artifact: Path) -> subprocess.CompletedProcess:
        """`mender install`; once more when the client itself broke the payload's stream (MENDER_STREAM_RACE), after
        checking that the failed attempt left the device's releases exactly as they were."""
        before = self.state()
        done = self.mender("install", str(artifact))
        if done.returncode != 0 and MENDER_STREAM_RACE in done.stderr:
            after = self.state()
            keys = ("current", "committed", "trial", "history")
            assert {k: after[k] for k in keys} == {k: before[k] for k in keys}, "a failed download changed the device's releases"
            done = self.mender("install", str(artifact))
        return done

    def artifact_name(self) -> str:
        return self.mender("show-artifact").stdout.strip()

    def state(self) -> dict:
        from sdk.store.objects import ReleaseStore

        return ReleaseStore(self.store).status()


def artifact_members(path: Path) -> dict[str, bytes]:
    """The outer tar's members, in order (version, manifest, [manifest.sig], header.tar.gz, data/0000.tar.gz)."""
    with tarfile.open(path) as archive:
        return {member.name: archive.extractfile(member).read() for member in archive.getmembers()}


def payload_files(path: Path) -> dict[str, bytes]:
    """The payload files of an artifact's only update, by name."""
    data = artifact_members(path)["data/0000.tar.gz"]
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        return {member.name: archive.extractfile(member).read() for member in archive.getmembers()}


def tamper(path: Path, out: Path, name: str, edit) -> Path:
    """Rewrite payload file `name` with `edit(bytes) -> bytes`, and its checksum in the artifact's manifest so
    that only a signature can tell: the artifact's own `manifest.sig`, kept as it was, or the SDK's."""
    members = artifact_members(path)
    files = payload_files(path)
    files[name] = edit(files[name])
    inner = io.BytesIO()
    with gzip.GzipFile(fileobj=inner, mode="wb", mtime=0) as zipped, tarfile.open(fileobj=zipped, mode="w") as archive:
        for file, content in files.items():
            info = tarfile.TarInfo(file)
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
    members["data/0000.tar.gz"] = inner.getvalue()
    lines = members["manifest"].decode().splitlines()
    digest = hashlib.sha256(files[name]).hexdigest()
    entry = f"  data/0000/{name}"
    members["manifest"] = ("\n".join(digest + entry if line.endswith(entry) else line for line in lines) + "\n").encode()
    with tarfile.open(out, "w") as archive:
        for member, content in members.items():
            info = tarfile.TarInfo(member)
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
    return out
