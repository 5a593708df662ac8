"""The device agent (`python -m sdk store serve`) on its own: requests and the streamed upload, through pipes as SSH
gives them, without SSH. Each object is hashed while written and published only when its hash is its name."""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat

from sdk.agent.serve import serve
from sdk.store.objects import ReleaseStore


def run_agent(root, *chunks: bytes) -> list[dict]:
    stdin, stdout = io.BufferedReader(io.BytesIO(b"".join(chunks))), io.BytesIO()
    serve(root, stdin, stdout)
    return [json.loads(line) for line in stdout.getvalue().splitlines()]


def line(request: dict) -> bytes:
    return json.dumps(request).encode() + b"\n"


def test_a_streamed_object_is_published_only_with_its_hash(tmp_path):
    good, bad = os.urandom(300_000), os.urandom(1000)
    good_sha = hashlib.sha256(good).hexdigest()
    claimed = hashlib.sha256(b"something else").hexdigest()  # the stream's bytes will not hash to it
    answers = run_agent(tmp_path, line({"receive": [f"{good_sha}:{len(good)}"]}), good, line({"receive": [f"{claimed}:{len(bad)}"]}), bad)
    assert answers[0]["ready"] and answers[1] == {"offsets": {good_sha: 0}} and answers[2] == {"ok": {"installed": [good_sha]}}
    store = ReleaseStore(tmp_path)
    published = store.object_path(good_sha)
    assert published.read_bytes() == good and not stat.S_IMODE(published.stat().st_mode) & 0o222  # read-only
    assert "arrived corrupt" in answers[4]["error"]
    assert not store.object_path(claimed).exists() and not store.upload_path(claimed).exists()  # discarded


def test_a_cut_upload_resumes_from_what_is_on_the_device(tmp_path):
    data = os.urandom(200_000)
    sha = hashlib.sha256(data).hexdigest()
    store = ReleaseStore(tmp_path)
    store.ensure()
    store.upload_path(sha).write_bytes(data[:70_000])  # what a cut link left
    answers = run_agent(tmp_path, line({"receive": [f"{sha}:{len(data)}"]}), data[70_000:])
    assert answers[1] == {"offsets": {sha: 70_000}} and answers[2] == {"ok": {"installed": [sha]}}
    assert store.object_path(sha).read_bytes() == data


def test_a_stream_that_ends_early_keeps_its_partial_for_the_next_deploy(tmp_path):
    data = os.urandom(100_000)
    sha = hashlib.sha256(data).hexdigest()
    answers = run_agent(tmp_path, line({"receive": [f"{sha}:{len(data)}"]}), data[:40_000])
    assert answers[-1]["cut"] and ReleaseStore(tmp_path).upload_path(sha).stat().st_size == 40_000


def test_store_requests_answer_as_the_store_command_does(tmp_path):
    answers = run_agent(tmp_path, line({"argv": ["prepare"]}), line({"argv": ["rollback", "--token", "1"]}), line({"argv": ["status"]}))
    assert answers[1]["ok"]["current"] is None and "free_bytes" in answers[1]["ok"]
    assert "error" in answers[2] and answers[2]["hint"]  # refused by the store's own rules, one line, the agent goes on
    assert answers[3]["ok"]["releases"] == []
