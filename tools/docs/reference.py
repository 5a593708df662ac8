"""The documentation's reference pages, generated from the code (never edited by hand).

    python -m tools.docs.reference            # rewrite docs/reference/{pipeline,target-file,cli,exit-codes}.md
    python -m tools.docs.reference --check    # exit 1 and name the stale pages (what tests/test_docs.py checks)

- pipeline.md: every key of a pipeline file, walked from `Pipeline.model_json_schema()` (the pydantic
  models in sdk/spec): type, default, allowed values or range, meaning (the schema's `description`,
  else a line from meanings.py).
- cli.md: every command and flag of `sdk` / `deploy` from `tools.cli.build_parser()`, the pytest
  plugin's options from `tools.validation.pytest_plugin.pytest_addoption`, and the device side's usage text.
- target-file.md: every key of a target file, from `tools.targets.spec.TargetSpec`.
- exit-codes.md: the exit codes of sdk.errors and the error classes that carry them.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

from tools.docs.cli_pages import cli_reference, exit_codes_reference
from tools.docs.header import OUT, REGENERATE
from tools.docs.key_pages import pipeline_reference, target_reference

PAGES = {"pipeline.md": pipeline_reference, "target-file.md": target_reference, "cli.md": cli_reference, "exit-codes.md": exit_codes_reference}


def generate(out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, make in PAGES.items():
        path = out / name
        path.write_text(make())
        written.append(path)
    return written


def stale(out: Path = OUT) -> dict[str, str]:
    """Pages whose committed text differs from what the code generates now: name -> unified diff."""
    found = {}
    for name, make in PAGES.items():
        path = out / name
        want = make()
        have = path.read_text() if path.is_file() else ""
        if have != want:
            diff = difflib.unified_diff(have.splitlines(), want.splitlines(), f"committed {name}", f"generated {name}", lineterm="", n=1)
            found[name] = "\n".join(list(diff)[:40])
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=REGENERATE, description="generate docs/reference/*.md from the code")
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when a page is stale")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    if args.check:
        found = stale(args.out)
        for name, diff in found.items():
            print(f"{args.out / name} is stale:\n{diff}\n")
        if found:
            print(f"regenerate with: {REGENERATE}")
        return 1 if found else 0
    for path in generate(args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
