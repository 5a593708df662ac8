"""The README's and the getting-started page's claims, checked against the code where code can check them: every
command and flag they show exists, the exit codes, the report folder's files, where the local target keeps its
releases, the example's budgets, the tests named in the skip table (docs/contributing.md), and the values the model section tells a user
to type. (The claims a run must show, such as the report folder and its `latest` link, are checked by the tests
that run it: tests/tools/validation/test_evidence.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
STARTED = (REPO / "docs" / "getting-started.md").read_text()


def _commands() -> dict:
    from tools.cli import build_parser

    parser = build_parser()
    return parser._subparsers._group_actions[0].choices


def _flags(parser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def test_every_command_and_flag_in_the_readme_table_exists():
    commands = _commands()
    rows = [line for line in README.split("## Commands", 1)[1].split("\n`T` is", 1)[0].splitlines() if line.startswith("| `")]
    assert len(rows) >= 12, rows
    for row in rows:
        shown, said = row.split(" | ")[0].strip("| "), row.split(" | ")[1]
        for command in re.findall(r"`((?:sdk|deploy) [^`]+)`", f"{shown} {said}"):
            words = command.replace("\\|", "|").split()
            if words[0] == "deploy":
                name, rest = "deploy", words[1:]
            else:
                name, rest = words[1], words[2:]
            for alternative in [name, *(w for w in rest if re.fullmatch(r"[a-z][a-z-]+", w) and name == "targets")]:
                assert alternative in commands or alternative in commands["targets"]._subparsers._group_actions[0].choices, (row, alternative)
            parser = commands[name]
            for flag in re.findall(r"--[a-z][a-z-]*", command + said):
                owners = [parser, *commands.values()] if name == "targets" else [parser]
                assert any(flag in _flags(p) for p in owners), (row, flag)


def test_the_exit_codes_the_readme_gives_are_the_codes():
    from sdk.errors import EXIT_BUDGET_FAIL, EXIT_INCONCLUSIVE, EXIT_PASS, EXIT_USAGE, EXIT_USER_ERROR

    said = " ".join(README.split("Exit\ncodes:", 1)[1].split("\n\n", 1)[0].split())
    for code, word in ((EXIT_PASS, "PASS"), (EXIT_USER_ERROR, "error"), (EXIT_USAGE, "usage"), (EXIT_BUDGET_FAIL, "FAIL")):
        assert f"**{code}** {word}" in said, (code, word, said)
    assert f"**{EXIT_INCONCLUSIVE}** INCONCLUSIVE" in said


def test_the_report_folder_holds_the_files_the_readme_names():
    from sdk.runtime.junit import JUNIT_FILE
    from sdk.runtime.report import REPORT_FILE
    from sdk.spec import load_pipeline
    from tools.evidence.html_report import HTML_FILE

    sinks = {getattr(s, "path", None) for s in load_pipeline(REPO / "pipelines" / "pedestrian.yaml").spec.sinks}
    for name in (REPORT_FILE, HTML_FILE, JUNIT_FILE, *sinks):
        assert f"`{name}`" in README and f"`{name}`" in STARTED, name
    assert "reports/pedestrian/<UTC time>-local-deploy/" in README


def test_the_local_target_keeps_its_releases_where_the_pages_say(monkeypatch):
    from tools.state import state_dir
    from tools.targets import resolve_target

    monkeypatch.delenv("SDK_STATE_DIR", raising=False)
    root = resolve_target("local").root
    assert root == state_dir() / "targets" / "local" and state_dir().name == ".sdk"
    assert "`./.sdk/targets/local`" in README and "`./.sdk/targets/local` (or `$SDK_STATE_DIR`)" in STARTED


def test_the_examples_budgets_are_the_ones_the_page_gives():
    budgets = yaml.safe_load((REPO / "pipelines" / "pedestrian.yaml").read_text())["budgets"]
    p50, deadline = budgets["end_to_end"]["p50_ms"], budgets["deadline_ms"]
    assert f"p50 ≤ {p50} ms end to end, deadline {deadline} ms" in STARTED
    assert round(1000 / 30, 1) == p50 == deadline  # "a 30 fps camera's"


def test_every_test_the_skip_table_names_exists():
    table = (REPO / "docs" / "contributing.md").read_text().split("## Which tests skip without what", 1)[1]
    named = re.findall(r"`(tests/[^`]+\.py)`", table)
    assert len(named) >= 10, named
    for path in named:
        assert list(REPO.glob(path)), path
    for short in re.findall(r"`((?!tests/)(?:release/)?test_[\w*]*\.py)`", table):  # relative to a folder named before it
        assert list(REPO.glob(f"tests/**/{short}")), short


def test_the_values_the_model_section_gives_are_those_the_code_writes_and_the_tests_use():
    from tests.tools.models.test_init_pipeline import BLAZEFACE_EDITS
    from tools.models.family_decoders import PADDLE_DET_NORMALIZE
    from tools.models.init_pipeline import RUN_FRAMES

    assert f"deploy --target local models/detector.yaml --frames {RUN_FRAMES}" in STARTED and f"{RUN_FRAMES} frames" in STARTED
    for key, value in BLAZEFACE_EDITS.items():
        shown = yaml.safe_dump(value, default_flow_style=True, width=1000, sort_keys=False).strip().removesuffix("...").strip()
        assert f"`{key.rsplit('.', 1)[1]}: {shown}`" in STARTED, (key, shown)
    normalize = {"scale": 0.00392156862745098, "mean": PADDLE_DET_NORMALIZE["mean"], "std": PADDLE_DET_NORMALIZE["std"]}
    assert abs(PADDLE_DET_NORMALIZE["scale"] - normalize["scale"]) < 1e-15
    assert "`{scale: 0.00392156862745098, mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]}`" in STARTED


def test_the_tour_suggests_a_rollback_only_once_there_is_a_release_to_go_back_to():
    """Right after the first deploy there is no earlier release: `sdk rollback` would refuse. The tour offers it after a second."""
    for page in (REPO / "README.md", REPO / "docs" / "getting-started.md"):
        text = " ".join(page.read_text().split())
        offered = [sentence for sentence in re.split(r"(?<=[.;])\s", text) if "sdk rollback --target sim" in sentence]
        assert offered and all("second" in sentence for sentence in offered), (page.name, offered)
