"""`sdk targets check NAME`: connect, probe, and say what would block a deploy, one line per check.

Read-only: nothing is created or sent to the device except the probe's source on the SSH channel.
First what this host sees without the network (the key file, the host-key pin, the signing key:
tools/connect/local_checks.py), then a connection's order: reachable, host key, login, then what the probe
says (Python, remote root, free disk, runtime modules, TensorRT/CUDA). A failed connection step ends the
checks (the later ones cannot run); every probe check runs.

A labgrid place (`labgrid: {place:}` in the target file, or `labgrid:PLACE`) is acquired first, checked through
the SSH address of its NetworkService, and released afterwards, also on an error or Ctrl-C (decision 0812).
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass, field

from sdk.errors import TargetError
from sdk.probe import RUNTIME_MODULES
from tools.connect.local_checks import local_findings
from tools.targets import LocalTarget, RemoteTarget, Target

OK, NOTE, WARN, BLOCKED = "ok", "note", "warn", "blocked"
MIN_PYTHON = (3, 10)  # the runtime's requires-python
MIN_FREE_BYTES = 512 * 1024**2  # below this a release with its wheels and environment may not fit: blocked
LOW_FREE_BYTES = 2 * 1024**3  # below this a few releases will not fit (the store keeps the previous ones): warned
JETSON_PLATFORMS = ("jetson-agx-orin", "jetson-orin-nx", "jetson-orin-nano", "jetson-thor", "drive-orin")

# Run with the device's Python: the nearest existing folder of the remote root, whether it is a writable folder, its free bytes.
ROOT_SCRIPT = """\
import json, os, sys
path = sys.argv[1]
while not os.path.lexists(path):
    path = os.path.dirname(path)
folder = os.path.isdir(path)
stat = os.statvfs(path if folder else os.path.dirname(path))
print(json.dumps({"existing": path, "folder": folder, "writable": folder and os.access(path, os.W_OK | os.X_OK),
                  "free": stat.f_bavail * stat.f_frsize}))
"""


@dataclass(frozen=True)
class Finding:
    status: str  # ok, note, warn, blocked
    what: str
    detail: str
    hint: str | None = None


@dataclass
class CheckResult:
    target: str
    where: str
    findings: list[Finding] = field(default_factory=list)

    @property
    def blocking(self) -> list[Finding]:
        return [f for f in self.findings if f.status == BLOCKED]

    def add(self, status: str, what: str, detail: str, hint: str | None = None) -> None:
        self.findings.append(Finding(status, what, detail, hint))


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def check_target(target: Target) -> CheckResult:
    if isinstance(target, LocalTarget):
        from sdk.probe import fingerprint

        result = CheckResult(target.name, str(target.root))
        root = _root_facts_here(str(target.root))
        check_facts(result, "linux-generic", fingerprint(str(target.root)), root, str(target.root))
        return result
    return _check_remote(target)


def _root_facts_here(root: str) -> dict:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", ROOT_SCRIPT, root], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def _check_place(target: RemoteTarget) -> CheckResult:
    """Acquire the place, check the device behind its NetworkService, release the place whatever happens."""
    from tools.connect.labgrid_place import LabgridPlace, coordinator_of, reached_target

    settings = target.spec.labgrid
    coordinator = coordinator_of(settings)
    result = CheckResult(target.name, f"labgrid place {settings.place} at {coordinator}")
    place = LabgridPlace(coordinator, settings.place, target.name)
    try:
        try:
            place.acquire()
            reached = reached_target(target, place.network_service())
        except TargetError as exc:
            result.add(BLOCKED, "labgrid place", exc.message, exc.hint)
            return result
        spec = reached.spec
        held = "acquired by you already (left acquired)" if place.borrowed else "acquired for this check (released after it)"
        result.add(OK, "labgrid place", f"{settings.place} at {coordinator}: {held}; its NetworkService is {spec.user}@{spec.host}:{spec.port}")
        checked = _check_remote(reached, reached=True)
        result.where = f"{checked.where} through labgrid place {settings.place}"
        result.findings.extend(checked.findings)
        return result
    finally:
        place.release()


def _check_remote(target: RemoteTarget, *, reached: bool = False) -> CheckResult:
    from tools.connect.sessions import SshSession
    from tools.connect.ssh import connect, fingerprint_of, load_private_key

    spec = target.spec
    if spec.labgrid is not None and not reached:
        return _check_place(target)
    result = CheckResult(target.name, f"{spec.user}@{spec.host}:{spec.port}" + (f" via {spec.jump}" if spec.jump else ""))
    local = local_findings(target)  # what this host sees without the network: reported even when the device does not answer
    for finding in local:
        result.add(*finding)
    if not spec.jump:  # through a jump host, reachability is the SSH connection's own first step
        try:
            socket.create_connection((spec.host, spec.port), timeout=spec.timeouts.connect_s).close()
        except OSError as exc:
            result.add(
                BLOCKED,
                "reachable",
                f"{spec.host}:{spec.port} does not answer: {exc.strerror or exc}",
                "is the device on and on this network, and its SSH server running? (ping it; on the device: systemctl status ssh)",
            )
            return result
        result.add(OK, "reachable", f"{spec.host}:{spec.port} answers")
    if any(status == BLOCKED for status, *_ in local):
        return result  # connecting needs the key and the pin
    try:
        load_private_key(target)
    except TargetError as exc:
        result.add(BLOCKED, "key file", exc.message, exc.hint)
        return result
    connection = connect(target)
    with SshSession(target, connection) as session:
        try:
            transport = connection.transport()
        except TargetError as exc:
            what = "host key" if ("HOST KEY" in exc.message or "unknown host" in exc.message) else "login"
            result.add(BLOCKED, what, exc.message, exc.hint)
            return result
        key = transport.get_remote_server_key()
        result.add(OK, "host key", f"{key.get_name()} {fingerprint_of(key)} matches the pin")
        result.add(OK, "login", f"{spec.user} with {target.host_path(spec.key_file)}")
        try:
            facts = session.probe()
            answer = connection.run([spec.python, "-c", ROOT_SCRIPT, target.root]).check("checking the remote root")
            root = json.loads(answer.stdout)
        except (TargetError, ValueError) as exc:
            message = exc.message if isinstance(exc, TargetError) else f"unexpected answer: {exc}"
            result.add(
                BLOCKED,
                "python",
                f"{spec.python} on the device cannot run the probe: {message}",
                "set `python:` in the target file to the device's Python 3",
            )
            return result
    check_facts(result, spec.platform, facts, root, target.root)
    return result


def check_facts(result: CheckResult, platform: str, facts: dict, root: dict, remote_root: str) -> None:
    """What the probe's facts (and the remote root's) mean for a deploy; no I/O but the host's wheel cache."""
    version = tuple(int(part) for part in facts["python"].split(".")[:2])
    if version < MIN_PYTHON:
        result.add(
            BLOCKED,
            "python",
            f"{facts['python']} at {facts['python_executable']}; the runtime needs {'.'.join(map(str, MIN_PYTHON))} or newer",
            "install a newer Python on the device (JetPack 6 has 3.10) and name it in the target file's `python:`",
        )
    else:
        result.add(OK, "python", f"{facts['python']} at {facts['python_executable']}")
    existing = root["existing"]
    if not root["folder"]:
        result.add(BLOCKED, "remote root", f"{remote_root}: {existing} is a file, not a folder", "choose another remote_root in the target file")
    elif not root["writable"]:
        result.add(
            BLOCKED,
            "remote root",
            f"{remote_root}: {existing} is not writable by the login",
            f"create it for the user on the device (sudo mkdir -p {remote_root} && sudo chown $USER {remote_root}) or choose a folder in its home",
        )
    else:
        state = "exists" if existing.rstrip("/") == remote_root.rstrip("/") else f"created on the first deploy, in {existing}"
        result.add(OK, "remote root", f"{remote_root} ({state}; writable)")
    free = root["free"]
    if free < MIN_FREE_BYTES:
        result.add(
            BLOCKED,
            "free disk",
            f"{_size(free)} free at {existing}; a deploy needs at least {_size(MIN_FREE_BYTES)}",
            "free space on the device (old logs, `sdk rollback` keeps one previous release)",
        )
    elif free < LOW_FREE_BYTES:
        result.add(WARN, "free disk", f"{_size(free)} free at {existing}: enough for a release or two", "a release with wheels takes ~200 MB")
    else:
        result.add(OK, "free disk", f"{_size(free)} free at {existing}")
    _modules(result, facts)
    _accelerators(result, platform, facts)


