"""Strict, safe YAML reading for pipeline and target files.

PyYAML's `safe_load` already refuses python tags, but it silently keeps the last of two
duplicate keys, reports no positions for later validation errors, and recurses once per level
of nesting (10,000 nested brackets end in RecursionError, an anchor used inside itself builds a
list that contains itself). We compose the node tree with the safe loader once, refusing
nesting deeper than MAX_DEPTH as it is composed; reject duplicates, alias bombs, recursive
aliases and overlong scalars while walking it, keeping the line of every YAML path so that a
schema error can name it; and only then build the data from the same tree.
"""


from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sdk.errors import ConfigError

MAX_FILE_BYTES = 256 * 1024
MAX_NODES = 20_000  # aliases are expanded while walking: caps "billion laughs" documents
MAX_DEPTH = 64  # levels of nesting, aliases expanded; a pipeline file has about 5
MAX_SCALAR_CHARS = 16_384  # one value
MAX_NUMBER_CHARS = 64  # one number as written (Python refuses integers of more than 4300 digits)

YamlPath = tuple[Any, ...]


def format_yaml_path(path: YamlPath) -> str:
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text or "(top level)"


@dataclass(frozen=True)
class YamlDocument:
    """Plain data of one YAML file plus the line (1-based) of every path in it."""

    path: Path
    data: Any
    lines: dict[YamlPath, int]

    def line_of(self, path: YamlPath) -> int | None:
        # The closest enclosing path that has a line (a missing key has none of its own).
        while True:
            if path in self.lines:
                return self.lines[path]
            if not path:
                return None
            path = path[:-1]

    def where(self, path: YamlPath) -> str:
        line = self.line_of(path)
        location = f"{self.path}:{line}" if line else str(self.path)
        return f"{location}: {format_yaml_path(path)}"


def read_yaml(path: Path, *, max_bytes: int = MAX_FILE_BYTES) -> "YamlDocument":
    """Read a YAML mapping from `path` safely, or raise ConfigError naming the problem."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found", hint="check the path") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    if size > max_bytes:
        raise ConfigError(
            f"{path}: file is {size} bytes; at most {max_bytes} bytes are allowed",
            hint="a pipeline file holds settings only; keep data in separate files it names",
        )
    with path.open("rb") as handle:
        raw = handle.read(max_bytes + 1)
    if len(raw) > max_bytes:  # grew between stat and read
        raise ConfigError(f"{path}: file is over {max_bytes} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None

    loader = _BoundedLoader(text, path)
    try:
        try:
            node = loader.get_single_node()
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}:{_mark_line(exc)}: invalid YAML: {_problem(exc)}") from None
        if node is None:
            raise ConfigError(f"{path}: file is empty", hint="see pipelines/pedestrian.yaml for an example")
        walker = _Walker(path)
        walker.walk(node, ())
        try:
            data = loader.construct_document(node)
        except yaml.YAMLError as exc:
            # Python tags (`!!python/object/apply:os.system`) end here: the safe loader has no
            # constructor for them.
            raise ConfigError(
                f"{path}:{_mark_line(exc)}: {_problem(exc)}",
                hint="only plain YAML (maps, lists, strings, numbers, booleans) is allowed; no tags",
            ) from None
        except ValueError as exc:  # an integer past Python's 4300 digits
            raise ConfigError(f"{path}: a value is not a usable number: {exc}", hint="write numbers with at most 18 digits") from None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys, got {type(data).__name__}")
    return YamlDocument(path=path, data=data, lines=walker.lines)


def _mark_line(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    return str(mark.line + 1) if mark is not None else "?"


def _problem(exc: yaml.YAMLError) -> str:
    return str(getattr(exc, "problem", None) or exc).strip()


_NUMBER_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")
NESTING_HINT = "a pipeline file is a few levels deep; remove the extra nesting or the aliases that repeat it"


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing nesting deeper than MAX_DEPTH while it composes (its composer recurses per level)."""

    def __init__(self, text: str, path: Path) -> None:
        super().__init__(text)
        self._path = path
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                line = self.peek_event().start_mark.line + 1
                raise ConfigError(f"{self._path}:{line}: nesting deeper than {MAX_DEPTH} levels", hint=NESTING_HINT)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


class _Walker:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines: dict[YamlPath, int] = {}
        self.count = 0
        self.open: set[int] = set()  # the collections being walked: one met again is inside itself

    def walk(self, node: yaml.Node, at: YamlPath) -> None:
        self.count += 1
        line = node.start_mark.line + 1
        if self.count > MAX_NODES:
            raise ConfigError(
                f"{self.path}: more than {MAX_NODES} YAML nodes (after expanding aliases)",
                hint="pipeline files are small; remove the repeated aliases",
            )
        if len(at) > MAX_DEPTH:
            raise ConfigError(
                f"{self.path}:{line}: {format_yaml_path(at[:4])}...: nesting deeper than {MAX_DEPTH} levels (after expanding aliases)",
                hint=NESTING_HINT,
            )
        if id(node) in self.open:
            raise ConfigError(
                f"{self.path}:{line}: {format_yaml_path(at)}: a recursive alias (an anchor used inside its own value)",
                hint="an alias may repeat a value defined before it, not the value it is part of",
            )
        if isinstance(node, yaml.ScalarNode) and len(node.value) > MAX_SCALAR_CHARS:
            raise ConfigError(
                f"{self.path}:{line}: {format_yaml_path(at)}: a value of {len(node.value)} characters; at most {MAX_SCALAR_CHARS} are allowed",
                hint="a pipeline file holds settings only; keep data in separate files it names",
            )
        if isinstance(node, yaml.ScalarNode) and node.tag in _NUMBER_TAGS and len(node.value) > MAX_NUMBER_CHARS:
            raise ConfigError(
                f"{self.path}:{line}: {format_yaml_path(at)}: a number of {len(node.value)} characters; allowed: at most {MAX_NUMBER_CHARS}",
                hint="every number of a pipeline file has a documented range, far below this; README.md lists them",
            )
        self.lines.setdefault(at, line)
        if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)):
            self.open.add(id(node))
            try:
                self._walk_children(node, at)
            finally:
                self.open.discard(id(node))

    def _walk_children(self, node: yaml.Node, at: YamlPath) -> None:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, value_node in node.value:
                line = key_node.start_mark.line + 1
                # A list or mapping as a key fails later (unhashable); never repr() it: it may contain itself.
                key = key_node.value if isinstance(key_node, yaml.ScalarNode) else f"<{key_node.id} key at line {line}>"
                if key in seen:
                    where = format_yaml_path((*at, key))
                    raise ConfigError(
                        f"{self.path}:{line}: {where}: duplicate key {key!r} (first at line {seen[key]})",
                        hint="YAML keeps only the last of duplicate keys; delete one of them",
                    )
                seen[key] = line
                self.walk(value_node, (*at, key))
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                self.walk(item, (*at, index))
