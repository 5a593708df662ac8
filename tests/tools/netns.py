"""Test hosts with their own addresses: Linux network namespaces joined to this one by veth pairs."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@dataclass
class NamespaceHost:
    """Namespace `name` reachable at 10.231.<index>.2 from this namespace (10.231.<index>.1)."""

    index: int

    def __post_init__(self) -> None:
        self.name = f"sdk{os.getpid() % 10000}n{self.index}"
        self.host_link = f"sdkh{os.getpid() % 10000}x{self.index}"
        self.address = f"10.231.{self.index}.2"

    def __enter__(self) -> NamespaceHost:
        _ip("netns", "add", self.name)
        try:
            _ip("link", "add", self.host_link, "type", "veth", "peer", "name", "eth0", "netns", self.name)
            _ip("addr", "add", f"10.231.{self.index}.1/30", "dev", self.host_link)
            _ip("link", "set", self.host_link, "up")
            _ip("-n", self.name, "addr", "add", f"{self.address}/30", "dev", "eth0")
            _ip("-n", self.name, "link", "set", "eth0", "up")
            _ip("-n", self.name, "link", "set", "lo", "up")
        except BaseException:
            self.__exit__()
            raise
        return self

    def link(self, up: bool) -> None:
        """Take the host's cable out (down) or put it back (up): packets vanish, nothing is reset."""
        _ip("link", "set", self.host_link, "up" if up else "down")

    def __exit__(self, *exc: object) -> None:
        subprocess.run(["ip", "link", "del", self.host_link], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)


def namespaces_available() -> bool:
    if os.geteuid() != 0:
        return False
    probe = NamespaceHost(250)
    try:
        with probe:
            return True
    except (subprocess.CalledProcessError, FileNotFoundError):
        return False