def _modules(result: CheckResult, facts: dict) -> None:
    from sdk.errors import ReleaseError
    from tools.release.wheels import plan_wheels, wheels_folder
    from tools.state import cache_dir

    versions = facts.get("module_versions") or {}
    try:
        plan = plan_wheels(facts)
    except ReleaseError as error:
        result.add(WARN, "runtime modules", error.message, error.hint)
        return
    has = ", ".join(f"{m} {versions[m]}" if versions.get(m) else m for m in RUNTIME_MODULES if m not in (facts.get("missing_modules") or []))
    if not plan.requirements:
        result.add(OK, "runtime modules", f"the device's Python has {has or 'none of them'}")
        return
    cached = (wheels_folder(plan.requirements, facts["arch"], facts["python_abi"], cache_dir(), plan.constraints) / "COMPLETE").is_file()
    where = "cached on this host" if cached else "downloaded on this host by the deploy (needs PyPI or a pip index here, not on the device)"
    kept = f"; it keeps its own {has}" if has else ""
    shipped = f"{facts['arch']} {facts['python_abi']} of {', '.join(plan.requirements)}"
    result.add(NOTE, "runtime modules", f"the deploy ships wheels for {shipped}, {where}{kept}")


def _accelerators(result: CheckResult, platform: str, facts: dict) -> None:
    tensorrt, cuda, soc = facts.get("tensorrt"), facts.get("cuda"), facts.get("soc")
    found = f"TensorRT {tensorrt or 'none'}, CUDA driver {cuda or 'none'}" + (
        f", compute capability {facts['compute_capability']}" if facts.get("compute_capability") else ""
    )
    if platform in JETSON_PLATFORMS:
        if facts.get("arch") != "aarch64":
            result.add(WARN, "platform", f"the target file says {platform}, the device is {facts.get('arch')}", "fix `platform:` in the target file")
        if tensorrt and cuda:
            result.add(OK, "TensorRT/CUDA", found)
        else:
            result.add(
                WARN,
                "TensorRT/CUDA",
                f"{found}: pipelines run on ONNX Runtime (CPU); `model.backend: tensorrt` is refused",
                "install JetPack's TensorRT and CUDA on the device (sudo apt install nvidia-jetpack)",
            )
        return
    if soc:
        result.add(
            WARN,
            "platform",
            f"the device is a Tegra ({soc}) but the target file says {platform}",
            "set `platform:` (e.g. jetson-agx-orin) for DLA and TensorRT plans",
        )
    result.add(NOTE, "TensorRT/CUDA", found + ("" if tensorrt and cuda else ": pipelines run on ONNX Runtime (CPU)"))


__all__ = ["CheckResult", "Finding", "check_facts", "check_target"]
