"""Acceptance evidence a reviewer can sign, on one real `deploy --target local` of the example (20 frames):
traceability in report.json, junit.xml and report.html; nothing too short to judge shown as passed; report.html
one self-contained file (opened in headless Chromium, network off); report folders of their own; `sdk validate`
refusing a pipeline that is not current before it runs or writes anything."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from xml.etree import ElementTree

import numpy as np
import pytest

import sdk
from sdk.errors import ConfigError
from tests.conftest import shared_folder
from tests.junit_check import read_junit, suites, validate_junit
from tools.cli import run
from tools.evidence.acceptance import comparison
from tools.reports.plots import draw_plots
from tools.reports.report_dirs import check_report_dir, empty_report_dir, new_run_folder, update_latest

from .test_validate import relaxed_example

REPO = Path(__file__).resolve().parents[3]
# 15 measured frames back a p50 and a max, never a p99 (299 needed): that check is INCONCLUSIVE.
TOO_SHORT = ("end_to_end: {p50_ms: 60000, max_ms: 60000}", "end_to_end: {p50_ms: 60000, p99_ms: 60000, max_ms: 60000}")


def cli(*args: str, cwd: Path, state: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "SDK_STATE_DIR": str(state), "PYTHONPATH": str(REPO), "COLUMNS": "200"}
    command = [sys.executable, "-c", "from tools.cli import main; main()", *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def deploy_once(work: Path) -> None:
    pipeline = relaxed_example(work / "p")
    pipeline.write_text(pipeline.read_text().replace(*TOO_SHORT))
    done = cli("deploy", "--target", "local", str(pipeline), "--frames", "20", cwd=work, state=work / "state")
    assert done.returncode == 4, done.stdout[-3000:] + done.stderr[-3000:]  # INCONCLUSIVE
    (work / "deploy.json").write_text(json.dumps({"stdout": done.stdout, "stderr": done.stderr}))


@pytest.fixture(scope="module")
def deployed(tmp_path_factory):
    """One real deploy through the CLI, into the default report folder (under the working folder): made once for
    the whole run and shared by the xdist workers (the tests only read it; what they add goes beside it)."""
    work = shared_folder(tmp_path_factory, "evidence-deploy", deploy_once)
    pipeline = work / "p" / "pedestrian.yaml"
    done = SimpleNamespace(**json.loads((work / "deploy.json").read_text()))
    (folder,) = [p for p in (work / "reports" / "pedestrian").iterdir() if p.name != "latest"]
    return {"work": work, "pipeline": pipeline, "done": done, "folder": folder, "report": json.loads((folder / "report.json").read_text())}


def in_process(capsys, monkeypatch, *args: str, cwd: Path, state: Path) -> SimpleNamespace:
    """The CLI in this process (what is checked is its exit code and its words, not the process): cwd and state as
    the subprocess had them."""
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("SDK_STATE_DIR", str(state))
    monkeypatch.setenv("COLUMNS", "200")
    capsys.readouterr()
    code = run(list(args))
    out, err = capsys.readouterr()
    return SimpleNamespace(returncode=code, stdout=out, stderr=err)


@pytest.mark.slow
def test_a_local_deploy_is_traceable(deployed):
    report, folder, state = deployed["report"], deployed["folder"], deployed["work"] / "state"
    run = report["run"]
    started, finished = datetime.fromisoformat(run["started_at"]), datetime.fromisoformat(run["finished_at"])
    assert started.utcoffset() == timedelta(0) and started <= finished
    assert run["host"] == socket.gethostname() and run["user"] and run["sdk_version"] == sdk.__version__
    assert run["command"].startswith("python -c deploy --target local") and run["device_command"].startswith("python -m sdk run --release")
    assert run["pipeline_sha256"] == hashlib.sha256(deployed["pipeline"].read_bytes()).hexdigest()
    current = (state / "targets" / "local" / "current").resolve()
    assert run["release"] == current.name == report["release"] and run["target"] == "local"
    assert run["release_manifest_sha256"] == hashlib.sha256((current / "manifest.json").read_bytes()).hexdigest()
    assert run["device_fingerprint_sha256"] == hashlib.sha256((folder / "device.json").read_bytes()).hexdigest()
    assert run["inference_runtime"] == "onnxruntime" and run["onnxruntime"] == report["environment"]["packages"]["onnxruntime"]["version"]
    assert run["tensorrt"] is None and run["cuda"] is None  # not used on this target, and said so
    # The verdict key keeps its contract; what it does not cover is said beside it, and on the console.
    assert report["verdict"] == "INCONCLUSIVE" and report["verdict_detail"] == "INCONCLUSIVE, 1 unverified"
    assert "verdict: INCONCLUSIVE, 1 unverified" in deployed["done"].stdout
    during = report["environment"]["during"]
    assert during["cpus"] == os.cpu_count() and during["load_1m"]["max"] >= 0 and during["samples"] >= 2
    # The accuracy section says what it compared, and that on this target the comparison is trivial.
    assert report["accuracy"]["compared"]["trivial"] is True and "FP32 model on ONNX Runtime" in report["accuracy"]["compared"]["reference"]


@pytest.mark.slow
def test_a_run_too_short_to_judge_fails_in_junit(deployed):
    path, run = deployed["folder"] / "junit.xml", deployed["report"]["run"]
    validate_junit(path)
    (suite,) = suites(path)
    assert suite.timestamp == run["started_at"] and suite.hostname == run["device_host"]
    props = {p.name: p.value for p in suite.properties()}
    assert props["verdict"] == "INCONCLUSIVE" and props["run.host"] == run["host"] and props["run.sdk_version"] == run["sdk_version"]
    assert props["run.release"] == run["release"] and props["run.pipeline_sha256"] == run["pipeline_sha256"]
    cases = read_junit(path)
    assert [c["name"] for c in deployed["report"]["checks"]] == list(cases)
    states = {name: state for name, (state, _) in cases.items()}
    assert states.pop("end_to_end.p99_ms") == "failure" and states.pop("environment.power_mode") == "skipped"
    assert set(states.values()) == {"passed"}
    (inconclusive,) = cases["end_to_end.p99_ms"][1].result
    assert inconclusive.type == "Inconclusive" and "299 frames needed" in inconclusive.message
    (skipped,) = cases["environment.power_mode"][1].result
    assert "unverified" in skipped.message and "on_unmet: warn" in skipped.message
    assert all(case.time > 0 and "measured" in case.system_out for _, case in cases.values())


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("CI must install chromium (.ci/run does)")
        pytest.skip("chromium is not installed here (apt-get install chromium)")
    return path


PROBE = """<script>
window.addEventListener("load", () => {
  const box = (e) => { const r = e.getBoundingClientRect(); return [r.width, r.height]; };
  const result = {
    images: [...document.images].map((i) => ({src: i.src.slice(0, 40), ok: i.complete && i.naturalWidth > 0})),
    svgs: [...document.querySelectorAll("figure > svg")].map(box),
    fetched: performance.getEntriesByType("resource").map((e) => e.name),
  };
  const out = document.createElement("pre");
  out.id = "probe";
  out.textContent = JSON.stringify(result);
  document.body.appendChild(out);
});
</script>"""


@pytest.mark.slow
def test_report_html_is_one_self_contained_file(deployed, tmp_path):
    html = (deployed["folder"] / "report.html").read_text()
    # Nothing outside the file: no image file, script, stylesheet or font; every reference is inline.
    assert not re.search(r"<(img|script|link|iframe|object|embed)\b", html)
    references = re.findall(r'\b(?:src|href|xlink:href)="([^"]*)"', html) + re.findall(r"url\(([^)]*)\)", html)
    assert all(r.startswith(("#", "data:image/png;base64,")) for r in references), sorted(set(references))[:5]
    for data in (r for r in references if r.startswith("data:")):
        assert base64.b64decode(data.split(",", 1)[1]).startswith(b"\x89PNG\r\n\x1a\n")  # an image that decodes
    figures = re.findall(r"<figure[^>]*>(.*?)</figure>", html, re.S)
    assert len(figures) == 4  # timeline, histogram, CDF, misses: each a well-formed SVG
    for svg in figures:
        assert ElementTree.fromstring(svg).tag.endswith("svg")
    # The header block and the check table a reviewer signs.
    run = deployed["report"]["run"]
    for value in (run["started_at"], run["host"], run["sdk_version"], run["release"], run["pipeline_sha256"], "trivial"):
        assert value in html
    assert "e+0" not in re.sub(r"<svg.*?</svg>", "", html, flags=re.S)  # no 1e+05 for people
    # Headless Chromium, in a network namespace of its own (no network at all): every figure drawn, nothing fetched.
    probe = tmp_path / "probe.html"
    probe.write_text(html.replace("</body>", PROBE + "</body>"))
    command = [
        chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--virtual-time-budget=5000",
        "--dump-dom",
        probe.as_uri(),
    ]
    if shutil.which("unshare") and subprocess.run(["unshare", "--net", "true"], capture_output=True).returncode == 0:
        command = ["unshare", "--net", *command]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    match = re.search(r'<pre id="probe">(.*?)</pre>', done.stdout, re.S)
    assert match, done.stderr[-2000:]
    result = json.loads(match.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    assert result["images"] == [] and result["fetched"] == []
    assert len(result["svgs"]) == 4 and all(w > 300 and h > 100 for w, h in result["svgs"])


@pytest.mark.slow
def test_each_run_has_its_folder_and_a_named_one_is_never_reused(deployed, capsys, monkeypatch):
    work, folder = deployed["work"], deployed["folder"]
    assert re.fullmatch(r"\d{8}T\d{6}Z-local-deploy", folder.name)
    latest = folder.parent / "latest"
    assert latest.is_symlink() and latest.resolve() == folder.resolve()
    before = (folder / "report.json").stat().st_mtime_ns
    again = ("deploy", "--target", "local", str(deployed["pipeline"]), "--report-dir", str(folder))
    done = in_process(capsys, monkeypatch, *again, cwd=work, state=work / "state")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "error:" in done.stderr and "holds a report" in done.stderr and "--force" in done.stderr
    assert (folder / "report.json").stat().st_mtime_ns == before


@pytest.mark.slow
def test_validate_refuses_a_pipeline_that_is_not_current_before_writing_anything(deployed, capsys, monkeypatch):
    work, state = deployed["work"], deployed["work"] / "state"
    changed = deployed["pipeline"].with_name("changed.yaml")
    changed.write_text(deployed["pipeline"].read_text().replace("p99_ms: 60000", "p99_ms: 50000"))
    reports = sorted((work / "reports" / "pedestrian").iterdir())
    current = (state / "targets" / "local" / "current").resolve().name
    for extra in ([], ["--report-dir", str(work / "named")]):
        done = in_process(capsys, monkeypatch, "validate", str(changed), "--target", "local", "--frames", "5", *extra, cwd=work, state=state)
        assert done.returncode == 1, done.stdout + done.stderr
        error = " ".join(done.stderr.split())
        assert f"the current release on local is {current}, which runs another version of changed.yaml" in error
        assert "pipeline 'pedestrian' (pipeline/pedestrian.yaml" in error and "no report was written" in error and "hint:" in error
    assert sorted((work / "reports" / "pedestrian").iterdir()) == reports and not (work / "named").exists()


def test_report_folders(tmp_path, monkeypatch):
    from datetime import datetime, timezone

    class Frozen(datetime):  # two runs in one second (their names would differ across a second's boundary)
        @classmethod
        def now(cls, tz=None):
            return datetime(2026, 1, 31, 8, 15, 2, tzinfo=timezone.utc)

    monkeypatch.setattr("tools.reports.report_dirs.datetime", Frozen)
    monkeypatch.chdir(tmp_path)
    first = new_run_folder("pedestrian", "orin-01,orin-02", "validate")
    assert first.parent == Path("reports/pedestrian") and re.fullmatch(r"\d{8}T\d{6}Z-orin-01_orin-02-validate", first.name)
    first.mkdir(parents=True)
    second = new_run_folder("pedestrian", "orin-01,orin-02", "validate")
    assert second != first and second.name == first.name + "-2"
    second.mkdir()
    update_latest(first)
    update_latest(second)
    assert os.readlink("reports/pedestrian/latest") == second.name
    named = tmp_path / "named"
    assert check_report_dir(named, force=False) == named  # not there yet: fine, and not created
    assert not named.exists()
    (named / "repeat-2").mkdir(parents=True)
    (named / "report.json").write_text("{}")
    (named / "latency_timeline.png").write_bytes(b"old")
    with pytest.raises(ConfigError, match="holds a report"):
        check_report_dir(named, force=False)
    assert check_report_dir(named, force=True) == named and (named / "report.json").exists()  # checked, not yet emptied
    empty_report_dir(named)
    assert list(named.iterdir()) == []
    for refused in (tmp_path, REPO):  # --force never empties the working folder or a checkout
        (tmp_path / "x").touch()
        with pytest.raises(ConfigError, match="not a report folder"):
            check_report_dir(refused, force=True)


def test_accuracy_says_what_was_compared():
    cpu = comparison({"backend": "onnxruntime 1.20 CPU, 2 thread(s), FP32 model", "target": "local"}, "fp32")
    assert cpu["trivial"] and "trivial" in cpu["summary"]
    int8 = comparison({"backend": "onnxruntime 1.20 CPU, 2 thread(s), INT8 Q/DQ model", "target": "local"}, "int8")
    assert not int8["trivial"] and "INT8 Q/DQ" in int8["summary"]
    engine = comparison({"backend": "tensorrt (GPU), TensorRT engine, int8", "target": "orin-01"}, "int8")
    assert not engine["trivial"] and "tensorrt (GPU)" in engine["run"] and "orin-01" in engine["run"]
    optimized = comparison({"backend": "onnxruntime 1.20 CPU, 2 thread(s), FP32 model", "target": "local"}, "fp32", "a.onnx", "a.opt.onnx")
    assert not optimized["trivial"] and "the original model a.onnx against the optimized a.opt.onnx" in optimized["summary"]
    assert optimized["reference"].startswith("the original FP32 model a.onnx")


def test_report_html_is_drawn_without_matplotlib(tmp_path):
    """The plots are written as SVG by the SDK (tools/reports/svg_chart.py): a deploy pays neither matplotlib's import
    nor its figure drawing (about 2 s of every deploy before; docs/performance.md has the figure)."""
    n, stages = 300, ("preprocess", "infer", "postprocess", "sink")
    capture = np.arange(n, dtype=np.int64) * 33_000_000
    steps = np.tile(np.array([1, 10, 1, 1], np.int64) * 1_000_000, (n, 1))
    times = np.concatenate([capture[:, None], capture[:, None] + 100_000, capture[:, None] + 100_000 + np.cumsum(steps, axis=1)], axis=1)
    np.savez(tmp_path / "timeline.npz", warmup=np.int64(0), times_ns=times, stages=np.array(stages), frames=np.arange(n), digests=np.zeros(n))
    script = (
        "import sys; from tools.reports.plots import draw_plots; from sdk.runtime.timeline import read_timeline; "
        f"plots = draw_plots({{'checks': [{{'name': 'end_to_end.p99_ms', 'limit': 50.0}}], 'deadline': {{'deadline_ms': 33.3}}}}, "
        f"read_timeline({str(tmp_path / 'timeline.npz')!r})); print(sorted(plots), 'matplotlib' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.stdout.split("] ")[-1].strip() == "False", done.stdout + done.stderr
    assert "['cdf', 'histogram', 'misses', 'timeline']" in done.stdout


def test_plots_stay_legible_far_over_budget():
    n, stages = 400, ("preprocess", "infer", "postprocess", "sink")
    rng = np.random.default_rng(0)
    capture = np.arange(n, dtype=np.int64) * 33_000_000
    steps = np.stack([np.full(n, 1_000_000), rng.integers(900, 1100, n) * 1_000_000, np.full(n, 500_000), np.full(n, 500_000)], axis=1)
    times = np.concatenate([capture[:, None], capture[:, None] + 100_000, capture[:, None] + 100_000 + np.cumsum(steps, axis=1)], axis=1)
    timeline = {"warmup": np.int64(0), "times_ns": times, "stages": np.array(stages), "frames": np.arange(n), "digests": np.zeros(n)}
    checks = [{"name": "end_to_end.p99_ms", "limit": 50.0}, {"name": "end_to_end.max_ms", "limit": 200.0}]
    plots = draw_plots({"checks": checks, "deadline": {"deadline_ms": 33.3}}, timeline)  # ~1 s a frame: 30x the budget
    assert set(plots) == {"timeline", "cdf", "histogram", "misses"}
    for name in ("timeline", "cdf", "histogram"):
        text = plots[name]
        assert "log scale" in text, name  # a factor of 30 between budget and data: a log axis keeps both legible
        assert "p99 budget 50 ms" in text and "max budget 200 ms" in text and "deadline 33.3 ms" in text, name
        assert "e+0" not in text and "1,000" in text, name
    ids = [re.findall(r'id="([^"]+)"', svg) for svg in plots.values()]
    assert all(i.startswith(f"{name}-") for name, found in zip(plots, ids, strict=True) for i in found)  # no id collides in one page
