"""cli.md and exit-codes.md: every command and flag of `sdk` and the pytest plugin, the device's usage, the exit codes."""

from __future__ import annotations

import argparse
import ast
import inspect
import re
from pathlib import Path
from typing import Any

from tools.docs.header import HEADER, REGENERATE, REPO
from tools.docs.key_pages import cell
from tools.docs.meanings import CLI_MEANINGS


def _type_name(action: argparse.Action) -> str:
    from tools.cli import parser as cli

    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
        return "flag"
    kind = action.type
    if kind is None:
        text = "text"
    elif kind is Path:
        text = "path"
    elif kind is cli.positive:
        text = "whole number ≥ 1"
    elif kind in (cli.whole, int):
        text = "whole number"
    else:
        text = getattr(kind, "__name__", str(kind))
    if isinstance(action, argparse._AppendAction):
        text += ", repeatable"
    return text


def _argument_rows(parser: argparse.ArgumentParser) -> list[list[str]]:
    from sdk.spec.bounds import MAX_REPLAY_FRAMES

    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if action.option_strings:
            name = ", ".join(f"`{o}`" for o in action.option_strings)
        else:
            name = cell(f"`{action.metavar or action.dest.upper()}`") + " (positional)"
        allowed = ", ".join(f"`{c}`" for c in action.choices) if action.choices else ""
        if action.dest == "frames":
            allowed = f"1 to {MAX_REPLAY_FRAMES:,}".replace(",", " ") + " (outside: exit 1, before anything is sent)"
        required = "yes" if (action.required or not action.option_strings) else ""
        default = "" if action.default in (None, False, [], argparse.SUPPRESS) else f"`{action.default}`"
        rows.append([name, _type_name(action), required, default, allowed, cell(_prose(action.help or CLI_MEANINGS.get(action.dest, "")))])
    return rows


def _prose(text: str) -> str:
    """Help text for a table cell: a `<pipeline>` placeholder shown as written (not read as an HTML tag), and a long
    path or list (`reports/<pipeline>/...`, `cpu=2,memory=1`) free to wrap after its slashes, commas and dots."""
    parts = re.split(r"(`[^`]*`)", text)
    for number, part in enumerate(parts):
        if not part.startswith("`"):
            part = part.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            parts[number] = re.sub(r"\S{17,}", lambda m: re.sub(r"([/,.])(?=[^\s/.])", r"\1<wbr>", m.group()), part)
    return "".join(parts)


def _usage(prog: str, parser: argparse.ArgumentParser) -> str:
    """A usage line of our own: argparse's wrapping differs between Python versions."""
    groups = {}
    for group in parser._mutually_exclusive_groups:
        for action in group._group_actions:
            groups[action] = group
    parts: list[str] = []
    done: set[int] = set()
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            parts.append("SUBCOMMAND")
            continue
        if id(action) in done:
            continue
        group = groups.get(action)
        members = group._group_actions if group is not None else [action]
        texts = []
        for member in members:
            done.add(id(member))
            if not member.option_strings:
                texts.append(member.metavar or member.dest.upper())
            elif member.nargs == 0:
                texts.append(member.option_strings[0])
            else:
                texts.append(f"{member.option_strings[0]} {member.metavar or member.dest.upper()}")
        text = " | ".join(texts)
        required = (group.required if group is not None else action.required) or not action.option_strings
        if group is not None:
            parts.append(f"({text})" if required else f"[{text}]")
        else:
            parts.append(text if required else f"[{text}]")
    return _wrap([prog, *parts], len(prog) + 1)


