"""The release's `sdk` as bytecode, for a device whose Python is the host's: compiled on the host, shipped, signed and
verified with the release like its sources.

A device process never writes bytecode into a release (it would no longer be what its manifest lists), so without
these every process a release starts compiles each module it imports from source: about 0.3 CPU-s of a measured
run's start on an x86 host, more on a vehicle's cores (decision 1240). With them, Python reads
`sdk/**/__pycache__/<module>.<cache tag>.pyc` instead.

- Only where the device's Python is the same implementation and version as the host's (the probe's `python_abi`,
  e.g. `cp310` for JetPack 6): bytecode is specific to a Python version. Elsewhere the release carries sources only,
  as before.
- Checked-hash pycs: Python reads each module's source and uses its pyc only if the source's hash is the one the
  pyc was compiled from; a pyc that does not match its source is never used. Both are files of the manifest, so
  both are checked, byte for byte, at every start (sdk/store/verify.py): a changed or planted pyc fails that check.
- Compiled in a fresh, isolated interpreter in a fixed order: marshal's output depends on what else the compiling
  process holds, and a release must be the same bits every time it is built from the same sources. Kept in the host's
  shared cache (tools/state.py) by the sources' digest; a process reuses what it compiled.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from sdk.errors import ReleaseError

COMPILE = r"""
import py_compile, sys
out = sys.argv[1]
for line in sys.stdin.read().splitlines():
    pyc, name, source = line.split("\t")
    py_compile.compile(source, cfile=out + "/" + pyc, dfile=name, doraise=True, invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
"""

_compiled: dict[str, dict[str, Path]] = {}  # digest -> release path -> pyc, this process's


def host_abi() -> str | None:
    """The probe's `python_abi` of a device that reads this host's bytecode (CPython only)."""
    if sys.implementation.name != "cpython" or sys.implementation.cache_tag is None:
        return None
    from sdk.probe import python_abi

    return python_abi()


def pyc_path(module: str) -> str:
    """`sdk/a/b.py` -> `sdk/a/__pycache__/b.<cache tag>.pyc`: where Python looks for its bytecode."""
    folder, _, name = module.rpartition("/")
    return f"{folder}/__pycache__/{name[: -len('.py')]}.{sys.implementation.cache_tag}.pyc"


def bytecode_files(sources: dict[str, Path], device_abi: str | None, cache: Path) -> dict[str, Path]:
    """Release path -> pyc for each `sdk/**.py` of `sources` (release path -> host file), where the device's
    `python_abi` is this host's; else nothing."""
    modules = {name: path for name, path in sources.items() if name.startswith("sdk/") and name.endswith(".py")}
    if not modules or device_abi is None or device_abi != host_abi():
        return {}
    digest = hashlib.sha256(f"{sys.version}\0{sys.implementation.cache_tag}\0".encode())
    for name in sorted(modules):
        digest.update(f"{name}\0{hashlib.sha256(modules[name].read_bytes()).hexdigest()}\0".encode())
    key = digest.hexdigest()[:32]
    if key not in _compiled:
        folder = cache / "bytecode" / key
        if not _complete(folder, modules):
            _compile(modules, folder)
        _compiled[key] = {pyc_path(name): folder / pyc_path(name) for name in sorted(modules)}
    return dict(_compiled[key])


def _complete(folder: Path, modules: dict[str, Path]) -> bool:
    return all((folder / pyc_path(name)).is_file() for name in modules)


def _compile(modules: dict[str, Path], folder: Path) -> None:
    """Compiled into a temporary folder, then renamed into place: a folder of the cache is complete or absent, and
    one another process is reading is never removed (deploys of one machine share the cache)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        for name in modules:
            (staging / pyc_path(name)).parent.mkdir(parents=True, exist_ok=True)
        lines = "".join(f"{pyc_path(name)}\t{name}\t{modules[name]}\n" for name in sorted(modules))
        done = subprocess.run([sys.executable, "-I", "-S", "-B", "-c", COMPILE, str(staging)], input=lines, capture_output=True, text=True)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no message"])[-1]
            raise ReleaseError(f"compiling the release's sdk failed: {last}", hint="check that the SDK's own files are intact (reinstall it)")
        try:
            os.rename(staging, folder)
        except OSError:
            if _complete(folder, modules):  # another deploy put the same bytecode there first: theirs is identical
                return
            if not folder.is_dir():
                raise
            aside = folder.with_name(f".{folder.name}.incomplete-{os.getpid()}")  # a cache emptied by hand: replaced
            os.rename(folder, aside)
            os.rename(staging, folder)
            shutil.rmtree(aside, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
