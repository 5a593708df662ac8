"""The systemd unit of a pipeline's service: Type=notify, watchdog, restart limits, and locked down.

Rendered from the pipeline's `service` section so the unit and the project's own supervisor apply the
same policy. The unit runs as a dedicated unprivileged user (`service.user`, default `perception`;
root only with `service.root_reason`, written into the unit) in the store owner's group, sees the
file system read-only but for its status folder (`<root>/service`: status, locks, outputs), reaches
only the device nodes its source and backend open (sdk/service/devices.py), keeps no capability but
CAP_SYS_NICE (real-time priority asked) and CAP_IPC_LOCK (locked memory asked), and is held to
`memory_max_mb`. `systemd-analyze security` rates it at most 3.0 (tests/sdk/service/test_unit.py).

It starts the committed release of ITS pipeline only (`serve --pipeline NAME`): when the store's
committed release belongs to another pipeline, the unit exits with EXIT_OTHER_PIPELINE and systemd does
not restart it (decision 0110). Installing the unit and creating the user is a one-time root step:
`sudo perception-sdk-root service --root ROOT install` (sdk/service/install.py, decisions 0112 and 0961).
"""

from __future__ import annotations

from sdk.service.devices import ARGUS_SOCKET, pipeline_access

EXIT_OTHER_PIPELINE = 78  # EX_CONFIG: the committed release is another pipeline's; systemd must not restart
EXIT_RELEASE_CHANGED = 79  # the store's committed release changed under a running runtime: restarted onto it
HOME_PREFIXES = ("/home/", "/root/", "/run/user/")


def _quote(value: str) -> str:
    # systemd splits ExecStart like a shell but has its own quoting; double quotes with escaped
    # backslashes and quotes are understood by both. `%` is a specifier: doubled.
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%") + '"'


def _path(value: str) -> str:
    """A path in a path-list setting (ReadWritePaths=...): whitespace-separated, `%` a specifier."""
    if any(c.isspace() for c in value):
        return _quote(value)
    return value.replace("%", "%%")


def _sandbox(spec, root: str, status_dir: str, user: str) -> list[str]:
    service = spec.service
    access = pipeline_access(spec)
    lines = [
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        f"ReadWritePaths={_path(status_dir)}",  # status.json, the locks, output/: the runtime writes nothing else
        "PrivateTmp=yes",
        "PrivateMounts=yes",
        "ProtectKernelTunables=yes",
        "ProtectKernelModules=yes",
        "ProtectKernelLogs=yes",
        "ProtectControlGroups=yes",
        "ProtectClock=yes",
        "ProtectHostname=yes",
        "ProtectProc=invisible",
        "ProcSubset=pid",
        "RestrictNamespaces=yes",
        "RestrictSUIDSGID=yes",
        "LockPersonality=yes",
        "RemoveIPC=yes",
        "KeyringMode=private",
        "SystemCallArchitectures=native",
        "SystemCallFilter=@system-service",
        "SystemCallFilter=~@privileged @mount @debug @cpu-emulation @obsolete @raw-io @reboot @swap @clock @module",
        "SystemCallErrorNumber=EPERM",
        "UMask=0007",  # files for the user and the store owner's group (the SSH login reads status), none for others
        f"RestrictRealtime={'no' if service.realtime_priority else 'yes'}",
    ]
    if any(root.startswith(prefix) for prefix in HOME_PREFIXES):  # a store in a home: only it is shown, read-only
        lines += ["ProtectHome=tmpfs", f"BindReadOnlyPaths={_path(root)}", f"BindPaths={_path(status_dir)}"]
    else:
        lines.append("ProtectHome=yes")
    if access.devices:  # PrivateDevices=yes would hide the camera and GPU nodes: an allow-list instead
        lines += ["PrivateDevices=no", "DevicePolicy=closed", *(f"DeviceAllow={_path(node)} rw" for node in access.devices)]
    else:
        lines.append("PrivateDevices=yes")
    if access.argus:
        lines.append(f"BindPaths=-{ARGUS_SOCKET}")  # the CSI camera daemon's socket, into the private /tmp
    if access.network:
        lines += ["RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6"]
    else:
        lines += ["RestrictAddressFamilies=AF_UNIX", "PrivateNetwork=yes", "IPAddressDeny=any"]
    caps = (["CAP_SYS_NICE"] if service.realtime_priority else []) + (["CAP_IPC_LOCK"] if service.lock_memory else [])
    lines.append(f"CapabilityBoundingSet={' '.join(caps)}")
    if caps and user != "root":
        lines.append(f"AmbientCapabilities={' '.join(caps)}")
    if user != "root":
        lines.append("PrivateUsers=no")  # the caps above and the device groups must stay those of the host
    lines.append("MemoryDenyWriteExecute=" + ("no" if access.devices else "yes"))  # CUDA / GStreamer (orc) may map code
    return lines


