"""The CLI's rough edges for a newcomer: a folder or a missing file as the pipeline, help texts, progress output
clean when piped and steady on a terminal, and no blank line before an error."""

from __future__ import annotations

import argparse
import io
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from tools.cli import build_parser, run
from tools.progress import RichProgress

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "from tools.cli import main; main()"]
# Variables that make rich write colours or terminal codes into a pipe.
TERMINAL_OVERRIDES = ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "CLICOLOR_FORCE")


def piped_env(tmp_path: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in TERMINAL_OVERRIDES}
    return {**env, "SDK_STATE_DIR": str(tmp_path / "state"), "SDK_TARGETS_DIR": str(tmp_path / "targets")}


def cli(args: list[str], env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], cwd=REPO, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)


@pytest.mark.parametrize("command", ["deploy", "validate", "prepare", "calibrate"])
def test_a_folder_as_the_pipeline_is_one_error_naming_it(tmp_path, monkeypatch, capsys, command):
    monkeypatch.setenv("SDK_STATE_DIR", str(tmp_path / "state"))
    target = ["--target", "local"] if command in ("deploy", "validate") else []
    assert run([command, *target, str(REPO / "pipelines")]) == 1
    out, err = capsys.readouterr()
    assert err.splitlines() == [
        f"error: {REPO / 'pipelines'} is a folder, not a pipeline file",
        f"hint: name one of its files, e.g. {REPO / 'pipelines' / 'pedestrian.yaml'}",
    ]
    assert out == "" and not (tmp_path / "state").exists()


def test_deploy_of_a_folder_or_a_missing_file_through_the_real_cli(tmp_path):
    env = piped_env(tmp_path)
    done = cli(["deploy", "--target", "local", "pipelines/"], env)
    assert done.returncode == 1 and done.stdout == b""
    assert done.stderr.decode().splitlines() == [
        "error: pipelines is a folder, not a pipeline file",
        "hint: name one of its files, e.g. pipelines/pedestrian.yaml",
    ]
    done = cli(["deploy", "--target", "local", "pipelines/pedestrain.yaml"], env)
    assert done.returncode == 1 and done.stdout == b""
    assert done.stderr.decode().splitlines() == [
        "error: pipelines/pedestrain.yaml: no such pipeline file",
        "hint: did you mean pipelines/pedestrian.yaml?",
    ]
    assert not (tmp_path / "state").exists()


