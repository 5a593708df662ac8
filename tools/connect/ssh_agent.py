"""The host's side of the device agent (`python -m sdk store serve`, sdk/agent/serve.py): one process per SSH
session answers every store request of a deploy, and receives the release as one stream it hashes while
writing. Requests are JSON lines; the agent's answers are JSON lines; nothing goes through a shell unquoted."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path

from sdk.errors import ReleaseError, TargetError
from sdk.store.objects import disk_full
from tools.connect.remote_process import RemoteProcess, send_all
from tools.connect.session_protocol import lock_hint
from tools.progress import Task

BLOCK = 1 << 20


class AgentGone(TargetError):
    """The agent process ended (the agent is not installed, or it exited after a failed upload)."""


class AgentClient:
    def __init__(self, connection, command: list[str], name: str, payload: Callable[[], bytes] | None = None) -> None:
        self.connection = connection
        self.command = command
        self.name = name
        self.payload = payload  # the agent's tar, sent when the device asks for it (START_AGENT)
        self.process: RemoteProcess | None = None
        self._sending = threading.Lock()  # request lines, the upload stream and heartbeats never interleave

    def start(self) -> None:
        """Start the agent and wait for its `ready` line; AgentGone when it cannot start (no agent there)."""
        self.launch()
        self.ready()

    def launch(self) -> None:
        """Start the agent without waiting: its start-up overlaps what the host does next (the lock holder's)."""
        self.process = self.connection.start(self.command)
        self._ready = False

    def ready(self) -> None:
        """Wait for a launched agent's `ready` line (once); AgentGone when it did not start."""
        if getattr(self, "_ready", True):
            return
        answer = self._read(self.connection.spec.timeouts.command_s)
        if answer.get("install") and self.payload is not None:
            try:
                send_all(self.process.channel, self.payload())
            except (OSError, EOFError):
                pass  # the answer below says why
            answer = self._read(self.connection.spec.timeouts.command_s)
        if not answer.get("ready"):
            self.close()
            raise AgentGone(f"{self.connection.where}: the device agent did not start")
        self._ready = True

    def alive(self) -> bool:
        return self.process is not None and not self.process.channel.closed

    def close(self) -> str:
        process, self.process = self.process, None
        return process.close() if process is not None else ""

    def _read(self, timeout: float) -> dict:
        try:
            line = self.process.read_line(timeout=self.connection.remaining(timeout))
        except TargetError:
            self.close()
            raise
        try:
            answer = json.loads(line)
        except ValueError:
            stderr = self.close()
            raise AgentGone(f"{self.connection.where}: the device agent ended: {_last_line(stderr) or 'no answer'}") from None
        return answer if isinstance(answer, dict) else {}

    def _send_line(self, request: dict) -> None:
        with self._sending:
            self._send_locked(request)

    def _send_locked(self, request: dict) -> None:
        if not self.alive():
            self.start()
        self.ready()
        try:
            self.process.channel.sendall(json.dumps(request).encode() + b"\n")
        except (OSError, EOFError) as exc:
            self.close()
            raise TargetError(f"{self.connection.where}: the connection dropped: {exc or type(exc).__name__}") from None

    def answer(self, request: dict, timeout: float | None = None) -> dict:
        """One request and its answer as it came: `{"ok": ...}` or `{"error": ..., "hint": ...}`."""
        self._send_line(request)
        return self._read(timeout or self.connection.spec.timeouts.command_s)

    def request(self, request: dict, what: str, timeout: float | None = None) -> dict:
        """One request, its `ok` answer; the device's error as TargetError (its message and hint)."""
        answer = self.answer(request, timeout)
        if "ok" in answer:
            return answer["ok"]
        message, hint = answer.get("error") or "no answer", answer.get("hint") or "see the target's message above"
        raise TargetError(f"{what} failed on the target: {message}", hint=hint)

    def store(self, op: str, *args: str) -> dict:
        return self.request({"argv": [op, *args]}, f"store {op}")

    def lock(self, owner: str, lease: float, wait: float) -> tuple[int, Heartbeats]:
        """The deploy lock, held by this session's agent (decision 0810); its lease is kept by heartbeats."""
        answer = self.answer({"lock": owner, "lease": lease, "wait": wait}, self.connection.spec.timeouts.command_s + wait)
        token = (answer.get("ok") or {}).get("token")
        if answer.get("ok", {}).get("locked") != owner or not isinstance(token, int):
            message = answer.get("error") or "cannot take the deploy lock"
            raise ReleaseError(f"{self.name}: {message}", hint=lock_hint(message))
        return token, Heartbeats(self, self.process, every=lease / 4)

    def unlock(self) -> None:
        """End the lease (the device rolls back its own unfinished trial first); nothing when the agent is gone."""
        if self.alive():
            self.answer({"unlock": True})

    def heartbeat(self, process: RemoteProcess) -> bool:
        """One empty line to the agent that holds the lock; False once that agent is gone (never starts another)."""
        if not self._sending.acquire(timeout=0.5):
            return True  # an upload stream is being sent: its bytes renew the lease
        try:
            if self.process is not process or not self.alive():
                return False
            process.channel.sendall(b"\n")
            return True
        except (OSError, EOFError):
            return False
        finally:
            self._sending.release()

    def receive(self, objects: dict[str, tuple[int, Path]], task: Task, tick: Callable[[], None]) -> int:
        """Stream every object's missing bytes; the device hashes them as it writes and publishes each verified one."""
        order = list(objects)
        with self._sending:  # heartbeats wait: the stream's own bytes prove this host alive
            offsets, sent = self._stream(objects, order, task, tick)
        answer = self._read(self.connection.spec.timeouts.command_s)  # the last objects' fsyncs; heartbeats go on
        if "ok" not in answer:
            self._raise(answer, objects, order, offsets)
        return sent

    def _stream(self, objects: dict[str, tuple[int, Path]], order: list[str], task: Task, tick: Callable[[], None]) -> tuple[dict, int]:
        self._send_locked({"receive": [f"{sha}:{objects[sha][0]}" for sha in order]})
        offsets = self._read(self.connection.spec.timeouts.command_s).get("offsets")
        if not isinstance(offsets, dict):
            raise TargetError(f"{self.connection.where}: the device agent refused the upload", hint="see the target's message above")
        sent = 0
        channel = self.process.channel
        channel.settimeout(None)  # sendall waits for the window; a stalled link is the transfer watchdog's to end
        try:
            for sha256 in order:
                size, source = objects[sha256]
                offset = int(offsets.get(sha256, 0))
                task.advance(offset)
                with source.open("rb") as local:
                    local.seek(offset)
                    while block := local.read(min(BLOCK, size - local.tell())):
                        send_all(channel, block)
                        task.advance(len(block))
                        sent += len(block)
                        tick()
        except (OSError, EOFError):
            if not self.connection.alive():
                raise  # a lost link: the partial stays on the device for the next deploy to resume
            answer = self._answer_after_failure()
            if answer is None:
                raise
            self._raise(answer, objects, order, offsets)
        return offsets, sent

    def _answer_after_failure(self) -> dict | None:
        try:
            return self._read(min(30.0, self.connection.spec.timeouts.command_s))  # a refused write answers at once
        except TargetError:
            return None

    def _raise(self, answer: dict, objects, order: list[str], offsets: dict) -> None:
        if answer.get("errno") is not None or answer.get("cut"):
            self.close()  # it ended after this answer: the next request starts a new one
        message = answer.get("error") or "the upload failed"
        if answer.get("disk_full"):
            failed = Path(answer.get("path", "")).name.removeprefix(".upload-")
            later = order[order.index(failed) + 1 :] if failed in order else []
            need = objects[failed][0] if failed in objects else 0
            need += sum(objects[sha][0] - int(offsets.get(sha, 0)) for sha in later)
            raise disk_full(self.name, need, int(answer.get("free_bytes") or 0))
        if "arrived corrupt" in message:
            raise ReleaseError(f"{self.name}: {message}", hint="deploy again to resend it")
        if answer.get("path"):
            raise TargetError(f"{self.name}: {message}", hint="the current release is untouched; check the target's filesystem, then deploy again")
        raise TargetError(f"{self.name}: the upload failed on the target: {message}", hint=answer.get("hint") or "deploy again")


class Heartbeats:
    """An empty line to the agent every `every` seconds while the lock is held (the device takes silence for death)."""

    def __init__(self, client: AgentClient, process: RemoteProcess, every: float) -> None:
        self._beating = threading.Event()

        def beat() -> None:
            while not self._beating.wait(every) and client.heartbeat(process):
                pass

        threading.Thread(target=beat, name="sdk-lock-heartbeat", daemon=True).start()

    def close(self) -> None:
        self._beating.set()


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("error:"):
            return line.removeprefix("error:").strip()
    return lines[-1] if lines else ""


# One exec and one Python a session: a missing agent (first contact, a new version) is found by the shell, which asks for
# the agent's tar on the same channel (`{"install": true}`); that Python unpacks it, then serves as the agent.
START_AGENT = (
    'if [ -d "$1" ]; then exec env PYTHONPATH="$1" PYTHONDONTWRITEBYTECODE=1 "$2" -B -m sdk store --root "$3" serve; fi; '
    'echo \'{"install": true}\'; exec "$2" -B -c "$4" "${1%/*}/.tmp-${1##*/}-$$" "$1" "$3"'
)


def agent_command(agent: str, python: str, root: str, install: str) -> list[str]:
    """The agent's start: its folder, the device's Python, the store root and the install-then-serve script are
    positional arguments of a fixed script (no value is parsed by the shell)."""
    return ["sh", "-c", START_AGENT, "sh", agent, python, root, install]


__all__ = ["AgentClient", "AgentGone", "agent_command"]
