"""MkDocs hooks (tools/mkdocs.yml `hooks:`): the decision records fill their own nav section and index.

Every docs/decisions/NNNN-*.md is listed, whoever adds it, without editing mkdocs.yml: a record
added on another branch appears in the site (and in the index page) when it is merged. Standard
library only, nothing fetched: the build stays offline.
"""

from __future__ import annotations

import re
from pathlib import Path

DECISIONS_SECTION = "Decisions"
DECISIONS_INDEX = "decisions/index.md"
RECORD = re.compile(r"^\d{4}-.+\.md$")
# Pages that exist only on some branches: listed when present, after the named page.
OPTIONAL_PAGES = (("What has run where", "GPU runs", "gpu-runs.md"),)


def records(docs_dir: Path) -> list[tuple[str, str]]:
    """(title, path relative to docs_dir) of every decision record, in number order."""
    found = []
    for path in sorted((docs_dir / "decisions").glob("*.md")):
        if not RECORD.match(path.name):
            continue
        title = path.stem
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.startswith("# "):
                title = line[2:].strip()
                break
        found.append((title, f"decisions/{path.name}"))
    return found


def _with_optional_pages(nav: list, docs_dir: Path) -> list:
    out = []
    for entry in nav:
        out.append(entry)
        if not isinstance(entry, dict):
            continue
        for after, title, page in OPTIONAL_PAGES:
            if after in entry and (docs_dir / page).is_file():
                out.append({title: page})
    return out


def on_config(config, **kwargs):
    docs_dir = Path(config["docs_dir"])
    nav = config.get("nav")
    if not nav:
        return config
    nav = _with_optional_pages(list(nav), docs_dir)
    for entry in nav:
        if isinstance(entry, dict) and DECISIONS_SECTION in entry:
            entry[DECISIONS_SECTION] = [{"About the records": DECISIONS_INDEX}] + [{title: path} for title, path in records(docs_dir)]
    config["nav"] = nav
    return config


def on_page_markdown(markdown, page, config, files, **kwargs):
    if page.file.src_uri != DECISIONS_INDEX:
        return markdown
    lines = [f"- [{title}]({Path(path).name})" for title, path in records(Path(config["docs_dir"]))]
    return markdown.replace("<!-- records -->", "\n".join(lines))