MAX_BACKOFF_S = 30.0  # the supervisor's cap on its doubling restart delay (sdk/service/supervisor.py)
EXPONENTIAL_RESTART = 254  # the systemd version that has RestartSteps= and RestartMaxDelaySec=


def systemd_version() -> int | None:
    """This device's systemd (`systemctl --version`: "systemd 252 (...)"), or None where there is none."""
    import subprocess

    try:
        first = subprocess.run(["systemctl", "--version"], capture_output=True, text=True, timeout=10).stdout.split()
        return int(first[1]) if first[:1] == ["systemd"] else None
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None


def restart_backoff(service, version: int | None) -> list[str]:
    """The supervisor's policy as systemd says it: a restart delay that doubles from restart_backoff_s up to 30 s.
    systemd 254 and later grow RestartSec= to RestartMaxDelaySec= over RestartSteps= restarts; earlier ones know only
    the constant RestartSec= (decision 0034)."""
    import math

    first = max(service.restart_backoff_s, 0.1)
    lines = [f"RestartSec={first:g}"]
    if version is not None and version >= EXPONENTIAL_RESTART and first < MAX_BACKOFF_S:
        lines += [f"RestartSteps={math.ceil(math.log2(MAX_BACKOFF_S / first))}", f"RestartMaxDelaySec={MAX_BACKOFF_S:g}"]
    return lines


def render_unit(
    spec, *, root: str, python: str, sdk_path: str, group: str | None = None, user: str | None = None, systemd: int | None = None
) -> str:
    """`spec`: the committed release's PipelineSpec. `sdk_path`: the folder holding the store's `sdk` package (the
    deploy's agent on a device). `group`: the store owner's group (the service shares its status folder with
    the SSH login). `user` overrides `service.user`. ExecStart becomes the committed release's own runtime,
    for this pipeline only: the unit never starts a release that has not passed its health check."""
    service = spec.service
    user = user or service.user
    if user == "root" and service.root_reason is None:
        raise ValueError("a unit runs as root only with the pipeline's service.root_reason")
    if any(c in root + python + sdk_path + (group or "") for c in "\n\r\0"):
        raise ValueError("unit paths must be single lines")
    status_dir = f"{root}/service"
    command = [python, "-B", "-m", "sdk", "serve", "--root", root, "--pipeline", spec.name, "--status-dir", status_dir]
    service_lines = [
        "Type=notify",
        "NotifyAccess=main",
        f"ExecStart={' '.join(_quote(part) for part in command)}",
        f"Environment={_quote('PYTHONPATH=' + sdk_path)}",
        f"WorkingDirectory={root.replace('%', '%%')}",  # a path, taken whole: no quotes
        f"User={user}",
        *([f"Group={group}"] if group else []),
        "Restart=on-failure",
        f"RestartPreventExitStatus={EXIT_OTHER_PIPELINE}",
        *restart_backoff(service, systemd),
        f"WatchdogSec={service.watchdog_s:g}",
        f"TimeoutStopSec={service.stop_timeout_s:g}",
        "TimeoutStartSec=120",
        "KillSignal=SIGTERM",
        "Environment=PYTHONDONTWRITEBYTECODE=1",
        f"MemoryMax={int(service.memory_max_mb)}M",
        f"OOMScoreAdjust={service.oom_score_adjust}",
    ]
    if service.lock_memory:
        service_lines.append("LimitMEMLOCK=infinity")
    if service.realtime_priority:
        service_lines.append(f"LimitRTPRIO={service.realtime_priority}")
    unit = [
        "[Unit]",
        f"Description=perception pipeline {spec.name}",
        "After=network.target",
        f"StartLimitIntervalSec={service.restart_window_s:g}",
        f"StartLimitBurst={service.max_restarts + 1}",
        *([f"OnFailure={service.on_failure}"] if service.on_failure else []),
        "",
        "[Service]",
        *([f"# Runs as root: {service.root_reason}"] if user == "root" else []),
        *service_lines,
        *_sandbox(spec, root, status_dir, user),
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]
    return "\n".join(unit) + "\n"


def unit_name(pipeline_name: str) -> str:
    return f"perception-{pipeline_name}.service"


__all__ = ["EXIT_OTHER_PIPELINE", "render_unit", "unit_name"]
