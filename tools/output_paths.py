"""Where a command writes, checked before the work: one error line, never a traceback after a long run.

Every command that writes a file or a folder the user named (`--json`, `--html`, `--report-dir`, `--output`) asks
here first, before it prepares, profiles or measures anything:

- an output is never a file the command reads (the pipeline file, its model): `--json P.yaml` is refused;
- a file output is a regular file or nothing yet (never a folder, a device, a pipe), a folder output a folder or nothing;
- it is not in /proc, /sys or /dev (the kernel's and the devices' files);
- its folder (or the nearest one that exists, for a path still to be made) takes a new file: a hidden probe is
  created and removed at once, so a read-only mount or a folder without write permission is refused by the
  kernel itself, with its reason.

Writing goes through `write_whole` (sdk/sinks/files.py: a hidden partial renamed into place); `write_output` turns what
can still fail then (a disk that filled meanwhile) into the same one line, with nothing left behind.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from sdk.errors import ConfigError
from sdk.sinks.files import write_whole

Reads = Iterable[tuple[Path | None, str]]  # (a file the command reads, what it is: "the pipeline file", "its model")


def _why(exc: OSError) -> str:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return "disk full"
    if exc.errno == errno.EROFS:
        return "read-only file system"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if exc.errno == errno.ENOENT:
        return "this folder takes no new files"  # /proc, /sys: their folders exist and refuse new names
    return exc.strerror or str(exc)


def _nearest_folder(path: Path) -> Path:
    """The folder a new `path` would be made in: its parent, or the nearest ancestor that exists."""
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def _probe(folder: Path, name: str, option: str, path: Path) -> None:
    """Create and remove a hidden file in `folder`: the kernel says whether anything can be written there."""
    if not folder.is_dir():
        raise ConfigError(f"{option} {path}: {folder} is a file, not a folder", hint="name a path inside a folder")
    probe = folder / f".{name}.probe-{os.getpid()}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise ConfigError(
            f"{option} {path}: cannot write in {folder} ({_why(exc)})", hint="name a path in a folder you can write to (e.g. under reports/)"
        ) from None
    os.close(fd)
    probe.unlink(missing_ok=True)


KERNEL_TREES = (Path("/proc"), Path("/sys"), Path("/dev"))  # the kernel's and the devices' files, never an output


def _refuse_kernel_trees(path: Path, option: str) -> None:
    for where in (path, path.resolve()):
        tree = next((t for t in KERNEL_TREES if where == t or t in where.parents), None)
        if tree is not None:
            raise ConfigError(
                f"{option} {path}: {tree} holds the kernel's and the devices' files, not a command's output",
                hint="name a path in a folder you can write to (e.g. under reports/)",
            )


def _refuse_inputs(path: Path, option: str, reads: Reads) -> None:
    resolved = path.resolve()
    for read, what in reads:
        if read is None:
            continue
        read = Path(read)
        same = resolved == read.resolve()
        if not same and path.exists() and read.exists():
            try:
                same = os.path.samefile(path, read)
            except OSError:
                same = False
        if same:
            raise ConfigError(
                f"{option} {path}: that is {what}, which this command reads; an output never replaces an input",
                hint="name another file for the output",
            )


def check_output_file(path: Path, option: str, reads: Reads = ()) -> Path:
    """Refuse (ConfigError) a file output that cannot be written or would replace an input; returns it, absolute.
    Nothing is created."""
    path = Path(path).expanduser().absolute()
    _refuse_kernel_trees(path, option)
    _refuse_inputs(path, option, reads)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise ConfigError(f"{option} {path}: cannot be used ({_why(exc)})", hint="name another file for the output") from None
    if mode is not None and stat.S_ISDIR(mode):
        raise ConfigError(f"{option} {path} is a folder; a file is expected", hint=f"name a file, e.g. {path / 'report.json'}")
    if mode is not None and not stat.S_ISREG(mode):
        raise ConfigError(f"{option} {path} is not a regular file (a device, a pipe or a socket)", hint="name a file on a disk")
    _probe(_nearest_folder(path.resolve()), path.name, option, path)
    return path


def check_output_folder(folder: Path, option: str, reads: Reads = ()) -> Path:
    """Refuse (ConfigError) a folder output that is a file or cannot take files; returns it, absolute. Nothing is created."""
    folder = Path(folder).expanduser().absolute()
    _refuse_kernel_trees(folder, option)
    _refuse_inputs(folder, option, reads)
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{option} {folder} is a file; a folder is expected", hint="name a folder (it is made when it does not exist)")
    resolved = folder.resolve()
    where = resolved if resolved.is_dir() else _nearest_folder(resolved)
    _probe(where, folder.name or "output", option, folder)
    return folder


def pipeline_reads(path: Path) -> list[tuple[Path, str]]:
    """The files a command reads for the pipeline file at `path`: the file, its model (and the original it was made
    from), its recorded sources, labels and cascade models. Where the file cannot be read, only itself (the command
    says what is wrong with it next)."""
    from sdk.errors import SdkError
    from sdk.spec import load_pipeline

    reads: list[tuple[Path, str]] = [(Path(path), "the pipeline file")]
    try:
        pipeline = load_pipeline(path, check_files=False)
    except (SdkError, OSError):
        return reads
    reads.append((pipeline.model_path, "the pipeline's model (model.path)"))
    if pipeline.reference_path is not None:
        reads.append((pipeline.reference_path, "the pipeline's original model (model.reference)"))
    for camera in pipeline.spec.cameras:
        source = pipeline.source_file(camera)
        if source is not None:
            reads.append((source, f"the pipeline's source ({pipeline.source_key(camera)})"))
    reads += [(file, f"a file the pipeline reads ({key})") for file, key in pipeline.cascade_files()]
    labels = pipeline.labels_file()
    if labels is not None:
        reads.append((labels, "the pipeline's label file"))
    return reads


def write_output(path: Path, data: bytes | str, option: str) -> Path:
    """`data` at `path`, whole or not at all (write_whole); a failure is one error line and leaves nothing behind."""
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        return write_whole(Path(path), data)
    except OSError as exc:
        raise ConfigError(f"{option} {path}: cannot be written ({_why(exc)})", hint="free space or name another path, then run again") from None


__all__ = ["check_output_file", "check_output_folder", "pipeline_reads", "write_output"]
