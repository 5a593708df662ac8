"""A vehicle's session over SSH: the very same store code on the device (`python -m sdk store ...`
from a small agent copy of `sdk`, one agent process per deploy holding the lease), uploads as one
verified stream, and the runtime run there.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

from sdk.errors import ReleaseError, TargetError
from sdk.release import ReleaseManifest
from sdk.store.objects import disk_full
from tools.connect.session_protocol import (
    MUTATING_OPS,
    TRIAL_HOST_MARGIN_S,
    RunOutcome,
    TrialOutcome,
    _trial_answer,
    parse_event,
    run_arguments,
    trial_arguments,
)
from tools.connect.ssh import error_line
from tools.progress import Task
from tools.targets import RemoteTarget


class SshSession:
    """A vehicle over SSH: store operations run by an agent copy of `sdk` on the device."""

    def __init__(self, target: RemoteTarget, connection) -> None:
        self.target = target
        self.name = target.name
        self.connection = connection
        self.root = target.root
        self.python = target.spec.python
        self._agent: str | None = None
        self._client = None
        self.place = None  # a labgrid place (tools/connect/labgrid_place.py), released when the session closes
        self._lock = None
        self.token: int | None = None

    def __enter__(self) -> SshSession:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self._client is not None:
                self._client.close()
            self.connection.close()
        finally:
            if self.place is not None:
                self.place.release()

    def power_cycle(self, delay: float | None = None) -> None:
        """Power-cycle the device through its labgrid place's power driver; the SSH connection starts over."""
        if self.place is None:
            raise TargetError(
                f"{self.name}: no power control: the target is not a labgrid place", hint="give the target file `labgrid: {place: NAME}`"
            )
        if self._client is not None:
            self._client.close()
            self._client = None
        self.connection.close()
        self.place.power_cycle(delay)

    # The agent: the release store code, uploaded once per version, before any release exists; one
    # process of it per session answers every store request (tools/connect/ssh_agent.py, sdk/agent/serve.py).
    def ensure_agent(self, runtime_files: dict[str, Path]) -> None:
        """Launch the agent without waiting for it. An agent that is not on the device yet (the first contact, a new
        version) is installed by the same command: the device asks for its tar on the channel (tools/connect/ssh_agent.py)."""
        from tools.connect.ssh_agent import AgentClient, agent_command

        if self._client is not None and self._client.alive():
            return
        version = agent_version(runtime_files)
        agent = f"{self.root}/agent/{version}"
        self._agent = agent
        self._runtime_files = runtime_files
        command = agent_command(agent, self.python, self.root, INSTALL_AND_SERVE)
        self._client = AgentClient(self.connection, command, self.name, payload=lambda: sized(agent_tar(runtime_files)))
        self._client.launch()

    def use_agent_files(self, runtime_files: dict[str, Path]) -> None:
        """For one command of the agent's `sdk` and nothing else (`sdk start`, `stop`, `logs`): the agent's copy, without
        its process. The command checks that the copy is there and, where it is not (first contact, a new version),
        it is installed and the command run again: one device Python a command, not two."""
        self._agent = f"{self.root}/agent/{agent_version(runtime_files)}"
        self._runtime_files = runtime_files

    def _agent_ready(self) -> bool:
        """Wait for the launched agent; install it when it is missing. True when it was installed just now."""
        from tools.connect.ssh_agent import AgentGone

        try:
            self._client.ready()
            return False
        except AgentGone:
            pass
        self._install_agent(self._runtime_files, self._agent, self._agent.rsplit("/", 1)[1])
        self._client.start()
        return True

    def _install_agent(self, runtime_files: dict[str, Path], agent: str, version: str) -> None:
        """The agent's files as one tar stream unpacked by the device's Python, then renamed into place."""
        staging = f"{self.root}/agent/.tmp-{version}-{os.getpid()}"
        self.connection.run([self.python, "-c", UNPACK_AGENT, staging, agent], stdin=agent_tar(runtime_files)).check("installing the agent")

    def _store(self, op: str, *args: str) -> dict:
        if self._client is None:
            raise TargetError("internal: the agent is not installed")
        self._agent_ready()
        return self._client.store(op, *args)

    def service_op(self, op: str, *args: str, python: str | None = None) -> dict:
        """`python` (a release's environment) for the ops that read the pipeline file (`unit`); else the device's own.
        `status` is asked of the session's agent: it is asked on every deploy, and a Python start-up costs more than it."""
        if op == "status" and python is None and self._client is not None:
            self._agent_ready()
            return self._client.request({"service-status": True}, "service status")
        command = self._agent_command()
        if python is not None:
            command = [*command[:3], python, *command[4:]]  # env PYTHONPATH=agent PYTHONDONTWRITEBYTECODE=1 <python> -B -m sdk
        token = ["--token", str(self.token)] if op == "start" and self.token is not None else []  # the deploy restarts what it paused
        argv = [*command, "service", "--root", self.root, op, *args, *token]
        result = self._run_agent_copy(argv)
        if result.exit_code != 0:
            raise TargetError(
                f"{self.name}: service {op}: {error_line(result.stderr) or result.stderr[-300:]}", hint=f"see `sdk logs --target {self.name}`"
            )
        try:
            return json.loads(result.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise TargetError(f"{self.connection.where}: service {op} answered {result.stdout[:200]!r}") from None

    def _run_agent_copy(self, argv: list[str]):
        """Run a command of the agent's copy; with no agent process in this session (use_agent_files), the command
        itself finds the copy missing, and it is installed and the command run again."""
        if self._client is not None:
            return self.connection.run(argv)
        result = self.connection.run(["sh", "-c", RUN_IF_AGENT, "sh", self._agent, *argv])
        if result.exit_code == AGENT_MISSING_EXIT and result.stderr.strip() == AGENT_MISSING:
            self._install_agent(self._runtime_files, self._agent, self._agent.rsplit("/", 1)[1])
            result = self.connection.run(argv)
        return result

    @property
    def lock_wait_s(self) -> float:
        """How long `lock` waits for another holder: one lease of the target's keepalive, and a margin."""
        return max(5.0, 3 * self.target.spec.timeouts.keepalive_s) + 2

    def lock(self, owner: str) -> None:
        """The session's agent holds the lock while this host's heartbeats reach it (decision 0810): a host that
        dies or loses its link frees the target within one lease (rolling back its unfinished trial first),
        whatever the SSH session notices; kill -9 of the agent frees it at once."""
        timeouts = self.target.spec.timeouts
        lease = max(5.0, 3 * timeouts.keepalive_s)
        if self._client is None:
            raise TargetError("internal: the agent is not installed")
        self._agent_ready()
        self.token, self._lock = self._client.lock(owner, lease, wait=self.lock_wait_s)

    def unlock(self, owner: str) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None
            self.token = None
            try:
                self._client.unlock()
            except TargetError:
                pass  # the agent or the link is gone: the device ended the lease itself

    def trial(self, release_id: str, owner: str, policy, on_event: Callable[[dict], None]) -> TrialOutcome:
        """The device-owned trial; the host waits longer than the device's own deadline."""
        lines: list[str] = []

        def on_line(line: str) -> None:
            lines.append(line)
            on_event(parse_event(line))

        argv = [*self._agent_command(), "store", "--root", self.root, *trial_arguments(release_id, self.token, owner, self.name, policy)]
        limit = policy.timeout_s + TRIAL_HOST_MARGIN_S
        result = self.connection.run(argv, on_stdout_line=on_line, timeout=limit, silence_s=limit)
        return _trial_answer(lines, result.stderr, result.exit_code, self.name)

    def _agent_command(self) -> list[str]:
        """The device's Python with the agent's copy of `sdk`, once the agent is on the device (the launched agent
        installs itself on first contact: a command that runs its copy waits for that)."""
        if self._agent is None:
            raise TargetError("internal: the agent is not installed")
        if self._client is not None:
            self._agent_ready()
        return ["env", f"PYTHONPATH={self._agent}", "PYTHONDONTWRITEBYTECODE=1", self.python, "-B", "-m", "sdk"]

    def prepare(self) -> dict:
        return self._store("prepare")

    def present(self, objects: dict[str, int]) -> set[str]:
        found = self._store("have", *(f"{sha}:{size}" for sha, size in objects.items()))["present"]
        return {entry.split(":")[0] for entry in found}

    def resume_points(self, objects: dict[str, int]) -> tuple[dict[str, int], int]:
        """The partial uploads this deploy resumes (object -> bytes already on the device), and the bytes freed
        by removing every other one: a partial upload of an object this release does not need (left by a cut
        deploy of another release), or longer than its object."""
        answer = self._store("partials", *(f"{sha}:{size}" for sha, size in objects.items()))
        return {sha: int(length) for sha, length in answer["kept"].items()}, int(answer["freed"])

    def upload(self, objects: dict[str, tuple[int, Path]], task: Task) -> int:
        """One stream into the session's agent, resuming after what a cut link left in `store/.upload-<sha>`;
        the device hashes each object as it writes it and publishes it (fsync, read-only, rename) only when
        the hash is the object's name (sdk/agent/serve.py)."""
        if not objects:
            return 0
        with self.connection.transfer("uploading the release") as tick:
            self._agent_ready()
            return self._client.receive(objects, task, tick)

    def assemble(self, manifest: ReleaseManifest, signature: str | None = None) -> None:
        remote = f"{self.root}/releases/.tmp-manifest-{manifest.release_id}.json"
        self._put(remote, manifest.to_json().encode(), "sending the manifest")
        if signature is None:
            self._assemble(remote)
            return
        self._put(f"{remote}.sig", signature.encode(), "sending the manifest's signature")
        self._assemble(remote, "--signature", f"{remote}.sig")

    def _assemble(self, *args: str) -> None:
        """`store assemble`; the device's refusal (an unsigned or tampered manifest) keeps its own message and hint."""
        self._agent_ready()
        answer = self._client.answer({"argv": ["assemble", *args]})
        if "ok" not in answer:
            message = answer.get("error") or "store assemble failed"
            raise ReleaseError(f"{self.name}: {message}", hint=answer.get("hint") or "see the target's message above")

    def _put(self, remote: str, data: bytes, what: str) -> None:
        """A small file written whole by the agent (a full disk named as such)."""
        try:
            self._agent_ready()
            self._client.request({"put": remote, "data": data.decode()}, what)
        except TargetError as exc:
            if "No space left" in exc.message or "Disk quota" in exc.message:
                raise disk_full(self.name, len(data), 0) from None
            raise

    def trust(self, request: dict) -> dict:
        """What the device trusts: a request of sdk/store/trust_admin.py (status, add, revoke), checked and applied there."""
        self._store("prepare")  # the store's folders exist
        remote = f"{self.root}/.tmp-trust-request-{os.getpid()}.json"
        self._put(remote, json.dumps(request).encode(), "sending the trust request")
        return self._store("trust", remote)

    def store_op(self, op: str, *args: str) -> dict:
        return self._store(op, *args, *(["--token", str(self.token)] if op in MUTATING_OPS else []))

    def probe(self) -> dict:
        """The device fingerprint in one round trip: asked of the session's agent, or (no agent yet) the probe's
        source sent to the device's `python3 -`."""
        import sdk

        if self._client is not None and self._client.alive():
            self._agent_ready()
            return self._client.request({"probe": True}, "probe")

        source = (Path(sdk.__file__).parent / "probe.py").read_bytes()
        result = self.connection.run([self.python, "-", self.root], stdin=source).check("probe")
        try:
            return json.loads(result.stdout)
        except ValueError:
            raise TargetError(f"{self.name}: the probe answered {result.stdout[:200]!r}") from None

    def env(self, release_id: str) -> str | None:
        return self._store("env", release_id)["python"]

    def run(
        self,
        release_id: str,
        run_name: str,
        frames: int | None,
        on_event: Callable[[dict], None],
        python: str | None = None,
        stress: str | None = None,
        live_view: int | None = None,
        evaluate: str | None = None,
    ) -> RunOutcome:
        release = f"{self.root}/releases/{release_id}"
        run_dir = f"{self.root}/runs/{run_name}"
        self._store("clear-run", run_name)
        arguments = run_arguments(release, run_dir, self.name, frames, stress, live_view, evaluate)
        argv = [*self._python_in(release, python), "-B", "-m", "sdk", *arguments]
        result = self.connection.run(argv, on_stdout_line=lambda line: on_event(parse_event(line)), timeout=self.target.spec.timeouts.deadline_s)
        return RunOutcome(result.exit_code, result.stderr)

    def _python_in(self, release: str, python: str | None) -> list[str]:
        """The device's Python, started inside the release folder. The folder is a positional argument
        of a fixed script: no user value is parsed by the shell."""
        return ["sh", "-c", 'cd "$1" && shift && exec "$@"', "sh", release, "env", "PYTHONDONTWRITEBYTECODE=1", python or self.python]

    def release_command(self, release_id: str, args: list[str], python: str | None = None) -> subprocess.CompletedProcess:
        release = f"{self.root}/releases/{release_id}"
        argv = [*self._python_in(release, python), "-B", "-m", "sdk", *args]
        result = self.connection.run(argv, timeout=self.target.spec.timeouts.deadline_s)
        return subprocess.CompletedProcess(argv, result.exit_code, result.stdout, result.stderr)

    def fetch_run(self, run_name: str, destination: Path) -> None:
        sftp = self.connection.sftp()
        run_dir = f"{self.root}/runs/{run_name}"
        destination.mkdir(parents=True, exist_ok=True)
        with self.connection.transfer("fetching the run's report") as tick:
            for entry in sftp.listdir_attr(run_dir):
                if entry.filename.startswith(".") or "/" in entry.filename:
                    continue
                partial = destination / f".{entry.filename}.partial"
                sftp.get(f"{run_dir}/{entry.filename}", str(partial), callback=lambda *_: tick())
                os.replace(partial, destination / entry.filename)
        self._store("clear-run", run_name)

    def clear_run(self, run_name: str) -> None:
        self._store("clear-run", run_name)

    def status(self) -> dict:
        return self._store("status")


_UNPACK = (
    "import io, os, shutil, sys, tarfile; staging, agent = sys.argv[1:3]; shutil.rmtree(staging, ignore_errors=True); "
    "os.makedirs(staging); tar = tarfile.open(fileobj={source}, mode='r|'); "
    "tar.extractall(staging, filter='data') if hasattr(tarfile, 'data_filter') else tar.extractall(staging); "
    "import compileall; [compileall.compile_dir(os.path.join(staging, 'sdk', d), maxlevels=0, quiet=2) "
    "for d in ('', 'store', 'agent', 'service')]; "
    "os.rename(staging, agent) if not os.path.isdir(agent) else shutil.rmtree(staging)"
)  # compiled once here: every later start of the agent (once a deploy) loads its bytecode instead of compiling
UNPACK_AGENT = _UNPACK.format(source="sys.stdin.buffer")  # the tar alone on stdin, up to its end
# The first contact's agent: unpacked, then served by the same Python from the same stdin (argv: staging, agent, root).
# The tar comes after a line with its length and is read whole: tarfile stops at the archive's end marker, and
# the record padding after it would otherwise be read as the first request.
INSTALL_AND_SERVE = (
    _UNPACK.format(source="io.BytesIO(sys.stdin.buffer.read(int(sys.stdin.buffer.readline())))")
    + "; sys.path.insert(0, agent); sys.argv = ['sdk', 'store', '--root', sys.argv[3], 'serve']; "
    "import runpy; runpy.run_module('sdk', run_name='__main__', alter_sys=True)"
)


# A command of the agent's copy without the agent's process: run where the copy is there, else one line and a code.
AGENT_MISSING, AGENT_MISSING_EXIT = "sdk: the device agent is not installed", 97
RUN_IF_AGENT = f'if [ -d "$1" ]; then shift; exec "$@"; fi; echo "{AGENT_MISSING}" >&2; exit {AGENT_MISSING_EXIT}'


def sized(payload: bytes) -> bytes:
    """A payload the device reads whole from a stream that goes on after it: its length, a newline, its bytes."""
    return b"%d\n" % len(payload) + payload


_AGENT_VERSIONS: dict[tuple, str] = {}


def agent_version(runtime_files: dict[str, Path]) -> str:
    """The hash of the agent's files, computed once per process (a fleet asks for it once per target)."""
    key = tuple((name, str(path), path.stat().st_mtime_ns, path.stat().st_size) for name, path in sorted(runtime_files.items()))
    if key not in _AGENT_VERSIONS:
        digest = hashlib.sha256()
        for name, path in sorted(runtime_files.items()):
            digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
        _AGENT_VERSIONS[key] = digest.hexdigest()[:16]
    return _AGENT_VERSIONS[key]


_AGENT_TARS: dict[str, bytes] = {}


def agent_tar(runtime_files: dict[str, Path]) -> bytes:
    """The agent's files as an uncompressed tar (the device unpacks it with its own Python), built once per process."""
    version = agent_version(runtime_files)
    if version not in _AGENT_TARS:
        _AGENT_TARS.clear()
        _AGENT_TARS[version] = tar_bytes(runtime_files)
    return _AGENT_TARS[version]


def tar_bytes(files: dict[str, Path | bytes]) -> bytes:
    """Files (a path on the host, or the bytes themselves) as one uncompressed tar that the device's own Python
    unpacks from a channel: the agent (here) and the selftest's scratch folder (tools/connect/device_scratch.py)."""
    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, content in sorted(files.items()):
            if isinstance(content, Path):
                tar.add(str(content), arcname=name, recursive=False)
            else:
                info = tarfile.TarInfo(name)
                info.size, info.mode = len(content), 0o644
                tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()
