"""The deploy lease held by the device agent (`python -m sdk store serve`, decision 0810), real agent processes as on
a device: kill -9 of the holding agent frees the target at once, a silent host loses it within one lease, and the end
of the session ends the lease after rolling back its own unfinished trial."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from sdk.store.lease import read_lease

REPO = Path(__file__).resolve().parents[3]


class Agent:
    def __init__(self, root: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        argv = [sys.executable, "-B", "-m", "sdk", "store", "--root", str(root), "serve"]
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        assert self.answer()["ready"]

    def answer(self) -> dict:
        return json.loads(self.process.stdout.readline())

    def ask(self, request: dict) -> dict:
        self.process.stdin.write(json.dumps(request).encode() + b"\n")
        self.process.stdin.flush()
        return self.answer()

    def close(self) -> int:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            stream.close()
        return self.process.returncode


def test_a_second_deployer_is_refused_and_kill_9_of_the_holding_agent_frees_the_target(tmp_path):
    first, second = Agent(tmp_path), Agent(tmp_path)
    try:
        token = first.ask({"lock": "host-a:1", "lease": 30, "wait": 0})["ok"]["token"]
        refused = second.ask({"lock": "host-b:2", "lease": 30, "wait": 0})
        assert refused["error"].startswith("the target is busy: host-a:1 since")
        first.process.send_signal(signal.SIGKILL)
        first.process.wait()
        taken = second.ask({"lock": "host-b:2", "lease": 30, "wait": 0})["ok"]  # at once: the kernel freed the flock
        assert taken["token"] == token + 1
    finally:
        first.close()
        second.close()


def test_a_silent_host_loses_the_lease_within_one_lease_and_the_agent_ends(tmp_path):
    agent = Agent(tmp_path)
    try:
        agent.ask({"lock": "host-a:1", "lease": 1, "wait": 0})
        assert agent.process.wait(timeout=30) != 0  # no heartbeat for one lease: the agent ended it and itself
        lease = read_lease(tmp_path)
        assert lease.ended and not lease.live()
    finally:
        agent.close()


def test_heartbeats_keep_the_lease_and_the_end_of_the_session_ends_it(tmp_path):
    agent = Agent(tmp_path)
    try:
        agent.ask({"lock": "host-a:1", "lease": 5, "wait": 0})
        for _ in range(14):  # longer than the lease, a heartbeat (an empty line, answered by nothing) every tenth of it
            agent.process.stdin.write(b"\n")
            agent.process.stdin.flush()
            assert agent.process.poll() is None
            assert read_lease(tmp_path).live()
            time.sleep(0.5)
        assert agent.ask({"argv": ["status"]})["ok"]["releases"] == []  # requests still answered in step
        assert agent.ask({"unlock": True})["ok"]["unlocked"] == "host-a:1"
        assert read_lease(tmp_path).ended
        agent.ask({"lock": "host-a:2", "lease": 30, "wait": 0})
        agent.process.stdin.close()  # the SSH session ends
        assert agent.process.wait(timeout=30) == 0
        assert read_lease(tmp_path).ended
    finally:
        agent.close()
