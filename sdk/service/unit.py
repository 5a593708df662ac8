"""The systemd unit of a pipeline's service: Type=notify, watchdog, restart limits, resource limits.

Rendered from the pipeline's `service` section so the unit and the project's own supervisor
apply the same policy. Installing it needs root once (`systemctl link` + `enable`); the deploy
writes it into the release so the unit always matches the release it runs.
"""

from __future__ import annotations

from sdk.spec.schema import Service


def _quote(value: str) -> str:
    # systemd splits ExecStart like a shell but has its own quoting; double quotes with escaped
    # backslashes and quotes are understood by both. `%` is a specifier: doubled.
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%") + '"'


def render_unit(pipeline_name: str, service: Service, *, root: str, python: str, sdk_path: str, user: str | None = None) -> str:
    """`sdk_path`: the folder holding the store's `sdk` package (the deploy's agent on a device). ExecStart
    recovers the store (rolling back any trial that can no longer finish) and then becomes the committed
    release's own runtime: the unit never starts a release that has not passed its health check."""
    if any(c in root + python + sdk_path for c in "\n\r\0"):
        raise ValueError("unit paths must be single lines")
    status_dir = f"{root}/service"
    exec_start = " ".join(_quote(part) for part in [python, "-B", "-m", "sdk", "serve", "--root", root, "--status-dir", status_dir])
    service_lines = [
        "Type=notify",
        "NotifyAccess=main",
        f"ExecStart={exec_start}",
        f"Environment={_quote('PYTHONPATH=' + sdk_path)}",
        f"WorkingDirectory={root.replace('%', '%%')}",  # a path, taken whole: no quotes
        "Restart=on-failure",
        f"RestartSec={max(service.restart_backoff_s, 0.1):g}",
        f"WatchdogSec={service.watchdog_s:g}",
        f"TimeoutStopSec={service.stop_timeout_s:g}",
        "TimeoutStartSec=120",
        "KillSignal=SIGTERM",
        "Environment=PYTHONDONTWRITEBYTECODE=1",
    ]
    if service.lock_memory:
        service_lines.append("LimitMEMLOCK=infinity")
    if service.realtime_priority:
        service_lines.append("LimitRTPRIO=99")
    if user:
        service_lines.append(f"User={user}")
    unit = [
        "[Unit]",
        f"Description=perception pipeline {pipeline_name}",
        "After=network.target",
        f"StartLimitIntervalSec={service.restart_window_s:g}",
        f"StartLimitBurst={service.max_restarts + 1}",
        "",
        "[Service]",
        *service_lines,
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]
    return "\n".join(unit) + "\n"


def unit_name(pipeline_name: str) -> str:
    return f"perception-{pipeline_name}.service"
