"""MkDocs hooks (tools/mkdocs.yml `hooks:`): the decision records' index page, grouped by area.

Every docs/decisions/NNNN-*.md is listed on the one index page (the left navigation holds only the
index: `not_in_nav` in mkdocs.yml), whoever adds it, without editing mkdocs.yml: a record added on
another branch appears when it is merged, under its area by number (`AREAS`; "Other" until placed).
Standard library only, nothing fetched: the build stays offline.
"""

from __future__ import annotations

import re
from pathlib import Path

DECISIONS_INDEX = "decisions/index.md"
RECORD = re.compile(r"^\d{4}-.+\.md$")
# The areas of the index, each with the record numbers it holds (ranges inclusive), in the order shown.
AREAS = (
    (
        "Releases, the store, signing and trust",
        ((1, 3), (8, 8), (10, 10), (12, 12), (120, 122), (300, 311), (430, 430), (801, 802), (810, 810), (912, 912), (950, 953), (960, 962)),
    ),
    ("Targets, SSH and fleets", ((9, 9), (11, 11), (13, 15), (201, 202), (803, 803), (811, 812), (954, 954), (1110, 1110), (1169, 1169))),
    (
        "Sources, the frame loop and outputs",
        ((5, 6), (17, 17), (36, 37), (43, 43), (104, 109), (113, 116), (601, 605), (620, 622), (965, 965), (967, 967), (1020, 1025)),
    ),
    ("The service on the vehicle", ((34, 35), (101, 103), (110, 112), (920, 920), (966, 966))),
    ("Models, decoders and cascades", ((7, 7), (501, 504), (530, 563))),
    ("INT8, DLA and TensorRT", ((19, 28), (401, 407), (412, 413), (415, 416), (630, 632), (1060, 1060), (1125, 1125), (1150, 1150))),
    ("The CUDA path", ((29, 29), (38, 41), (408, 411), (414, 414), (417, 418), (440, 440), (451, 461), (1014, 1014), (1251, 1251))),
    (
        "Verdicts, validation and reports",
        (
            (4, 4),
            (16, 16),
            (18, 18),
            (30, 33),
            (42, 42),
            (203, 203),
            (450, 450),
            (564, 565),
            (921, 921),
            (964, 964),
            (1000, 1007),
            (1040, 1043),
            (1135, 1135),
            (1186, 1186),
        ),
    ),
    (
        "Performance, profiles and optimization",
        ((700, 706), (770, 770), (914, 914), (968, 968), (1010, 1013), (1015, 1019), (1100, 1100), (1140, 1142), (1155, 1155), (1160, 1160))
        + ((1200, 1204), (1210, 1214), (1255, 1255), (1259, 1264)),
    ),
    ("The run history", ((750, 754), (963, 963))),
    (
        "Tests and CI",
        ((204, 205), (910, 911), (913, 913), (930, 940), (1115, 1115), (1120, 1120), (1130, 1130), (1165, 1165), (1170, 1172), (1175, 1185))
        + ((1187, 1199), (1205, 1209), (1215, 1250), (1252, 1252), (1256, 1258)),
    ),
    ("The code's architecture and its docs", ((1050, 1059), (1145, 1149))),
)
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
    config["nav"] = _with_optional_pages(list(nav), docs_dir)
    return config


def area_of(path: str) -> str:
    number = int(Path(path).name[:4])
    return next((title for title, spans in AREAS if any(low <= number <= high for low, high in spans)), "Other")


def grouped(found: list[tuple[str, str]]) -> str:
    """The index's Markdown: one section an area, its records in number order."""
    sections = []
    for area in [title for title, _ in AREAS] + ["Other"]:
        lines = [f"- [{title}]({Path(path).name})" for title, path in found if area_of(path) == area]
        if lines:
            sections.append(f"## {area}\n\n" + "\n".join(lines))
    return "\n\n".join(sections)


def on_page_markdown(markdown, page, config, files, **kwargs):
    if page.file.src_uri != DECISIONS_INDEX:
        return markdown
    return markdown.replace("<!-- records -->", grouped(records(Path(config["docs_dir"]))))
