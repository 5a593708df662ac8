"""How a device process ended is said in words: never "status -1"."""

from __future__ import annotations

from tools.connect.session_protocol import RunOutcome, exit_text


def test_exit_statuses_in_words():
    assert exit_text(-1) == "the connection closed before the runtime reported how it ended"
    assert exit_text(-11) == "the runtime was killed by signal 11 (SIGSEGV)"
    assert exit_text(137) == "the runtime was killed by signal 9 (SIGKILL)"
    assert exit_text(2) == "the runtime exited with status 2"
    assert RunOutcome(-1, "").error() == exit_text(-1)
    assert RunOutcome(1, "warning: x\nerror: cannot open the camera\nhint: plug it in\n").error() == "cannot open the camera"
