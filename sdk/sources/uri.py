"""Source URIs, jetson-utils style: one string names any camera or recording."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl

from sdk.errors import SourceError
from sdk.spec.paths import confined_path

LIVE_SCHEMES = ("v4l2", "csi", "gst")
RECORDING_SCHEMES = ("mcap", "rosbag2")  # recordings of camera topics, with their stamps (sdk/sources/recording.py)


@dataclass(frozen=True)
class SourceUri:
    scheme: str
    target: str
    params: dict[str, str] = field(default_factory=dict)

    @property
    def live(self) -> bool:
        return self.scheme in LIVE_SCHEMES

    def int_param(self, name: str, default: int) -> int:
        value = self.params.get(name)
        if value is None:
            return default
        try:
            number = int(value)
        except ValueError:
            raise SourceError(f"source {self.scheme}://: parameter {name}={value!r} is not an integer") from None
        if number < 0:
            raise SourceError(f"source {self.scheme}://: parameter {name}={number} must not be negative")
        return number


def parse_source_uri(uri: str, base: Path | None = None) -> SourceUri:
    """Split `scheme://target?k=v`; file and folder targets are confined to `base`."""
    scheme, sep, rest = uri.partition("://")
    if not sep or not rest:
        raise SourceError(f"source URI {uri!r} has no scheme://target")
    if scheme == "gst":
        # A GStreamer pipeline is passed through whole: `?` and `=` belong to it.
        return SourceUri(scheme, rest)
    target, _, query = rest.partition("?")
    pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=False)
    params = dict(pairs)
    topics = [value for key, value in pairs if key == "topic"]
    if len(topics) > 1:
        raise SourceError(
            f"source URI {uri!r}: {len(topics)} topic= parameters; one reader reads one camera topic",
            hint="in a pipeline file, `source:` with several topic= is one camera per topic (or write `sources:`, a URI each)",
        )
    if scheme in ("file", "images", *RECORDING_SCHEMES):
        if base is None:
            raise SourceError(f"source URI {uri!r}: a relative path needs the pipeline's folder")
        target = str(confined_path(base, target, where=f"source.uri {uri!r}"))
    elif scheme not in ("v4l2", "csi", "synthetic"):
        raise SourceError(f"source URI {uri!r}: unknown scheme {scheme!r}")
    return SourceUri(scheme, target, params)
