"""The runtime's own lines for service.log (sdk/service/runtime_log.py): a state change, a new stage error, a frames
line every interval and the end, each stamped `[runtime PID]` (the service tests read them back through `sdk logs`)."""

from __future__ import annotations

from types import SimpleNamespace

from sdk.service.runtime_log import RuntimeLog


def test_the_runtime_says_its_state_its_errors_its_frames_and_its_end():
    lines, now = [], [0.0]
    runner = SimpleNamespace(result=None)
    log = RuntimeLog(runner, every_s=60, write=lines.append, clock=lambda: now[0])
    status = {"state": "NOMINAL", "frames": 0, "conditions": [], "dropped": 0, "misses": 0, "deadline_ms": 50.0,
              "window": {"frames": 300, "p50_ms": 12.5, "p99_ms": 20.1}}  # fmt: skip
    log(status)
    assert len(lines) == 1 and lines[0].endswith("state none -> NOMINAL\n") and " [runtime " in lines[0]
    now[0] = 30.0
    log({**status, "frames": 900})
    assert len(lines) == 1  # nothing new, and the frames line waits for its interval
    runner.result = SimpleNamespace(last_error="frame 901: decode: ValueError: bad", stage_errors={"decode": 1})
    now[0] = 61.0
    log({**status, "frames": 1830, "state": "DEGRADED", "conditions": ["no frame for 2.0 s"]})
    assert lines[1].endswith("state NOMINAL -> DEGRADED: no frame for 2.0 s\n")
    assert lines[2].endswith("error: frame 901: decode: ValueError: bad (stage errors so far: decode 1)\n")
    assert lines[3].endswith("frames 1830 (30.0 fps over 61 s); p50 12.5 ms, p99 20.1 ms over the last 300; dropped 0, deadline misses 0\n")
    log({**status, "frames": 1831, "state": "DEGRADED", "conditions": ["no frame for 2.0 s"]})
    assert len(lines) == 4  # the same error is said once
    log.ended({"state": "STOPPED", "reason": "the source ended", "stage_errors": {"decode": 1}, "last_error": "x"}, 1831)
    assert lines[4].endswith("ended (STOPPED): the source ended; 1831 frames; stage errors: decode 1; last error: x\n")


def test_an_error_line_reads_a_snapshot_of_the_stage_errors_and_is_said_again_after_a_failed_write():
    import pytest

    class Growing(dict):  # iterating it as the frame loop adds a stage meanwhile would
        def items(self):
            raise RuntimeError("dictionary changed size during iteration")

    lines, failing = [], [True]

    def write(text):
        if failing[0] and "error:" in text:
            raise OSError("stderr closed")
        lines.append(text)

    runner = SimpleNamespace(result=SimpleNamespace(last_error="frame 3: decode: bad", stage_errors=Growing({"decode": 1})))
    log = RuntimeLog(runner, every_s=60, write=write, clock=lambda: 0.0)
    status = {"state": "NOMINAL", "frames": 3}
    with pytest.raises(OSError):
        log(status)
    failing[0] = False
    log(status)
    assert [line for line in lines if "error:" in line][0].endswith("error: frame 3: decode: bad (stage errors so far: decode 1)\n")
