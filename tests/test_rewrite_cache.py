"""The controller's pre-written assertion-rewrite pycs (tests/rewrite_cache.py): what pytest itself would read."""

from __future__ import annotations

import os

from tests.rewrite_cache import prewrite, rewrite_functions


def test_pytest_still_has_what_the_prewrite_uses():
    """Where a pytest release renames its rewrite functions the prewrite turns itself off; this says so first."""
    assert rewrite_functions() is not None


def test_test_modules_get_pytests_own_rewritten_pyc_once_and_again_after_an_edit(pytestconfig, tmp_path):
    rewrite = rewrite_functions()
    test_file = tmp_path / "pkg" / "test_sample.py"
    test_file.parent.mkdir()
    test_file.write_text("def test_it():\n    assert 1 + 1 == 3\n")
    (tmp_path / "pkg" / "helper.py").write_text("VALUE = 1\n")
    (tmp_path / "pkg" / "broken_test.py").write_text("def (:\n")  # a test name that does not parse: left to pytest

    assert prewrite(pytestconfig, [tmp_path], tmp_path) == 1
    (tmp_path / "pkg" / "conftest.py").write_text("VALUE = 2\n")
    assert prewrite(pytestconfig, [test_file], tmp_path) == 1  # one file asked: its folders' conftest.py with it
    pyc = rewrite.get_cache_dir(test_file) / ("test_sample" + rewrite.PYC_TAIL)
    code = rewrite._read_pyc(test_file, pyc)
    assert code is not None  # pytest's own reader takes it
    inner = next(c for c in code.co_consts if hasattr(c, "co_name") and c.co_name == "test_it")
    assert any(name.startswith("@py_assert") for name in inner.co_varnames)  # the asserts are rewritten
    written = sorted(p.name for p in pyc.parent.iterdir())
    assert written == sorted([pyc.name, "conftest" + rewrite.PYC_TAIL])  # the helper is not pytest's to rewrite

    assert prewrite(pytestconfig, [tmp_path], tmp_path) == 0  # current: left as it is
    test_file.write_text("def test_it():\n    assert 1 + 1 == 2\n\n")
    os.utime(test_file, (1, 1))
    assert rewrite._read_pyc(test_file, pyc) is None  # stale to pytest
    assert prewrite(pytestconfig, [tmp_path], tmp_path) == 1
    assert rewrite._read_pyc(test_file, pyc) is not None
