"""Device processes for the kill-point tests, forked from one process that imported the device's modules once.

Each request is a real OS process: `python -m sdk ARGS` (the unit's start command, `serve --root`) or the fault driver
(fault_driver.py), with its own working folder, environment and output files, killed by SIGKILL at its kill point like
any other. What it saves is the interpreter's start and the imports (numpy, OpenCV, ONNX Runtime, the store and the
runtime: about 1.5 CPU-seconds a process), not a step of what it runs: `runpy` runs the same `__main__` as `python -m
sdk` and `python fault_driver.py` do. The health runs that a trial starts are the product's own subprocesses, fresh
interpreters as on a device, and the unit's start command (`serve --root`) execs the committed release's own
interpreter after its recovery, so the fork saves only the part before that exec: those two fresh interpreters are
what a kill-point case costs (decision 1115). The forker's CPU, its children's included, is counted when it ends (at
the end of the module), not by case. Requests and answers are JSON lines on the forker's stdin/stdout.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

FORKER = r"""
import importlib, json, os, runpy, sys
sys.dont_write_bytecode = True
for name in ("numpy", "cv2", "onnxruntime", "yaml", "pydantic", "sdk.errors", "sdk.release", "sdk.spec", "sdk.store.objects",
             "sdk.store.trial", "sdk.store.verify", "sdk.runtime.runner", "sdk.service.serve", *sys.argv[1:]):
    importlib.import_module(name)
answers = sys.stdout
for line in sys.stdin:
    request = json.loads(line)
    if "wait" in request:
        status = os.waitpid(request["wait"], 0)[1]
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        answers.write(json.dumps({"code": code}) + "\n")
        answers.flush()
        continue
    answers.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the device process: its folder, environment and files, then the script as `python X ARGS` runs it
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.dup2(os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 1)
        os.dup2(os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
        sys.argv = list(request["argv"])
        code = 0
        try:
            if request["module"] and ":" in request["module"]:  # a console script's entry point, `sdk = tools.cli:main`
                name, function = request["module"].split(":")
                getattr(importlib.import_module(name), function)()
            elif request["module"]:
                runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(sys.argv[0], run_name="__main__")
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:
            import traceback
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # not the interpreter's shutdown: the forker's state is not this process's to tear down
    answers.write(json.dumps({"pid": pid}) + "\n")
    answers.flush()
"""


class DeviceForks:
    """`run(...)` forks one device process and waits for it; `close()` ends the forker."""

    def __init__(self, repo: Path, env: dict, preload: tuple[str, ...] = ()) -> None:
        """`preload`: modules the forker imports besides the device's (the host CLI's, for a test that forks it)."""
        self.forker = subprocess.Popen(
            [sys.executable, "-B", "-c", FORKER, *preload], cwd=repo, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def _ask(self, request: dict) -> dict:
        self.forker.stdin.write(json.dumps(request) + "\n")
        self.forker.stdin.flush()
        answer = self.forker.stdout.readline()
        if not answer:
            raise RuntimeError(f"the forker ended (exit {self.forker.poll()})")
        return json.loads(answer)

    def run(self, argv: list[str], *, module: str | None, cwd: Path, env: dict, output: Path, timeout: float = 120) -> subprocess.CompletedProcess:
        """`python -m MODULE ARGV` (or `python ARGV[0] ARGV[1:]` when `module` is None; a console script's `ARGV[0] ARGV[1:]`
        when `module` is its entry point, `package.module:function`): its exit code (-9 when SIGKILLed),
        stdout and stderr (kept in `output`.out and `output`.err)."""
        stdout, stderr = output.with_suffix(".out"), output.with_suffix(".err")
        pid = self._ask({"argv": argv, "module": module, "cwd": str(cwd), "env": env, "stdout": str(stdout), "stderr": str(stderr)})["pid"]
        self.forker.stdin.write(json.dumps({"wait": pid}) + "\n")
        self.forker.stdin.flush()
        finished = select.select([self.forker.stdout], [], [], timeout)[0]
        if not finished:
            os.kill(pid, signal.SIGKILL)  # a hung process: ended, then reported
        code = json.loads(self.forker.stdout.readline())["code"]
        if not finished:
            raise subprocess.TimeoutExpired(argv, timeout, stdout.read_text(), stderr.read_text())
        return subprocess.CompletedProcess(argv, code, stdout.read_text(), stderr.read_text())

    def close(self) -> None:
        self.forker.stdin.close()
        self.forker.wait(timeout=60)
        self.forker.stdout.close()
