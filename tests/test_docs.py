"""The documentation: README and ARCHITECTURE stay short, the README's commands stay exact, the
generated reference matches the code, report.json matches its published schema, the site builds."""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
ARCHITECTURE = REPO / "ARCHITECTURE.md"
REFERENCE = REPO / "docs" / "reference"
REPORT_SCHEMA = REFERENCE / "report.schema.json"

INSTALL_AND_RUN = "pip install -e '.[test]' && deploy --target local pipelines/pedestrian.yaml"
TEST_COMMAND = "python -m pytest -n auto"


def test_readme_is_at_most_10_kb():
    size = len(README.read_bytes())
    assert size <= 10_000, f"README.md is {size} bytes; keep it under 10 KB and move detail into docs/"


def test_architecture_is_at_most_15_kb():
    size = len(ARCHITECTURE.read_bytes())
    assert size <= 15_000, f"ARCHITECTURE.md is {size} bytes; keep it under 15 KB: decisions go to docs/decisions/"


def test_readme_keeps_its_two_commands_verbatim():
    text = README.read_text()
    lines = [line.strip() for line in text.splitlines()]
    assert INSTALL_AND_RUN in lines, "README must show the set-up command exactly"
    assert TEST_COMMAND in lines, "README must show the test command exactly"
    ci = (REPO / ".ci" / "run").read_text()
    # In its virtual environment, where `python` is the environment's: the README's test command, word for word.
    assert f"\n{TEST_COMMAND}\n" in ci and "pipelines/pedestrian.yaml" in ci, ".ci/run runs README's commands"


def _relative_links(path: Path) -> list[str]:
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text())
    return [link for link in links if "://" not in link and not link.startswith("mailto:")]


@pytest.mark.parametrize("document", [README, ARCHITECTURE], ids=lambda p: p.name)
def test_relative_links_resolve(document):
    missing = [link for link in _relative_links(document) if not (document.parent / link).exists()]
    assert not missing, f"{document.name} links to files that do not exist: {missing}"


def test_readme_links_the_reliability_page():
    assert "(docs/reliability.md)" in README.read_text()
    assert (REPO / "docs" / "reliability.md").is_file()


def test_generated_reference_is_current(tmp_path):
    from tools.docs.reference import PAGES, REGENERATE, generate

    generate(tmp_path)
    stale = [name for name in PAGES if (tmp_path / name).read_text() != ((REFERENCE / name).read_text() if (REFERENCE / name).is_file() else None)]
    assert not stale, f"docs/reference/{', '.join(stale)} no longer match(es) the code; regenerate with: {REGENERATE}"


def test_the_performance_plots_are_current_and_drawn_from_their_data(tmp_path, capsys):
    """`python -m tools.docs.performance_plots --check` passes on the tree, and says so when one plot's data changes."""
    import shutil

    from sdk.errors import ConfigError
    from tools.docs.performance_plots import DATA, IMG, LATENCY, PLOTS, main, stale

    assert main(["--check"]) == 0, capsys.readouterr().out
    data = tmp_path / "data"
    shutil.copytree(DATA, data)
    front = json.loads((data / "optimize_front.json").read_text())
    front["candidates"][0]["recall"] = 0.5
    (data / "optimize_front.json").write_text(json.dumps(front))
    assert stale(IMG, data) == ["perf-optimize-front.svg"]
    front["candidates"][0]["speedup"] = "fast"
    (data / "optimize_front.json").write_text(json.dumps(front))
    with pytest.raises(ConfigError, match=r"optimize_front\.json: row 1: speedup is 'fast'"):
        stale(IMG, data)
    page = " ".join((REPO / "docs" / "performance.md").read_text().split())
    assert all(f"](img/{name})" in page for name in PLOTS), "every plot is shown on the performance page"
    latency = json.loads((DATA / LATENCY).read_text())
    assert all(latency[key] in page for key in ("command", "machine", "date")), "the page names the latency plot's run"


def _schema_keys() -> list[str]:
    """Every (model, property) of the pipeline schema, walked independently of the generator: `model.prop`."""
    from sdk.spec.schema import Pipeline

    schema = Pipeline.model_json_schema()
    found = [f"Pipeline.{name}" for name in schema["properties"]]
    for model, body in schema["$defs"].items():
        found += [f"{model}.{name}" for name in body.get("properties", {})]
    return found


