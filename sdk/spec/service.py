"""The `service` section: the runtime as a long-running service on the vehicle (`python -m sdk serve`)."""


from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from sdk.spec.bounds import Flag, Frozen, Int, Real, bounds_error


class DegradedMode(Frozen):
    """When the runtime declares itself DEGRADED, what it does then, and when it is NOMINAL again."""

    after_misses: Int(1, 100_000, "consecutive deadline misses that make the runtime DEGRADED") = 5
    recover_after: Int(1, 100_000, "consecutive frames within the deadline that make it NOMINAL again") = 30
    process_every: Int(1, 100, "while DEGRADED: one frame in N is processed, the rest shed and counted") = 2


class Retention(Frozen):
    """How much of the vehicle's disk a service may take: finished output files and service.log.

    Each output (sink) keeps at most `max_files` finished files and `max_total_mb` with its current
    file, the oldest deleted first; below `min_free_mb` free on the output disk the video sink stops
    writing (frames counted as not written) and below `detections_min_free_mb` the detections sink
    stops too: the video first, the detections last. Writing resumes when space returns."""

    max_files: Int(1, 100_000, "finished files kept per output; the oldest are deleted first") = 1000
    max_total_mb: Real("MiB one output's files may take, its current file included; the oldest go first", gt=0, le=1_048_576) = 1024
    log_max_mb: Real("MiB of service.log before it is rotated", ge=0.01, le=4096) = 16
    log_keep: Int(0, 100, "rotated service.log files kept (service.log.1 is the newest)") = 4
    min_free_mb: Real("free MiB on the output disk below which the video sink stops writing", ge=0, le=1_048_576) = 1024
    detections_min_free_mb: Real("free MiB below which the detections sink stops too (it stops last)", ge=0, le=1_048_576) = 64

    @model_validator(mode="after")
    def _detections_stop_last(self) -> "Retention":
        if self.detections_min_free_mb > self.min_free_mb:
            raise bounds_error(
                f"detections_min_free_mb {self.detections_min_free_mb:g} is above min_free_mb {self.min_free_mb:g}; "
                "allowed: at most min_free_mb (the detections sink stops last)",
                path=("service", "retention", "detections_min_free_mb"),
            )
        return self


class Service(Frozen):
    """The runtime as a long-running service on the vehicle (`python -m sdk serve`, systemd or the supervisor)."""

    watchdog_s: Real("no frame for this long: killed and restarted", ge=0.5, le=600) = 5.0
    status_interval_s: Real("seconds between status files", ge=0.05, le=60) = 1.0
    stop_timeout_s: Real("seconds a stop may take before the process is killed", ge=0.5, le=600) = 10.0
    max_restarts: Int(0, 1000, "restarts within restart_window_s, then the supervisor gives up") = 5
    restart_window_s: Real("the window max_restarts counts in, seconds", gt=0, le=86_400) = 60.0
    restart_backoff_s: Real("seconds before a restart; doubles per restart within the window", ge=0, le=600) = 1.0
    degraded: DegradedMode = DegradedMode()
    retention: Retention = Retention()
    heartbeat_udp: Annotated[str, Field(pattern=r"^[A-Za-z0-9.\-]{1,253}:[0-9]{1,5}$")] | None = None  # host:port
    cpu_affinity: Annotated[tuple[Int(0, 1023, "a CPU number"), ...], Field(min_length=1, max_length=1024)] | None = None
    realtime_priority: Int(1, 99, "SCHED_FIFO priority, where permitted") | None = None
    lock_memory: Flag = False  # mlockall: no page faults in the frame loop, where permitted
    # The systemd unit (sdk/service/unit.py): who it runs as and what it may take.
    user: Annotated[str, Field(pattern=r"^[a-z_][a-z0-9_-]{0,31}$")] = "perception"  # a dedicated unprivileged user
    root_reason: Annotated[str, Field(min_length=10, max_length=200, pattern=r"^[^\n\r\x00]+$")] | None = None  # needed for user: root
    memory_max_mb: Real("MiB the service may take (systemd MemoryMax=); beyond it the kernel ends it and it restarts", ge=64, le=1_048_576) = 4096
    oom_score_adjust: Int(-1000, 1000, "the service's OOMScoreAdjust= (negative: killed after other programs)") = -500
    # A start runs only a release whose bytes match its manifest (sdk/store/startable.py). When the committed release no
    # longer does (a damaged or edited file): `previous` starts the newest earlier committed release that does, and
    # says so; `refuse` starts nothing until the release is deployed again.
    if_damaged: Literal["previous", "refuse"] = "previous"
    on_failure: Annotated[str, Field(max_length=200, pattern=r"^(?:[A-Za-z0-9:_.@-]|%[nNip])+\.(service|target)$")] | None = (
        None  # started on failure (%n: this unit)
    )

    @field_validator("heartbeat_udp")
    @classmethod
    def _port_in_range(cls, address: str | None) -> str | None:
        if address is not None and not 1 <= int(address.rpartition(":")[2]) <= 65535:
            raise bounds_error(f"the port of {address!r} is out of range; allowed: host:port, the port from 1 to 65535")
        return address

    @model_validator(mode="after")
    def _root_has_a_reason(self) -> "Service":
        if self.user == "root" and self.root_reason is None:
            raise bounds_error(
                "user root needs a root_reason; allowed: a dedicated unprivileged user (the default, perception), "
                "or root with root_reason saying why (written into the unit)",
                path=("service", "user"),
            )
        if self.user != "root" and self.root_reason is not None:
            raise bounds_error(
                f"root_reason is set but user is {self.user!r}; allowed: root_reason only with user: root", path=("service", "root_reason")
            )
        return self


__all__ = ["DegradedMode", "Retention", "Service"]


class Health(Frozen):
    """The health check of a release on trial, run by the device before the release is committed."""

    min_frames: Int(1, 10_000, "frames that must go through every stage to the sinks for the release to be healthy") = 5
    timeout_s: Real("device-side deadline of the health check, model load included, seconds", ge=1, le=3600) = 120.0
