"""Every benchmark in tests/benchmarks runs in its smoke mode (`--smoke`: one short round, tiny sizes), so a change
that breaks a benchmark script fails CI. The numbers they print mean nothing here; only that they run to the end.

The scripts run as a person runs them (`python tests/benchmarks/bench_X.py --smoke`: `__main__`, its argv, environment,
folder and streams, a process of its own), one test each (so the suite's workers share them, longest first), with
their temporary files, host state and targets in the test's folder. Each is a fork of one server per worker
(tests/benchmarks/smoke_server.py) that has already imported NumPy, OpenCV, ONNX Runtime, the schema and the host
tools, about 1 to 2 CPU-s that each script would otherwise pay again on its own (decision 1232)."""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "tests" / "benchmarks"
# One benchmark's smoke run may take this long: a limit for a hang, not a speed. The longest, optimize (a real pruning
# and measuring of the example detector, about 60 CPU-s), took 150 to 210 s while the 2-core machine was at load 8 to
# 11, and 377 s at load 12 to 15; 900 s is more than 3 times what it takes at load 8 to 11. All 24 scripts: about 111
# CPU-s with every process they start, 3.3 minutes of wall time one after the other at load 3 to 6 (decision 1185).
TIMEOUT_S = 900
# Longest first (wall time measured one after the other, decision 1185), so the suite's workers end together; a new
# benchmark runs last.
ORDER = (
    "deploy",
    "soak",
    "optimize",
    "history",
    "report",
    "acceptance",
    "calibration",
    "live_view",
    "int8_cpu",
    "profile",
    "decoders",
    "cuda_reference",
    "multicam",
    "published",
    "evaluate",
    "runtime_overhead",
    "dla_report",
    "cuda_path",
    "replay_memory",
    "tracker",
    "recordings",
    "cuda_traffic",
    "cuda_device",
    "verify",
)
# System tools a benchmark needs, and the package that has them (.ci/run installs them).
NEEDS = {"cuda_reference": {"cmake": "cmake", "g++": "g++"}, "deploy": {"scp": "openssh-client", "ssh-keygen": "openssh-client"}}


def benchmarks() -> list[Path]:
    found = sorted(BENCHMARKS.glob("bench_*.py"))
    rank = {name: k for k, name in enumerate(ORDER)}
    return sorted(found, key=lambda path: rank.get(path.stem.removeprefix("bench_"), len(ORDER)))


def missing_tools(path: Path) -> list[str]:
    needs = NEEDS.get(path.stem.removeprefix("bench_"), {})
    return [f"{tool} ({package})" for tool, package in needs.items() if shutil.which(tool) is None]


class SmokeServer:
    """tests/benchmarks/smoke_server.py, started once for the tests of this module in one worker."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(BENCHMARKS / "smoke_server.py")], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0
        )
        self.pending = b""

    def answer(self, deadline: float) -> dict | None:
        """The server's next line, or None when `deadline` (monotonic) passes first."""
        fd = self.process.stdout.fileno()
        while b"\n" not in self.pending:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 4096)
            assert chunk, f"the smoke server ended (exit {self.process.wait()})"
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return json.loads(line)

    def run(self, path: Path, env: dict[str, str], out: Path) -> int | None:
        """`python PATH --smoke` in a fork of the server: its exit status, or None when it ran past TIMEOUT_S (it and
        everything it started are then ended)."""
        request = {"script": str(path), "args": ["--smoke"], "env": env, "cwd": str(REPO), "out": str(out)}
        self.process.stdin.write((json.dumps(request) + "\n").encode())
        deadline = time.monotonic() + TIMEOUT_S
        pid = self.answer(deadline)["pid"]
        done = self.answer(deadline)
        if done is None:
            os.killpg(pid, signal.SIGKILL)
            done = self.answer(time.monotonic() + 60)
            assert done is not None, f"{path.name}: still running after SIGKILL"
            return None
        return done["code"]

    def close(self) -> None:
        self.process.stdin.close()
        try:
            self.process.wait(timeout=60)
        finally:
            self.process.kill()
            self.process.stdout.close()


@pytest.fixture(scope="module")
def server():
    started = SmokeServer()
    yield started
    started.close()


def run_smoke(server: SmokeServer, path: Path, folder: Path) -> tuple[Path, int | None, str, float]:
    folder.mkdir(parents=True)
    env = {
        **os.environ,
        "TMPDIR": str(folder),  # the scripts' mkdtemp() folders
        "SDK_STATE_DIR": str(folder / "state"),
        "SDK_TARGETS_DIR": str(folder / "targets"),
        "SDK_HISTORY": str(folder / "history.sqlite"),  # not the checkout's reports/history.sqlite
        "MPLBACKEND": "Agg",
    }
    started = time.monotonic()
    code = server.run(path, env, folder / "output.txt")
    output = (folder / "output.txt").read_text(errors="replace")
    return path, code, output[-2000:], time.monotonic() - started


@pytest.mark.parametrize("path", benchmarks(), ids=lambda path: path.stem.removeprefix("bench_"))
def test_every_benchmark_runs_its_smoke_mode(server, tmp_path, path):
    missing = missing_tools(path)
    if missing and not (os.environ.get("CI") or os.environ.get("SDK_CI")):
        pytest.skip(f"{path.name} needs {', '.join(missing)} (apt-get install it)")
    _, code, output, seconds = run_smoke(server, path, tmp_path / path.stem)
    assert code is not None, f"{path.name} --smoke: did not finish within {TIMEOUT_S} s\n{output}"
    assert code == 0, f"{path.name} --smoke: exit {code} after {seconds:.0f} s\n{output}"


def test_every_benchmark_is_collected():
    assert len(benchmarks()) >= 20 and all(path.name.startswith("bench_") for path in benchmarks())


def test_the_server_runs_a_script_as_python_does(server, tmp_path):
    """What the server reports is the script's own: its exit status (SystemExit's, 1 for an uncaught exception with
    its traceback), its output, `__main__`, argv, environment and folder, and a `tests` import as the scripts do it."""
    script = tmp_path / "bench_probe.py"
    script.write_text(
        "import os, sys\n"
        f"sys.path.insert(0, {str(REPO)!r})\n"
        "from tests.benchmarks.smoke import short_clip\n"
        "print(__name__, sys.argv[1:], os.environ['PROBE'], os.getcwd(), flush=True)\n"
        "if os.environ['PROBE'] == 'raise':\n"
        "    raise RuntimeError('probe failed')\n"
        "sys.exit(int(os.environ['PROBE']))\n"
    )
    for probe, code, said in (("0", 0, ""), ("3", 3, ""), ("raise", 1, "RuntimeError: probe failed")):
        out = tmp_path / f"out-{probe}.txt"
        assert server.run(script, {**os.environ, "PROBE": probe}, out) == code
        assert f"__main__ ['--smoke'] {probe} {REPO}" in out.read_text() and said in out.read_text()