def test_pipeline_reference_names_every_key_of_the_schema():
    page = (REFERENCE / "pipeline.md").read_text()
    keys = {html.unescape(k.replace("<wbr>", "")) for k in re.findall(r'^\| <code class="key">(.+?)</code> \|', page, flags=re.M)}
    missing = []
    for entry in _schema_keys():
        model, name = entry.split(".", 1)
        if model == "Pipeline":
            if name not in keys:
                missing.append(entry)
        elif not any(key.endswith("." + name) for key in keys):
            missing.append(entry)
    assert not missing, f"docs/reference/pipeline.md does not name: {missing}"


def test_every_explained_key_exists():
    """A line in MEANINGS for a key the schema no longer has would never be shown: remove it."""
    from tools.docs.key_pages import pipeline_keys, target_keys
    from tools.docs.meanings import MEANINGS, TARGET_MEANINGS

    pipeline = {row["key"].replace("<stage>.", "") for row in pipeline_keys()}
    target = {row["key"] for row in target_keys()}
    assert not set(MEANINGS) - pipeline, f"MEANINGS explains keys the schema lacks: {sorted(set(MEANINGS) - pipeline)}"
    assert not set(TARGET_MEANINGS) - target, f"TARGET_MEANINGS explains keys the schema lacks: {sorted(set(TARGET_MEANINGS) - target)}"


def test_cli_reference_names_every_command_and_flag():
    from tools.cli import build_parser

    page = (REFERENCE / "cli.md").read_text()

    def walk(parser, prog):
        for action in parser._actions:
            if action.option_strings and action.option_strings[0] != "-h":
                assert f"`{action.option_strings[0]}`" in page, f"{prog} {action.option_strings[0]} is not in cli.md"
            if hasattr(action, "choices") and isinstance(action.choices, dict):
                for name, sub in action.choices.items():
                    assert f"`{prog} {name}`" in page, f"`{prog} {name}` is not in cli.md"
                    walk(sub, f"{prog} {name}")

    walk(build_parser(), "sdk")


def test_decision_numbers_are_unique():
    numbers = [p.name[:4] for p in (REPO / "docs" / "decisions").glob("[0-9][0-9][0-9][0-9]-*.md")]
    assert len(numbers) == len(set(numbers)), f"two decision records share a number: {sorted(n for n in numbers if numbers.count(n) > 1)}"


# ---------------------------------------------------------------- report.json against its schema


