"""Outputs the user names are checked before the work (tools/output_paths.py): never an input of the command (the
pipeline file, its model), never the kernel's trees, never a folder where a file belongs, never a folder that refuses
files (a read-only bind mount, for real). One error line and its hint, no traceback, nothing left behind, the inputs
unchanged; and `sdk init` refuses a --source that `sdk check` would refuse."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import PIPELINE, tiny_yolo


@pytest.fixture()
def tiny(tmp_path, monkeypatch) -> Path:
    """A tiny pipeline file and its model in a folder of their own; the working folder is the test's (reports/ there)."""
    folder = tmp_path / "p"
    folder.mkdir()
    tiny_yolo(folder / "tiny.onnx")
    (folder / "tiny.yaml").write_text(PIPELINE.format(uri="synthetic://boxes?width=64&height=48&frames=50", rate=30, max_ms=5000))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SDK_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("SDK_HISTORY", str(tmp_path / "history.sqlite"))
    return folder / "tiny.yaml"


@pytest.fixture()
def read_only(tmp_path):
    """A folder that is a read-only bind mount of itself (root only), unmounted afterwards whatever happens."""
    if os.geteuid() != 0:
        pytest.skip("a read-only bind mount needs root")
    folder = tmp_path / "read-only"
    folder.mkdir()
    (folder / "kept.txt").write_text("here before")
    done = subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {done.stderr.strip()}")
    try:
        remount = subprocess.run(["mount", "-o", "remount,bind,ro", str(folder)], capture_output=True, text=True)
        if remount.returncode != 0:
            pytest.skip(f"cannot remount read-only here: {remount.stderr.strip()}")
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def one_error(done, *words: str) -> str:
    """Exit 1, one `error:` line and one `hint:` line, no traceback; `words` in the error line."""
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert len(lines) == 2 and lines[0].startswith("error:") and lines[1].startswith("hint:"), done.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def snapshot(*files: Path) -> dict:
    return {f: f.read_bytes() for f in files}


def no_partials(*folders: Path) -> None:
    for folder in folders:
        assert not [p.name for p in folder.iterdir() if p.name.endswith(".partial") or ".probe-" in p.name], sorted(os.listdir(folder))


@pytest.mark.parametrize("command", ["predict", "profile"])
@pytest.mark.parametrize("which", ["pipeline", "model"])
def test_json_at_the_pipeline_file_or_its_model_is_refused_and_both_are_unchanged(tiny, sdk, command, which):
    model = tiny.with_name("tiny.onnx")
    before = snapshot(tiny, model)
    target = tiny if which == "pipeline" else model
    where = ["--platform", "host"] if command == "predict" else ["--target", "local"]
    done = sdk(command, str(tiny), *where, "--json", str(target))
    one_error(done, "--json", str(target), "which this command reads")
    assert snapshot(tiny, model) == before
    assert not Path("reports").exists()  # refused before the work: no report folder was even made
    no_partials(tiny.parent)


@pytest.mark.parametrize("command", ["predict", "profile"])
def test_an_unwritable_json_path_fails_in_one_line_before_any_work(tiny, sdk, read_only, command):
    where = ["--platform", "host"] if command == "predict" else ["--target", "local"]
    for path, words in (
        ("/proc/profile.json", ["/proc", "kernel"]),
        (str(read_only / "out.json"), ["read-only file system"]),
        (str(read_only / "new" / "out.json"), ["read-only file system"]),
        (str(tiny.parent), ["is a folder; a file is expected"]),
    ):
        done = sdk(command, str(tiny), *where, "--json", path)
        one_error(done, "--json", *words)
    assert not Path("reports").exists()  # before any profile: no report folder, nothing measured
    no_partials(tiny.parent, tiny.parent.parent)
    assert sorted(os.listdir(read_only)) == ["kept.txt"]


def test_profile_report_dir_that_cannot_take_files_is_refused_before_the_profile(tiny, sdk, read_only, tmp_path):
    (tmp_path / "a-file").write_text("not a folder")
    for folder, words in (("/proc/reports", ["/proc"]), (str(read_only / "r"), ["read-only file system"]), (str(tmp_path / "a-file"), ["is a file"])):
        one_error(sdk("profile", str(tiny), "--target", "local", "--report-dir", folder), "--report-dir", *words)
    assert not Path("reports").exists()


