"""The runtime as a service: health and degraded mode, systemd notifications, supervisor, unit file."""
