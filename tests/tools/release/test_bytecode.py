"""The release's `sdk` bytecode (tools/release/bytecode.py): only for the host's Python, checked-hash pycs of exactly
the sources, the same bits whoever compiles them, and read by a device process in place of compiling."""

from __future__ import annotations

import importlib.util
import json
import marshal
import shutil
import subprocess
import sys
from pathlib import Path

from tools.release import bytecode
from tools.release.bundle import runtime_files
from tools.release.bytecode import bytecode_files, host_abi, pyc_path

CHECKED_HASH = 0b11  # the pyc header's flags: hash-based, checked against the source at every import (PEP 552)


def test_one_checked_hash_pyc_per_module_only_for_the_hosts_python_and_the_same_bits_from_any_process(tmp_path):
    sources = runtime_files()
    assert bytecode_files(sources, None, tmp_path / "a") == {}  # a device whose Python is unknown: sources only
    assert bytecode_files(sources, "cp39", tmp_path / "a") == {}  # another Python reads none of these
    assert not (tmp_path / "a").exists()

    files = bytecode_files(sources, host_abi(), tmp_path / "a")
    assert set(files) == {pyc_path(name) for name in sources}
    assert pyc_path("sdk/store/verify.py") == f"sdk/store/__pycache__/verify.{sys.implementation.cache_tag}.pyc"
    for name, source in sources.items():
        data, text = files[pyc_path(name)].read_bytes(), source.read_bytes()
        assert data[:4] == importlib.util.MAGIC_NUMBER
        assert int.from_bytes(data[4:8], "little") == CHECKED_HASH
        assert data[8:16] == importlib.util.source_hash(text)
        assert marshal.loads(data[16:]) == compile(text, name, "exec", dont_inherit=True), name

    # Compiled again by a process holding other modules (marshal's output depends on what the compiling process holds
    # when it compiles in-process): the same bits, so a release built twice from the same sources is the same release.
    script = (
        "import json, sys, sdk.runtime.runner\n"
        "from pathlib import Path\n"
        "from tools.release.bundle import runtime_files\n"
        "from tools.release.bytecode import bytecode_files, host_abi\n"
        "print(json.dumps({k: str(v) for k, v in bytecode_files(runtime_files(), host_abi(), Path(sys.argv[1])).items()}))\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "b")], capture_output=True, text=True, check=True)
    again = json.loads(done.stdout)
    assert set(again) == set(files)
    assert all(Path(again[name]).read_bytes() == files[name].read_bytes() for name in files)


def test_an_incomplete_cache_is_compiled_again_and_a_process_compiles_once(tmp_path, monkeypatch):
    sources = {name: path for name, path in runtime_files().items() if name.startswith("sdk/store/")}
    monkeypatch.setattr(bytecode, "_compiled", {})
    files = bytecode_files(sources, host_abi(), tmp_path)
    one = next(iter(files.values()))
    one.unlink()  # a host killed while the cache was written
    monkeypatch.setattr(bytecode, "_compiled", {})
    assert bytecode_files(sources, host_abi(), tmp_path) == files and one.is_file()
    calls = []
    monkeypatch.setattr(bytecode, "_compile", lambda *args: calls.append(args))
    shutil.rmtree(tmp_path / "bytecode")
    assert bytecode_files(sources, host_abi(), tmp_path) == files  # this process's own, not compiled again
    assert calls == []


def test_a_device_process_reads_the_pyc_in_place_of_its_source_and_never_one_that_does_not_match(tmp_path):
    release = tmp_path / "release"
    sources = runtime_files()
    for name, path in sources.items():
        (release / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, release / name)
    for name, path in bytecode_files(sources, host_abi(), tmp_path / "cache").items():
        (release / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, release / name)

    def imported(module: str) -> str:
        done = subprocess.run([sys.executable, "-B", "-v", "-c", f"import {module}"], cwd=release, capture_output=True, text=True, check=True)
        return done.stderr

    pyc = release / pyc_path("sdk/store/verify.py")
    assert f"# {pyc} matches {release / 'sdk/store/verify.py'}" in imported("sdk.store.verify")
    source = release / "sdk/store/verify.py"
    source.write_text(source.read_text() + "\nCHANGED = True\n")  # the source is not what the pyc was compiled from
    log = imported("sdk.store.verify")
    assert f"# {pyc} matches" not in log and f"# code object from '{pyc}'" not in log