def test_a_profile_stopped_before_its_report_leaves_a_folder_that_says_so(tiny, monkeypatch, tmp_path, sdk):
    from tools.perf.run import Profile
    from tools.reports.report_dirs import UNFINISHED_FILE

    def killed(self, *args):
        raise KeyboardInterrupt  # as a kill would: the run ends before its report

    monkeypatch.setattr(Profile, "_run_local", killed)
    with pytest.raises(KeyboardInterrupt):
        Profile(tiny, "local", frames=5, report_dir=tmp_path / "reports" / "20250101T000000Z-local-profile")()
    folder = tmp_path / "reports" / "20250101T000000Z-local-profile"
    assert (folder / UNFINISHED_FILE).is_file() and "did not finish" in (folder / UNFINISHED_FILE).read_text()
    (tmp_path / "reports" / "20250102T000000Z-local-deploy").mkdir()  # a killed deploy's folder, before its report
    done = sdk("history", "index", str(tmp_path / "reports"))
    assert done.returncode == 0, done.stderr
    assert "2 report folder(s) skipped: their run stopped before its report" in done.stderr, done.stderr


def test_history_html_at_the_history_or_somewhere_unwritable_is_refused_before_the_query(tiny, sdk, read_only, tmp_path):
    history = tmp_path / "history.sqlite"
    from tools.history.store import open_for_writing

    open_for_writing(history).close()
    before = history.read_bytes()
    one_error(sdk("history", "--html", str(history)), "--html", "the history database")
    assert history.read_bytes() == before
    one_error(sdk("history", "--html", "/proc/trends.html"), "--html", "/proc")
    one_error(sdk("history", "--html", str(read_only / "trends.html")), "--html", "read-only file system")
    one_error(sdk("history", "--html", str(tmp_path)), "--html", "is a folder")
    no_partials(tmp_path)


def test_optimize_report_dir_that_cannot_take_files_is_refused_before_the_work(tiny, sdk, read_only, tmp_path):
    (tmp_path / "a-file").write_text("not a folder")
    for folder, words in (("/proc/o", ["/proc"]), (str(read_only / "o"), ["read-only file system"]), (str(tmp_path / "a-file"), ["is a file"])):
        done = sdk("optimize", str(tiny), "--platform", "jetson-agx-orin", "--report-dir", folder)
        one_error(done, "--report-dir", *words)
    assert not Path("reports").exists()


def test_init_into_a_read_only_folder_is_one_error_and_writes_nothing(sdk, read_only, tmp_path):
    tiny_yolo(tmp_path / "m.onnx")
    done = sdk("init", str(tmp_path / "m.onnx"), "--output", str(read_only / "m.yaml"))
    one_error(done, "--output", "read-only file system")
    assert sorted(os.listdir(read_only)) == ["kept.txt"]


@pytest.mark.parametrize(
    "source, words",
    [("ftp://x;rm -rf /", ["unknown source URI", "allowed: file://"]), ("file://missing.mp4", ["missing.mp4 does not exist"])],
)
def test_init_refuses_a_source_sdk_check_would_refuse_and_writes_nothing(sdk, tmp_path, source, words):
    tiny_yolo(tmp_path / "m.onnx")
    done = sdk("init", str(tmp_path / "m.onnx"), "--source", source)
    one_error(done, "--source", *words)
    assert not (tmp_path / "m.yaml").exists()
    no_partials(tmp_path)


def test_write_whole_at_a_folder_leaves_no_partial_behind(tmp_path):
    from sdk.errors import ConfigError
    from sdk.sinks.files import write_whole
    from tools.output_paths import write_output

    (tmp_path / "out").mkdir()
    with pytest.raises(OSError):
        write_whole(tmp_path / "out", "{}")
    with pytest.raises(ConfigError) as caught:
        write_output(tmp_path / "out", "{}", "--json")
    assert "cannot be written" in caught.value.message
    assert sorted(os.listdir(tmp_path)) == ["out"]


def test_negative_limit_and_runs_have_hints_of_their_own(sdk, tmp_path, monkeypatch):
    monkeypatch.setenv("SDK_HISTORY", str(tmp_path / "history.sqlite"))
    line = one_error(sdk("history", "--limit", "-1"), "--limit -1")
    assert "pipeline" not in line
    assert "--limit 0 all" in sdk("history", "--limit", "-1").stderr
    one_error(sdk("compare", "a", "b", "--runs", "-3"), "--runs -3")
    assert "--runs 5" in sdk("compare", "a", "b", "--runs", "-3").stderr


def test_deploy_report_dir_in_proc_or_on_a_read_only_disk_is_refused_before_anything_is_sent(tiny, sdk, read_only, tmp_path):
    for folder, words in (("/proc/deploy", ["/proc"]), (str(read_only / "deploy"), ["read-only file system"])):
        one_error(sdk("deploy", "--target", "local", str(tiny), "--report-dir", folder), "--report-dir", *words)
    assert not (tmp_path / "state" / "targets" / "local" / "releases").exists()  # nothing reached the target
