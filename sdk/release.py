"""A release: a folder of files, each listed with its sha256 and length in `manifest.json`.

The host writes it; the device (and the host) verify it. A release is identified by the
hash of its file list, so the same content always gets the same id.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sdk.errors import ReleaseError

if TYPE_CHECKING:
    from sdk.artifacts import ModelArtifacts
    from sdk.spec.loader import PipelineFile

MANIFEST = "manifest.json"
SIGNATURE = "manifest.json.sig"  # beside the manifest in a release folder (sdk/store/signing.py); never a release file
RELEASE_ID = re.compile(r"^[0-9a-f]{16}$")


@dataclass(frozen=True)
class FileEntry:
    sha256: str
    size: int


@dataclass(frozen=True)
class ReleaseManifest:
    files: dict[str, FileEntry]
    pipeline: str  # relative path of the pipeline file inside the release
    artifacts: str  # relative folder of the prepared model and its tensors
    fingerprint: dict

    @property
    def release_id(self) -> str:
        listing = json.dumps(
            {
                "files": {k: [v.sha256, v.size] for k, v in sorted(self.files.items())},
                "pipeline": self.pipeline,
                "artifacts": self.artifacts,
            },
            sort_keys=True,
        )
        return hashlib.sha256(listing.encode()).hexdigest()[:16]

    def to_json(self) -> str:
        return (
            json.dumps(
                {
                    "release": self.release_id,
                    "pipeline": self.pipeline,
                    "artifacts": self.artifacts,
                    "fingerprint": self.fingerprint,
                    "files": {k: {"sha256": v.sha256, "size": v.size} for k, v in sorted(self.files.items())},
                },
                indent=2,
                sort_keys=True,
            )
            + "\n"
        )

    @classmethod
    def load(cls, release_dir: Path) -> ReleaseManifest:
        path = Path(release_dir) / MANIFEST
        try:
            text = path.read_text()
        except OSError as exc:
            raise ReleaseError(f"{path}: cannot read the release manifest: {exc.strerror}") from None
        return cls.from_json(text, where=str(path))

    @classmethod
    def from_json(cls, text: str, where: str = "manifest") -> ReleaseManifest:
        try:
            data = json.loads(text)
            files = {name: FileEntry(entry["sha256"], int(entry["size"])) for name, entry in data["files"].items()}
            manifest = cls(files, data["pipeline"], data["artifacts"], data.get("fingerprint", {}))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ReleaseError(f"{where}: not a valid release manifest: {exc}") from None
        if data.get("release") != manifest.release_id:
            raise ReleaseError(f"{where}: release id {data.get('release')!r} does not match its file list")
        for name, entry in files.items():
            problem = name_problem(name)
            if problem:
                raise ReleaseError(f"{where}: file name {name[:120]!r} {problem}")
            if len(entry.sha256) != 64 or any(c not in "0123456789abcdef" for c in entry.sha256) or entry.size < 0:
                raise ReleaseError(f"{where}: {name}: invalid hash or length")
        return manifest

    def verify(self, release_dir: Path) -> None:
        """Every listed file exists with its length and hash; raise ReleaseError naming the first that does not."""
        for name, entry in sorted(self.files.items()):
            path = Path(release_dir) / name
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                raise ReleaseError(f"release {self.release_id}: {name} is missing") from None
            if size != entry.size or sha256_of(path) != entry.sha256:
                raise ReleaseError(f"release {self.release_id}: {name} does not match its manifest (corrupt or truncated)")


def pipeline_name_of(text: str) -> str | None:
    """The `name:` of a pipeline file's text, read without a YAML parser (the device's bare Python)."""
    import re

    found = re.search(r"^name:\s*[\"']?([A-Za-z0-9_.-]+)", text, re.MULTILINE)
    return found.group(1) if found else None


def pipeline_health_of(text: str) -> dict:
    """The `health:` block of a pipeline file's text ({"min_frames"?, "timeout_s"?}: what it states, defaults left out).
    PyYAML where the device has it; else read without a YAML parser (the device's bare Python: the Mender module),
    block or flow style. ValueError when the block cannot be read for sure."""
    try:
        import yaml
    except ImportError:
        yaml = None
    if yaml is not None:
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ValueError(f"not YAML ({exc})") from None
        health = (data.get("health") if isinstance(data, dict) else None) or {}
        if not isinstance(health, dict):
            raise ValueError("health: is not a mapping")
        return {k: health[k] for k in ("min_frames", "timeout_s") if k in health}
    found = re.search(r"^health:[ \t]*(\{[^}\n]*\})?[ \t]*(?:#.*)?$((?:\n(?:[ \t]+.*|[ \t]*(?:#.*)?))*)", text, re.MULTILINE)
    if found is None:
        if re.search(r"^health\b", text, re.MULTILINE):
            raise ValueError("a health: line that cannot be read without a YAML parser")
        return {}
    body = found.group(1)[1:-1].replace(",", "\n") if found.group(1) else found.group(2)
    health = {}
    for line in body.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        key, _, value = (part.strip() for part in line.partition(":"))
        if key not in ("min_frames", "timeout_s"):
            continue
        health[key] = int(value) if key == "min_frames" else float(value)
    return health


NAME_MAX, PATH_MAX = 255, 1024  # bytes of one part of a release file's name, and of the whole name
RESERVED_PREFIX = ".tmp-"  # the store's temporaries in a release folder (sdk/store/activation.py: TMP_PREFIX)


def name_problem(name: str) -> str | None:
    """Why a release file's name is refused, or None. Names are checked once, here, in their plain form: relative,
    `/`-separated, no empty, `.` or `..` part (so `./manifest.json` is not a second name for `manifest.json`), no
    NUL or control character, within the length limits, and never the manifest or its signature, a file under either,
    or a top-level name the store uses for its own temporaries."""
    import posixpath

    if not isinstance(name, str) or not name:
        return "is empty"
    if any(ord(c) < 32 or c == "\x7f" for c in name):
        return "holds a NUL or control character"
    if len(name.encode()) > PATH_MAX or any(len(part.encode()) > NAME_MAX for part in name.split("/")):
        return f"is longer than allowed ({NAME_MAX} bytes a part, {PATH_MAX} in all)"
    if name.startswith("/") or ".." in name.split("/"):
        return "leaves the release folder"
    if posixpath.normpath(name) != name or "." in name.split("/") or "\\" in name:
        return f"is not in its plain form ({posixpath.normpath(name)!r})"
    top = name.split("/")[0]
    if top in (MANIFEST, SIGNATURE):
        return "is the release's own manifest or its signature" if top == name else "puts a file under the release's manifest or its signature"
    if top.startswith(RESERVED_PREFIX):
        return f"starts with {RESERVED_PREFIX!r}, kept for the store's own temporary files (the manifest's and the signature's, written there)"
    return None


@dataclass(frozen=True)
class Launch:
    """How a release runs one of its own commands: argv, working folder, environment."""

    argv: list[str]
    cwd: Path
    env: dict[str, str]


def release_command(release_dir: Path, args: list[str], *, python: str | None = None) -> Launch:
    """`python -B -m sdk ARGS` of a release itself, the one launch recipe: its offline environment's python where it
    ships wheels (`<root>/envs/<id>`, else `python` or this interpreter), in the release's folder, with the release's
    own `sdk` (PYTHONPATH and PYTHONHOME removed: never the agent's or the host's) and no bytecode written."""
    import os
    import sys

    release_dir = Path(release_dir)
    env_python = release_dir.parent.parent / "envs" / release_dir.name / "bin" / "python"
    chosen = str(env_python) if env_python.exists() else (python or sys.executable)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return Launch([chosen, "-B", "-m", "sdk", *args], release_dir, env)


def sha256_of(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def load_release(folder: Path) -> tuple[str, PipelineFile, ModelArtifacts]:
    """(release id, pipeline, prepared model) of a release folder, verified against nothing but its manifest.
    It loads the pipeline schema and nothing of the runtime (no NumPy): the service's supervisor, which stays
    resident beside the runtime for the vehicle's whole drive, and the unit renderer need no more."""
    from sdk.artifacts import ModelArtifacts
    from sdk.spec.loader import load_pipeline

    release_dir = Path(folder).resolve()
    manifest = ReleaseManifest.load(release_dir)
    pipeline = load_pipeline(release_dir / manifest.pipeline, check_files=False)
    return manifest.release_id, pipeline, ModelArtifacts(release_dir / manifest.artifacts)