def test_every_argument_and_subcommand_says_what_it_does():
    empty = []

    def walk(parser: argparse.ArgumentParser, where: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                helps = {choice.dest: choice.help for choice in action._choices_actions}
                for name, sub in action.choices.items():
                    if not (helps.get(name) or "").strip():
                        empty.append(f"{where} {name}")
                    if not (sub.description or "").strip():  # its own --help page opens with what it does
                        empty.append(f"{where} {name} --help")
                    walk(sub, f"{where} {name}")
            elif not (action.help or "").strip() or action.help == argparse.SUPPRESS:
                empty.append(f"{where} {'/'.join(action.option_strings) or action.dest}")

    walk(build_parser(), "sdk")
    assert not empty, f"no help text: {empty}"


def test_piped_progress_has_no_control_bytes_and_one_line_per_step(tmp_path, tiny_pipeline):
    pipeline, _ = tiny_pipeline(frames=6)
    done = cli(["deploy", "--target", "local", str(pipeline.path), "--frames", "6", "--report-dir", str(tmp_path / "r")], piped_env(tmp_path))
    assert done.returncode in (0, 4), done.stderr.decode()
    output = done.stdout + done.stderr
    assert b"\x1b" not in output and b"\r" not in output
    progress, results = done.stderr.decode().splitlines(), done.stdout.decode().splitlines()
    assert re.fullmatch(r"probing local: in \d+\.\d s", progress[1]), progress  # progress on stderr
    assert any(re.fullmatch(r"running on local: 6/6 in \d+\.\d s", line) for line in progress), progress
    assert results[0].startswith("tiny on local: ") and not any(" in " in line and line.endswith(" s") for line in results), results


def test_the_terminal_summary_has_the_queue_row_and_no_colours_guessed_into_prose(tmp_path, tiny_pipeline, monkeypatch, capsys):
    pipeline, _ = tiny_pipeline(frames=6)
    for key, value in {**piped_env(tmp_path), "FORCE_COLOR": "1", "COLUMNS": "200"}.items():
        monkeypatch.setenv(key, value)
    assert run(["deploy", "--target", "local", str(pipeline.path), "--frames", "6", "--report-dir", str(tmp_path / "r")]) in (0, 4)
    out = capsys.readouterr().out
    rows = [strip_terminal_codes(line) for line in out.splitlines()]
    assert any(re.match(r"│ queue \(waiting\) +│ +\d+\.\d\d │", row) for row in rows), "\n".join(rows)  # as report.html's queue
    summary = next(line for line in out.splitlines() if "frames measured" in line)
    assert "\x1b[1m" in summary and not re.search(r"\x1b\[[0-9;]*m\d", summary), repr(summary)  # bold names; numbers uncoloured


def strip_terminal_codes(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)


def on_a_terminal(argv: list[str], env: dict, timeout: float = 120) -> str:
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(REPO)
        os.execvpe(argv[0], argv, {**env, "TERM": "xterm-256color", "COLUMNS": "120"})
    output, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        output += chunk
    os.waitpid(pid, 0)
    os.close(fd)
    return output.decode(errors="replace")


def test_an_error_is_the_first_line_piped_and_on_a_terminal(tmp_path):
    folder = tmp_path / "p"
    folder.mkdir()
    (folder / "bad.yaml").write_text((REPO / "pipelines" / "pedestrian.yaml").read_text().replace("\nsource:", "\nsorce:", 1))
    env = piped_env(tmp_path)
    done = cli(["deploy", "--target", "local", str(folder / "bad.yaml")], env)
    assert done.returncode == 1 and done.stdout == b"" and done.stderr.decode().startswith("error: ")
    shown = strip_terminal_codes(on_a_terminal([*CLI, "deploy", "--target", "local", str(folder / "bad.yaml")], env)).replace("\r", "")
    assert shown.startswith("error: "), repr(shown[:200])


def rendered(progress: RichProgress) -> list[str]:
    """The live display's current frame as plain text lines."""
    display = progress._progress
    console = Console(file=io.StringIO(), width=100, color_system=None, force_terminal=False)
    console.print(display.make_tasks_table(display.tasks))
    return console.file.getvalue().splitlines()


def test_on_a_terminal_columns_stay_put_and_a_finished_step_stops_spinning():
    terminal = Console(file=io.StringIO(), force_terminal=True, width=100, color_system=None)
    progress = RichProgress(terminal)
    with progress:
        assert terminal.file.getvalue() == ""  # nothing drawn before the first step: no blank line before an error
        progress.task("probing local", total=None).done()
        sending = progress.task("sending release 48d00cf533d8903e to local", total=1)
        sending.done()  # a redeploy: nothing sent, 0 of 1
        running = progress.task("running on local", total=20)
        running.update(completed=7)
        before = rendered(progress)
        progress.task("FP32 reference on the host: a much longer description than the others, cut to fit", total=None)
        after = rendered(progress)
    frames = "\n".join(before + after)
    assert len({line.index("━") for line in before + after if "━" in line}) == 1, f"a new step moved the bars:\n{frames}"
    assert len({line.index("0:00:") for line in before + after}) == 1, f"a new step moved the times:\n{frames}"
    assert before[0].startswith("  probing local") and before[1].startswith("  sending release")  # done: no spinner
    assert not before[2].startswith("  ")  # the running step spins
    assert after[3].rstrip().endswith("0:00:00") and "…" in after[3]
    assert all(len(line) <= 100 for line in after)


def test_piped_progress_prints_each_step_once_when_done():
    piped = Console(file=io.StringIO(), width=100)
    with RichProgress(piped) as progress:
        task = progress.task("sending release 1 to sim", total=20_731_177)
        task.update(completed=10_000_000)
        assert piped.file.getvalue() == ""
        task.update(completed=20_731_177)
        task.done()
        task.done()
    assert re.fullmatch(r"sending release 1 to sim: 20\.7M/20\.7M in \d+\.\d s\n", piped.file.getvalue())
