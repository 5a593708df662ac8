"""Hostile YAML: alias bombs, recursive aliases, deep nesting and huge scalars end in one ConfigError, never RecursionError."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sdk.errors import ConfigError
from sdk.spec import load_pipeline
from sdk.spec.yaml_source import MAX_DEPTH, MAX_NODES, read_yaml


def refused(tmp_path: Path, text: str) -> ConfigError:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_pipeline(path)
    assert "\n" not in info.value.message and info.value.hint
    assert info.value.message.startswith(str(path)), info.value.message
    return info.value


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """`levels` anchors, each a list of `width` aliases of the one before: width**levels leaves."""
    names = [f"l{i}" for i in range(levels)]
    lines = [f"{names[0]}: &{names[0]} [{', '.join(['lol'] * width)}]"]
    lines += [f"{name}: &{name} [{', '.join([f'*{previous}'] * width)}]" for previous, name in zip(names, names[1:], strict=False)]
    return "version: 1\n" + "\n".join(lines) + "\n"


def test_an_alias_bomb_is_refused_after_a_bounded_walk(tmp_path):
    error = refused(tmp_path, alias_bomb())
    assert f"more than {MAX_NODES} YAML nodes (after expanding aliases)" in error.message


@pytest.mark.parametrize(
    "text",
    [
        "version: 1\nname: &loop [*loop]\n",
        "version: 1\nname: &loop {again: *loop}\n",
        "version: 1\nname: &outer [1, {inner: [2, *outer]}]\n",
    ],
    ids=["list", "mapping", "two-levels-down"],
)
def test_a_recursive_alias_is_refused(tmp_path, text):
    error = refused(tmp_path, text)
    assert "p.yaml:2: name" in error.message and "recursive alias" in error.message


@pytest.mark.parametrize(
    "text",
    ["version: 1\nname: " + "[" * 10_000 + "]" * 10_000 + "\n", "version: 1\nname: " + "{a: " * 10_000 + "1" + "}" * 10_000 + "\n"],
    ids=["lists", "mappings"],
)
def test_nesting_ten_thousand_levels_deep_is_refused_while_parsing(tmp_path, text):
    error = refused(tmp_path, text)
    assert f"p.yaml:2: nesting deeper than {MAX_DEPTH} levels" in error.message


def test_nesting_built_out_of_aliases_is_refused_too(tmp_path):
    # Each anchor is 40 levels deep; the second holds the first inside its own 40: 80 levels once expanded.
    deep = "[" * 39 + "1" + "]" * 39
    text = f"version: 1\na: &a [{deep}]\nname: {'[' * 39}*a{']' * 39}\n"
    error = refused(tmp_path, text)
    assert f"nesting deeper than {MAX_DEPTH} levels (after expanding aliases)" in error.message


def test_nothing_recurses_even_under_a_low_recursion_limit(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("version: 1\nname: " + "[" * 5000 + "]" * 5000 + "\n")
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(400)  # the composer recurses a few frames per level: 64 levels fit
    try:
        with pytest.raises(ConfigError, match="nesting deeper"):
            read_yaml(path)
    finally:
        sys.setrecursionlimit(limit)


def test_a_number_with_thousands_of_digits_is_refused_before_python_parses_it(tmp_path):
    error = refused(tmp_path, "version: 1\nname: x\nmodel: {threads: " + "9" * 5000 + "}\n")
    assert "p.yaml:3: model.threads: a number of 5000 characters; allowed: at most 64" in error.message


def test_a_huge_string_is_refused(tmp_path):
    error = refused(tmp_path, "version: 1\nname: " + "x" * 20_000 + "\n")
    assert "p.yaml:2: name: a value of 20000 characters" in error.message


def test_ordinary_aliases_still_work(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("version: 1\nlimits: &limits {p50_ms: 30, p99_ms: 50}\nbudgets:\n  stages:\n    infer: *limits\n    sink: *limits\n")
    document = read_yaml(path)
    assert document.data["budgets"]["stages"]["sink"] == {"p50_ms": 30, "p99_ms": 50}
    assert document.line_of(("budgets", "stages", "sink", "p99_ms")) == 2
