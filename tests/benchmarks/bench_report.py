"""Benchmark: drawing report.html (its four plots and the page) for the example's run.

`deploy --target local pipelines/pedestrian.yaml` runs once (795 frames, its budgets and deadline; --smoke: the
tests' tiny pipeline, 20 frames, the command run in this process); then report.html is drawn again from that report
folder in fresh interpreters, as a deploy draws it once per run: the time of `write_html` alone, and the import of the
module that draws it.

    python tests/benchmarks/bench_report.py [--rounds 5] [--smoke]

Target: at most 0.5 s for the example's report.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TARGET_S = 0.5
TIMED = """
import json, sys, time
started = time.perf_counter()
from tools.evidence.html_report import write_html
imported = time.perf_counter()
write_html(sys.argv[1])
print(json.dumps({"import_s": imported - started, "draw_s": time.perf_counter() - imported, "matplotlib": "matplotlib" in sys.modules}))
"""


def deployed(folder: Path, smoke: bool) -> Path:
    """A report folder of a real local deploy (the example, or with --smoke the tests' tiny pipeline)."""
    sys.path.insert(0, str(REPO))
    pipeline, frames = REPO / "pipelines" / "pedestrian.yaml", []
    if smoke:
        from tests.benchmarks.smoke import tiny_pipeline

        pipeline, frames = tiny_pipeline(folder / "tiny"), ["--frames", "20"]
    env = {**os.environ, "SDK_STATE_DIR": str(folder / "state"), "SDK_TARGETS_DIR": str(folder / "targets")}
    if smoke:  # the same command in this process (its parser, handler and output): no Python start-up and imports
        import contextlib
        import io

        from tools.cli import run

        os.environ.update(env)
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            code = run(["deploy", "--target", "local", str(pipeline), *frames, "--report-dir", str(folder / "report")])
        if code not in (0, 3, 4):  # a verdict of any kind; an error is not one
            raise SystemExit(out.getvalue())
        return folder / "report"
    command = [sys.executable, "-c", "from tools.cli import deploy_main; deploy_main()", "--target", "local", str(pipeline), *frames]
    done = subprocess.run([*command, "--report-dir", str(folder / "report")], cwd=REPO, env=env, capture_output=True, text=True)
    if done.returncode not in (0, 3, 4):  # a verdict of any kind; an error is not one
        raise SystemExit(done.stdout + done.stderr)
    return folder / "report"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="the tiny pipeline, one round (CI: the script still runs)")
    args = parser.parse_args()
    rounds = 1 if args.smoke else args.rounds
    with tempfile.TemporaryDirectory() as tmp:
        folder = deployed(Path(tmp), args.smoke)
        frames = json.loads((folder / "report.json").read_text())["frames"]
        runs = []
        for _ in range(rounds):
            done = subprocess.run([sys.executable, "-c", TIMED, str(folder)], cwd=REPO, capture_output=True, text=True, check=True)
            runs.append(json.loads(done.stdout))
        html = (folder / "report.html").read_text()
    draw = statistics.median(r["draw_s"] for r in runs)
    imported = statistics.median(r["import_s"] for r in runs)
    each = ", ".join(f"{r['draw_s'] * 1000:.1f}" for r in runs)
    print(f"{frames} frames, {rounds} fresh interpreter(s): write_html {draw * 1000:.1f} ms (median; rounds {each})")
    print(f"import of tools.evidence.html_report {imported * 1000:.0f} ms (median; the deploy has imported most of it already)")
    print(f"matplotlib imported: {any(r['matplotlib'] for r in runs)}; report.html {len(html) / 1000:.0f} kB, {html.count('<svg')} plots")
    print(f"target: drawing at most {TARGET_S} s: {'met' if draw <= TARGET_S else 'NOT met'}" + (" (smoke: means nothing)" if args.smoke else ""))


if __name__ == "__main__":
    main()
