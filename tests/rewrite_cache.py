"""pytest's assertion-rewritten modules, written once by the run's controller before its workers start.

pytest rewrites the asserts of every test module and conftest it imports, and of every module of a distribution that
registers a pytest plugin (this SDK does: `sdk` and `tools` are rewritten too). It keeps the result in a pyc of its own
beside the source, but writes none when bytecode writing is off: and the suite turns it off (tests/conftest.py) for
the processes it starts. Each of the four workers then rewrote all of them again (about 18 CPU-s each on CI's
machine, where every worker imports every test module to collect them), and so did each pytest a test starts.

`prewrite` writes those pycs once, in the controller, with pytest's own functions and its own choice of what to rewrite,
before any worker starts: each worker and each child pytest then reads them as it would its own. The pycs are keyed on
the source's size and modification time, exactly as pytest keys its own, so an edited file is rewritten as before.
It uses pytest's internal functions (its assertion rewriter has no public API for this); where they change, nothing is
written and the run is as before, only slower; tests/test_rewrite_cache.py says so first.
"""

from __future__ import annotations

from pathlib import Path


def rewrite_functions():
    """pytest's internal assertion-rewrite module, or None where it no longer has what `prewrite` uses."""
    try:
        from _pytest.assertion import rewrite
    except ImportError:
        return None
    needed = ("assertstate_key", "get_cache_dir", "PYC_TAIL", "_read_pyc", "_rewrite_test", "_write_pyc", "try_makedirs")
    return rewrite if all(hasattr(rewrite, name) for name in needed) else None


def sources(paths: list[Path], base: Path) -> list[Path]:
    """The Python files under `paths` (files or folders), with the conftest.py files of the folders from `base` down to
    each: what a run of those paths imports from them."""
    found = set()
    for path in paths:
        path = path.resolve()
        found.update(p for p in path.rglob("*.py") if "__pycache__" not in p.parts) if path.is_dir() else found.add(path)
        folder = path if path.is_dir() else path.parent
        while folder != base and base in folder.parents:
            found.add(folder / "conftest.py")
            folder = folder.parent
    return sorted(p for p in found if p.suffix == ".py" and p.is_file())


def prewrite(config, paths: list[Path], base: Path) -> int:
    """Write pytest's rewritten pyc for each Python file under `paths` (see `sources`) that pytest would rewrite when
    imported (module names relative to `base`) and that has no current one; the number written."""
    rewrite = rewrite_functions()
    if rewrite is None:
        return 0
    state = config.stash.get(rewrite.assertstate_key, None)
    hook = getattr(state, "hook", None)
    if hook is None or not hasattr(hook, "_should_rewrite"):
        return 0  # --assert=plain: nothing is rewritten
    written = 0
    for source in sources(paths, base):
        parts = source.relative_to(base).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if not hook._should_rewrite(name, str(source), state):
            continue
        pyc = rewrite.get_cache_dir(source) / (source.name[:-3] + rewrite.PYC_TAIL)
        if rewrite._read_pyc(source, pyc) is not None or not rewrite.try_makedirs(pyc.parent):
            continue
        try:
            stat, code = rewrite._rewrite_test(source, config)
        except SyntaxError:
            continue  # pytest reports it where it imports the file
        written += bool(rewrite._write_pyc(state, code, stat, pyc))
    return written
