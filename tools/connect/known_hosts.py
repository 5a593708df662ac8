"""A target's pinned host keys from its known_hosts file, read as OpenSSH reads it (sshd(8), SSH_KNOWN_HOSTS FILE FORMAT).

paramiko's own reader takes a line whose host patterns include a negation (`!host`) as a match, where OpenSSH
takes it as "not this host", and ends in a traceback on a `@revoked` line. This one reads each line as OpenSSH
does: host patterns separated by commas, with `*` and `?` wildcards, `[host]:port`, hashed names (`|1|salt|hash`),
and negations that exclude a host even when another pattern includes it; `@revoked` keys are refused for the hosts
they name; `@cert-authority` lines are not used (the SDK pins keys, not certificate authorities). A line it cannot
read is one error naming the file and the line when it is about this host (or names no host); a line about another
host that cannot be read is skipped, as OpenSSH skips it, and named in `Pins.skipped`: one bad line of a shared file
never fails every target.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from dataclasses import dataclass, field
from pathlib import Path

from sdk.errors import TargetError


@dataclass
class Pins:
    keys: dict = field(default_factory=dict)  # key type -> paramiko key
    revoked: list = field(default_factory=list)  # paramiko keys
    skipped: list = field(default_factory=list)  # "<file> line N: why": unreadable lines about other hosts


def _pattern_matches(pattern: str, name: str) -> bool:
    if pattern.startswith("|1|"):
        try:
            _, _, salt, digest = pattern.split("|")
            expected = hmac.new(base64.b64decode(salt), name.encode(), hashlib.sha1).digest()
            return hmac.compare_digest(expected, base64.b64decode(digest))
        except (ValueError, binascii.Error):
            return False
    wildcards = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)  # OpenSSH's: * and ? only
    return re.fullmatch(wildcards, name) is not None


def hosts_match(patterns: str, name: str) -> bool:
    """OpenSSH's rule: a negated pattern that matches excludes the line, whatever else matches."""
    matched = False
    for pattern in patterns.split(","):
        if pattern.startswith("!"):
            if _pattern_matches(pattern[1:], name):
                return False
        elif _pattern_matches(pattern, name):
            matched = True
    return matched


def read_pins(path: Path, name: str, where: str) -> Pins:
    """The keys pinned for host `name` (`host` or `[host]:port`) in the known_hosts file at `path`."""
    import paramiko

    pins = Pins()
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise TargetError(f"{where}: host_key.known_hosts: cannot read {path}: {exc}") from None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        marker = None
        if line.startswith("@"):
            marker, _, line = line.partition(" ")
            line = line.strip()
        fields = line.split()
        about_this_host = bool(fields) and hosts_match(fields[0], name)
        problem = None
        if marker not in (None, "@revoked", "@cert-authority"):
            problem = f"unknown marker {marker!r}; known: @revoked, @cert-authority"
        elif len(fields) < 3:
            problem = "not a known_hosts line (hosts, key type, key)"
        if problem is not None:
            if about_this_host or not fields:  # this target's pin is in doubt: never guess
                raise TargetError(f"{where}: {path} line {number}: {problem}")
            pins.skipped.append(f"{path} line {number}: {problem} (about another host: skipped, as OpenSSH skips it)")
            continue
        patterns, key_type, data = fields[:3]
        if marker == "@cert-authority" or not about_this_host:
            continue
        try:
            key = paramiko.PKey.from_type_string(key_type, base64.b64decode(data, validate=True))
        except (ValueError, binascii.Error, paramiko.SSHException) as exc:
            raise TargetError(f"{where}: {path} line {number}: its {key_type} key cannot be read ({exc})") from None
        if marker == "@revoked":
            pins.revoked.append(key)
        else:
            pins.keys[key.get_name()] = key
    return pins


__all__ = ["Pins", "hosts_match", "read_pins"]
