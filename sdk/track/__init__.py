"""Multi-object tracking after NMS: a track id per detection, stable across the frames of one camera."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sdk.spec.track import Track
    from sdk.track.bytetrack import ByteTracker


def create_tracker(spec: Track | None) -> ByteTracker | None:
    """The tracker of a pipeline's `track:` section (one per camera), or None where the pipeline does not track."""
    if spec is None:
        return None
    from sdk.errors import ConfigError

    try:
        from sdk.track.bytetrack import ByteTracker

        return ByteTracker(spec)
    except ModuleNotFoundError as exc:
        if exc.name != "scipy" and not str(exc.name or "").startswith("scipy."):
            raise
        raise ConfigError(
            "track: needs scipy (linear_sum_assignment), and this Python has none",
            hint="pip install scipy; a deploy ships it to a device that lacks it when the pipeline has a `track:` section",
        ) from None


__all__ = ["create_tracker"]