def _wrap(parts: list[str], indent: int, width: int = 78) -> str:
    """Parts on lines of at most `width` characters (one part a line where it alone is longer), the later lines indented
    under the first argument: a usage line fits the page's code block (80 characters at 1280 px) without scrolling."""
    lines = [parts[0]]
    for part in parts[1:]:
        if len(lines[-1]) + 1 + len(part) > width and lines[-1].strip():
            lines.append(" " * indent + part)
        else:
            lines[-1] += " " + part
    return "\n".join(lines)


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            return [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    return []


class _OptionRecorder:
    def __init__(self) -> None:
        self.options: list[tuple[tuple[str, ...], dict[str, Any]]] = []
        self.description = ""

    def getgroup(self, name: str, description: str = "") -> _OptionRecorder:
        self.description = description
        return self

    def addoption(self, *names: str, **kwargs: Any) -> None:
        self.options.append((names, kwargs))


def _device_usage() -> str:
    """The device's USAGE, each command's meaning on the line under it (the columns side by side are too wide for the page)."""
    tree = ast.parse((REPO / "sdk" / "__main__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "USAGE" for t in node.targets):
            lines = []
            for line in ast.literal_eval(node.value).splitlines():
                command, _, meaning = line.strip().partition("  ")
                lines.append(("  " if line.startswith(" ") else "") + command.strip())
                if meaning.strip():
                    lines.append(" " * 6 + meaning.strip())
            return "\n".join(lines)
    raise RuntimeError("sdk/__main__.py has no USAGE")


def cli_reference() -> str:
    from tools.cli import build_parser
    from tools.validation import pytest_plugin

    parser = build_parser()
    out = [
        HEADER.format(command=REGENERATE, source="`tools/cli/parser.py: build_parser()`, `tools/validation/pytest_plugin.py` and `sdk/__main__.py`"),
        "# Command-line reference\n\n",
        f"`sdk` — {parser.description} `deploy ARGS` is `sdk deploy ARGS`. Every command prints one `error:` and one "
        "`hint:` line on a user error, never a traceback (`SDK_DEBUG=1` shows one); see [exit codes](exit-codes.md).\n\n",
        "`TARGET` is `local` (a release folder on this machine, under `./.sdk/targets/local` or `$SDK_STATE_DIR`), the name of a "
        "target file `targets/NAME.yaml` (or in `$SDK_TARGETS_DIR`), a comma-separated list of targets, or a group from "
        "`targets/groups.yaml`.\n\n",
        "Commands: " + ", ".join(f"[`{name}`](#sdk-{name})" for name, _, _ in _subcommands(parser)) + ".\n\n",
    ]
    columns = ("argument", "type", "required", "default", "allowed", "meaning")
    head = "| " + " | ".join(columns) + " |\n| " + " | ".join("---" for _ in columns) + " |\n"

    def section(prog: str, help_text: str, sub: argparse.ArgumentParser, level: str) -> None:
        anchor = prog.replace(" ", "-")
        out.append(f"{level} `{prog}` {{#{anchor}}}\n\n")
        if help_text:
            out.append(help_text[0].upper() + help_text[1:] + ".\n\n")
        out.append(f"```\n{_usage(prog, sub)}\n```\n\n")
        rows = _argument_rows(sub)
        if rows:
            out.append(head + "".join("| " + " | ".join(r) + " |\n" for r in rows) + "\n")
        for name, text, nested in _subcommands(sub):
            section(f"{prog} {name}", text, nested, level + "#")

    for name, text, sub in _subcommands(parser):
        section(f"sdk {name}", text, sub, "##")

    recorder = _OptionRecorder()
    pytest_plugin.pytest_addoption(recorder)
    out.append("## `pytest` options of the acceptance plugin {#pytest}\n\n")
    out.append(
        f"The package installs a pytest plugin (entry point `pytest11`): {recorder.description}. "
        "Run it as `pytest --target T --pipeline P tests/acceptance`; see the [CI guide](../guides/ci.md).\n\n"
    )
    out.append("| option | type | default | meaning |\n| --- | --- | --- | --- |\n")
    for names, kwargs in recorder.options:
        if kwargs.get("action") == "store_true":
            kind = "flag"
        else:
            given = kwargs.get("type")
            kind = {Path: "path", int: "whole number", None: "text"}.get(given) or getattr(given, "__name__", str(given)).strip("_")
        default = kwargs.get("default")
        shown = "" if default in (None, False) else f"`{default}`"
        out.append(f"| {', '.join(f'`{n}`' for n in names)} | {kind} | {shown} | {cell(_prose(kwargs.get('help', '')))} |\n")
    out.append("\n## `python -m sdk`: the device side {#device}\n\n")
    out.append("What the host runs on a target over SSH (or on this machine for `local`); a release carries it. You do not normally type these.\n\n")
    out.append(f"```\n{_device_usage().rstrip()}\n```\n")
    return "".join(out)


# ---------------------------------------------------------------- exit codes

EXIT_MEANINGS = {
    "EXIT_PASS": ("PASS", "every budget was checked and met (for `sdk selftest`: every check passed)"),
    "EXIT_USER_ERROR": (
        "error",
        "something the user can fix: one `error:` line and one `hint:` line, no traceback; a failed deploy leaves the last committed release running",
    ),
    "EXIT_USAGE": ("usage error", "the command line could not be parsed (argparse)"),
    "EXIT_BUDGET_FAIL": ("FAIL", "a measured value is over its budget (for `sdk selftest`: a check failed)"),
    "EXIT_INCONCLUSIVE": (
        "INCONCLUSIVE",
        "too few frames to bound a percentile, a requirement that could not be read, or no budgets declared "
        "(for `sdk selftest`: a check skipped for lack of hardware)",
    ),
}


def exit_codes_reference() -> str:
    import sdk.errors as errors

    out = [
        HEADER.format(command=REGENERATE, source="`sdk/errors.py`"),
        "# Exit codes\n\n",
        "Verdicts and error kinds never share a code, so a CI job can tell a slow build from a broken one.\n\n",
        "| code | name | meaning |\n| --- | --- | --- |\n",
    ]
    codes = {name: value for name, value in vars(errors).items() if name.startswith("EXIT_") and isinstance(value, int)}
    for name, value in sorted(codes.items(), key=lambda kv: kv[1]):
        short, meaning = EXIT_MEANINGS.get(name, (name, ""))
        out.append(f"| {value} | `{name}` ({short}) | {meaning} |\n")
    out.append("| 130 | interrupted | Ctrl-C |\n\n")
    out.append(
        "A fleet (several targets) exits with the worst of its targets: error > FAIL > INCONCLUSIVE > PASS, and writes "
        "`fleet.json` beside one report folder per target.\n\n"
    )
    out.append("## Errors and their codes\n\n| error | code | raised when |\n| --- | --- | --- |\n")
    classes = [c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, errors.SdkError)]
    for cls in sorted(classes, key=lambda c: (c is not errors.SdkError, c.__name__)):
        doc = " ".join((cls.__doc__ or "").split())
        out.append(f"| `{cls.__name__}` | {cls.exit_code} | {cell(doc)} |\n")
    return "".join(out)


# ---------------------------------------------------------------- writing and checking


__all__ = ["cli_reference", "exit_codes_reference"]