@pytest.fixture(scope="module")
def schema():
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed (pip install -e '.[test]')")
    document = json.loads(REPORT_SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(document)
    return document


@pytest.fixture(scope="module")
def real_report_dir(tmp_path_factory) -> Path:
    """The example, deployed to the local target for 20 frames: the report folder a user gets (one deploy for the
    whole run, shared by the xdist workers: the tests only read it)."""
    from tests.conftest import shared_folder

    def deploy(state: Path) -> None:
        env = {**os.environ, "SDK_STATE_DIR": str(state)}
        command = [sys.executable, "-c", "import sys; from tools.cli import deploy_main; sys.argv[0] = 'deploy'; deploy_main()"]
        args = ["--target", "local", "pipelines/pedestrian.yaml", "--frames", "20", "--report-dir", str(state / "reports")]
        done = subprocess.run(command + args, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode in (0, 3, 4), f"deploy failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"

    return shared_folder(tmp_path_factory, "docs-real-report", deploy) / "reports"


@pytest.fixture(scope="module")
def real_report(real_report_dir) -> dict:
    return json.loads((real_report_dir / "report.json").read_text())


def test_a_deploys_frames_become_the_latency_plots_data(real_report_dir, real_report, tmp_path, capsys):
    """--latency-from keeps every measured frame's stage times of a real report folder, and the command without the
    machine's --report-dir; the plot draws from them, and a damaged data file is one error naming it."""
    from sdk.errors import ConfigError
    from sdk.runtime.recorder import latencies_from_times
    from sdk.runtime.timeline import read_timeline
    from tools.docs.performance_plots import LATENCY, STAGES, latency_data, latency_svg, main

    kept = latency_data(real_report_dir)
    timeline = read_timeline(real_report_dir / "timeline.npz")
    measured = latencies_from_times(timeline["times_ns"][int(timeline["warmup"]) :])
    assert len(kept["stages_ms"]["infer"]) == real_report["measured_frames"] == len(measured["infer"])
    assert all(kept["stages_ms"][stage] == [round(float(v), 3) for v in measured[stage]] for stage in STAGES)
    assert kept["command"] == "deploy --target local pipelines/pedestrian.yaml --frames 20"  # no --report-dir of this machine
    assert kept["verdict"] == real_report["verdict"] and kept["budgets_ms"]["p99_ms"] == 50.0
    (tmp_path / LATENCY).write_text(json.dumps(kept))
    assert f"pedestrian, {real_report['measured_frames']} frames: latency per stage" in latency_svg(tmp_path)
    kept["stages_ms"]["sink"] = kept["stages_ms"]["sink"][:-1]
    (tmp_path / LATENCY).write_text(json.dumps(kept))
    with pytest.raises(ConfigError, match=rf"{LATENCY}: stages_ms.sink is not {real_report['measured_frames']} milliseconds"):
        latency_svg(tmp_path)
    assert main(["--latency-from", str(tmp_path)]) == 1  # not a report folder: an error line, nothing written
    assert f"error: {tmp_path}: not a deploy's report folder" in capsys.readouterr().err


def test_a_real_report_matches_the_published_schema(schema, real_report):
    import jsonschema

    jsonschema.Draft202012Validator(schema).validate(real_report)


@pytest.mark.parametrize(
    "path",
    [("verdict",), ("target",), ("frames",), ("dropped",), ("checks",), ("stages", "infer"), ("stages", "sink", "p99_ms"), ("end_to_end", "p999_ms")],
    ids=lambda p: ".".join(p),
)
def test_the_schema_is_strict_about_the_contract(schema, real_report, path):
    import copy

    import jsonschema

    broken = copy.deepcopy(real_report)
    parent = broken
    for key in path[:-1]:
        parent = parent[key]
    del parent[path[-1]]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(schema).validate(broken)


def test_the_schema_is_open_elsewhere(schema, real_report):
    import jsonschema

    extended = {**real_report, "run": {"started_at": "2025-01-31T08:15:02.123+00:00"}, "verdict_detail": "PASS"}
    extended["checks"] = [{**c, "duration_s": 1.0} for c in real_report["checks"]]
    jsonschema.Draft202012Validator(schema).validate(extended)


def test_the_schema_names_the_runtime_stages_and_keys(schema):
    from sdk.runtime.recorder import STAGES
    from sdk.runtime.report import END_TO_END_KEYS
    from sdk.runtime.verdict import FAIL, INCONCLUSIVE, PASS, WARN

    assert set(schema["properties"]["stages"]["required"]) == set(STAGES)
    assert set(schema["properties"]["end_to_end"]["required"]) <= set(END_TO_END_KEYS)
    assert set(schema["properties"]["verdict"]["enum"]) == {PASS, FAIL, INCONCLUSIVE}
    assert set(schema["properties"]["checks"]["items"]["properties"]["status"]["enum"]) == {PASS, FAIL, INCONCLUSIVE, WARN}


# ---------------------------------------------------------------- the site


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site as `mkdocs build --strict` writes it, built once for the tests that read it."""
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (pip install -e '.[docs]')")
    pytest.importorskip("material", reason="mkdocs-material is not installed (pip install -e '.[docs]')")
    out = tmp_path_factory.mktemp("docs") / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", "tools/mkdocs.yml", "--site-dir", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return out


def test_the_site_builds_strict(site):
    assert (site / "reference" / "pipeline" / "index.html").is_file()
    assert (site / "reference" / "report.schema.json").is_file()
    # Readable offline: no diagram left for a script from a CDN to draw; key names that break only after a dot.
    pages = [p.read_text() for p in site.rglob("*.html")]
    assert not any('class="mermaid"' in page for page in pages), "a diagram that only a downloaded script draws"
    reference = (site / "reference" / "pipeline" / "index.html").read_text()
    assert '<code class="key">postprocess.<wbr>decoder.<wbr>kind</code>' in reference
    assert "word-break: normal" in (site / "stylesheets" / "extra.css").read_text() and "extra.css" in reference
    decisions = sorted(p.stem for p in (REPO / "docs" / "decisions").glob("[0-9][0-9][0-9][0-9]-*.md"))
    built = (site / "decisions" / "index.html").read_text()
    assert all(f"{name}/" in built for name in decisions), "the decisions index lists every record"


# What a page's article may hold; anything else is text the Markdown passed on as a tag (`<pipeline>` in a help
# text), which the browser hides.
HTML_TAGS = {
    *("a", "abbr", "article", "b", "blockquote", "br", "button", "code", "dd", "del", "details", "div", "dl", "dt", "em"),
    *("figcaption", "figure", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "img", "input", "kbd", "label", "li", "mark"),
    *("ol", "p", "path", "pre", "s", "small", "span", "strong", "sub", "summary", "sup", "svg", "table", "tbody", "td"),
    *("th", "thead", "tr", "u", "ul", "wbr"),
}


def test_every_page_fits_the_column_at_1280_px(site):
    """No page scrolls sideways in a 1280 x 800 window: code lines and tables within what Chromium showed to fit
    (tools/docs/page_widths.py measures it and checks every page in a real browser)."""
    from tools.docs.page_widths import CODE_COLUMNS, too_wide

    found, hidden = [], []
    for page in sorted(site.rglob("index.html")):
        name = str(page.parent.relative_to(site))
        text = page.read_text()
        article = text[text.find("<article") : text.find("</article>")]
        found += [f"{name}: {problem}" for problem in too_wide(article + "</article>")]
        hidden += [f"{name}: <{tag}>" for tag in set(re.findall(r"<([A-Za-z][\w-]*)", article)) - HTML_TAGS]
    assert not found, f"wider than the column at 1280 px ({len(found)}; wrap code at {CODE_COLUMNS} characters):\n" + "\n".join(found[:40])
    assert not hidden, f"text the browser would read as a tag and hide: {hidden[:10]}"
    # The check can fail: a line one character too long, a table of long words in too many columns.
    assert too_wide(f"<article><pre><code>{'x' * (CODE_COLUMNS + 1)}</code></pre></article>")
    assert not too_wide(f"<article><pre><code>{'x' * CODE_COLUMNS}</code></pre></article>")
    assert too_wide(f"<article><ul><li><pre><code>{'x' * CODE_COLUMNS}</code></pre></li></ul></article>")
    assert too_wide("<article><table><tr>" + "<td>word</td>" * 7 + "</tr></table></article>")
    assert not too_wide("<article><table><tr>" + "<td>word</td>" * 6 + "</tr></table></article>")


def user_pages() -> list[Path]:
    """Every page a user reads: the README, ARCHITECTURE.md and the site's pages (the generated reference included)."""
    return [README, ARCHITECTURE, *sorted((REPO / "docs").rglob("*.md"))]


# A path of the machine the docs were written on, never of the product: a checkout, a user's tool chain, a test run.
MACHINE_PATH = re.compile(r"(/work/\w|/\.pyenv/|/root/\.|/tmp/pytest-of-[a-z]|/tmp/tmp\w|/home/[a-z][\w-]*/(?!perception\b))")
INTERNAL_NUMBER = re.compile(r"\b[Ii]ssue \d+|\bitem \d+ of\b|\bstop \d+\b")


@pytest.mark.parametrize("page", user_pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_docs_speak_of_the_product_not_of_how_it_was_made(page):
    """No absolute path of a development machine, and no internal issue or work numbers, in a page users read."""
    text = page.read_text()
    assert not MACHINE_PATH.findall(text), MACHINE_PATH.findall(text)[:3]
    assert not INTERNAL_NUMBER.findall(text), INTERNAL_NUMBER.findall(text)[:3]


LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+\.)\s")


@pytest.mark.parametrize("page", [p for p in user_pages() if p.is_relative_to(REPO / "docs")], ids=lambda p: str(p.relative_to(REPO)))
def test_pages_render_as_written_offline(page):
    """MkDocs' Markdown reads a list right after a paragraph line as part of the paragraph: a blank line goes first.
    And a ```mermaid block shows as its source without the script Material would fetch from a CDN: diagrams are text."""
    lines, fenced, glued = page.read_text().splitlines(), False, []
    for number, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            assert not line.lstrip().startswith("```mermaid"), f"line {number + 1}: a Mermaid diagram"
            continue
        previous = lines[number - 1] if number else ""
        if (
            not fenced
            and LIST_ITEM.match(line)
            and previous.strip()
            and not previous.startswith((" ", "|", "#", ">"))
            and not LIST_ITEM.match(previous)
        ):
            glued.append(number + 1)
    assert not glued, f"a list glued to the paragraph before it (no blank line) at line(s) {glued}"
