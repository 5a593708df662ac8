"""known_hosts read as OpenSSH reads it: negations exclude, @revoked keys are refused, hashed names match; and over a
real OpenSSH server, a revoked host key or a line that excludes the host never lets a connection through."""

from __future__ import annotations

import base64
import hashlib
import hmac
import subprocess

import pytest

from sdk.errors import TargetError
from tools.connect.known_hosts import hosts_match, read_pins
from tools.connect.remote_ops import probe
from tools.targets import resolve_target


def hashed(name: str, salt: bytes = b"0123456789abcdefghij") -> str:
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(hmac.new(salt, name.encode(), hashlib.sha1).digest()).decode()}"


@pytest.mark.parametrize(
    ("patterns", "name", "expected"),
    [
        ("orin-01", "orin-01", True),
        ("orin-*,!orin-02", "orin-01", True),
        ("orin-*,!orin-02", "orin-02", False),  # a negation that matches excludes the line
        ("!orin-01,orin-01", "orin-01", False),  # whatever the order
        ("!orin-01", "orin-01", False),
        ("!orin-02", "orin-01", False),  # a negation alone includes nothing
        ("orin-0?", "orin-01", True),
        ("[127.0.0.1]:2222", "[127.0.0.1]:2222", True),
        ("[127.0.0.1]:2222", "127.0.0.1", False),
        (hashed("orin-01"), "orin-01", True),
        (hashed("orin-01"), "orin-02", False),
    ],
)
def test_host_patterns_match_as_openssh_matches_them(patterns, name, expected):
    assert hosts_match(patterns, name) is expected


def server_key(sim_server) -> str:
    return " ".join(sim_server.host_key.with_suffix(".pub").read_text().split()[:2])


def test_revoked_and_certificate_authority_lines_are_read_not_a_traceback(sim_server, tmp_path):
    name = f"[{sim_server.address}]:{sim_server.port}"
    path = tmp_path / "known_hosts"
    path.write_text(f"# pinned\n@cert-authority * {server_key(sim_server)}\n@revoked * {server_key(sim_server)}\n{name} {server_key(sim_server)}\n")
    pins = read_pins(path, name, "t.yaml")
    assert len(pins.revoked) == 1 and list(pins.keys) == [server_key(sim_server).split()[0]]
    path.write_text("@trusted * ssh-ed25519 AAAA\n")
    with pytest.raises(TargetError, match=r"line 1: unknown marker '@trusted'"):
        read_pins(path, name, "t.yaml")
    path.write_text(f"{name} ssh-ed25519 not-base64!\n")
    with pytest.raises(TargetError, match="line 1: its ssh-ed25519 key cannot be read"):
        read_pins(path, name, "t.yaml")


@pytest.mark.parametrize("case", ["revoked", "negated"])
def test_over_ssh_a_revoked_key_or_an_excluding_line_refuses_the_connection(ssh_target, tmp_path, case):
    name = f"[{ssh_target.server.address}]:{ssh_target.server.port}"
    known_hosts = tmp_path / "pinned_known_hosts"
    key = server_key(ssh_target.server)
    if case == "revoked":
        known_hosts.write_text(f"{name} {key}\n@revoked * {key}\n")
        expected = "HOST KEY REVOKED"
    else:
        known_hosts.write_text(f"*,!{name} {key}\n")  # every host but this one
        expected = "unknown host: no key for it"
    ssh_target.write(host_key={"known_hosts": str(known_hosts)})
    with pytest.raises(TargetError, match=expected):
        probe(resolve_target("sim"))
    subprocess.run(["true"], check=True)


def test_a_bad_line_about_another_host_does_not_fail_this_target(tmp_path):
    """A shared known_hosts file: one unreadable line about another vehicle is skipped (and named), as OpenSSH skips it;
    a bad line about this target is still one error naming the line."""
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
    path = tmp_path / "known_hosts"
    path.write_text(f"orin-02 ssh-ed25519\n@trusted orin-03 {key}\norin-01 {key}\n")
    pins = read_pins(path, "orin-01", "t.yaml")
    assert list(pins.keys) == ["ssh-ed25519"]
    assert [s.split(": ", 1)[0] for s in pins.skipped] == [f"{path} line 1", f"{path} line 2"]
    for bad, why in ((f"orin-01 {key.split()[0]}", "not a known_hosts line"), (f"@trusted orin-* {key}", "unknown marker '@trusted'")):
        path.write_text(f"{bad}\norin-01 {key}\n")
        with pytest.raises(TargetError, match=f"t.yaml: {path} line 1: {why}"):
            read_pins(path, "orin-01", "t.yaml")
