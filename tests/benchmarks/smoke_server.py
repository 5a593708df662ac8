"""Runs benchmark scripts' smoke modes for tests/test_benchmarks_smoke.py, each in a fork of one Python that has already
imported what nearly every script imports (NumPy, OpenCV, ONNX Runtime, pydantic and the pipeline schema, the host
tools): the script runs as `python tests/benchmarks/bench_X.py --smoke` runs it (`__main__`, its argv, environment,
working folder, standard streams and exit status; a process of its own, so nothing it does reaches the next one),
without paying those imports again in each of the 25 scripts. Not a benchmark itself.

Protocol (one request at a time, on standard input and output): a JSON line {"script", "args", "env", "cwd", "out"};
the answer is a line {"pid": N} when the script's process has started (a session of its own: the caller may end it
and everything it started with killpg), then {"code": N} when it has ended (its exit status; negative: the signal
that ended it). The script's stdout and stderr go to the file `out`. End of input ends the server."""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PATH = list(sys.path)  # what a `python tests/benchmarks/bench_X.py` starts with


def preload() -> None:
    """What the scripts import; `tests.*` is not among it, so a script that cannot find the checkout's `tests` package
    on its own fails here as it would when a person runs it."""
    os.environ["OPENBLAS_NUM_THREADS"] = "1"  # no BLAS threads in the server: nothing running when it forks
    sys.path.insert(0, str(REPO))
    try:
        import cv2  # noqa: F401
        import numpy  # noqa: F401
        import onnxruntime  # noqa: F401
        import pytest  # noqa: F401
        import yaml  # noqa: F401

        import sdk.spec  # noqa: F401
        import tools.cli  # noqa: F401
        import tools.deploy.flow  # noqa: F401
        import tools.validation.validate  # noqa: F401
    finally:
        sys.path[:] = PATH


def run_script(request: dict) -> int:
    """In the forked process: become `python SCRIPT ARGS` with the request's environment and folder, run it, its exit
    status."""
    import atexit
    import runpy
    import tempfile

    os.setsid()
    out = os.open(request["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    os.close(null)
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile.tempdir = None  # found again from TMPDIR
    os.chdir(request["cwd"])
    script = request["script"]
    sys.argv = [script, *request["args"]]
    sys.path[:] = [str(Path(script).resolve().parent), *PATH[1:]]
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:  # noqa: BLE001 - reported as Python reports an uncaught exception
        traceback.print_exc()
        code = 1
    try:
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
        code = code or 1
    return code


def main() -> None:
    preload()
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = run_script(request)
            finally:
                try:
                    sys.stdout.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(code & 0xFF)
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"code": os.waitstatus_to_exitcode(status)}), flush=True)


if __name__ == "__main__":
    main()
