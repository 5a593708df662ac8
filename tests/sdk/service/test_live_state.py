"""The supervisor's live state (sdk/service/live.py): answered without a file, believed only from the process the
caller verified. A squatter that binds another process's name is never believed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SERVER = """
import os, select, sys
from sdk.service.live import LiveState, address
pid = int(sys.argv[1]) if len(sys.argv) > 1 else os.getpid()
live = LiveState(pid, lambda: {"state": "running", "pid": os.getpid()})
print("ready", flush=True)
while True:
    if select.select([live], [], [], 0.1)[0]:
        live.answer()
"""


def serve(*args: str) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-c", SERVER, *args], stdout=subprocess.PIPE, text=True, cwd=REPO)
    assert process.stdout.readline().strip() == "ready"
    return process


def test_the_supervisors_own_answer_is_read_and_a_squatters_is_not():
    from sdk.service.live import ask

    own = serve()
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    squatter = serve(str(bystander.pid))  # binds the name of the bystander's pid: it is not the bystander
    try:
        assert ask(own.pid) == {"state": "running", "pid": own.pid}
        assert ask(bystander.pid) is None  # the kernel names the squatter at the other end
        assert ask(squatter.pid) is None  # nobody answers under the squatter's own name
    finally:
        for process in (own, squatter, bystander):
            process.kill()
            process.wait()
