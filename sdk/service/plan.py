"""What a started service will do with its source, in one sentence (`sdk start` says it, issue 23 item 5).

A live camera runs until stopped (and is restarted when its stream ends); a recording is replayed
and the service stops by itself at its end, unless `source.replay.loop` is set. The clip's length
comes from `replay.frames` (or a synthetic source's `frames=`) when known.
"""

from __future__ import annotations

from sdk.sources.uri import LIVE_SCHEMES, parse_source_uri


def clip_frames(pipeline, source) -> int | None:
    """Frames the replay of `source` plays: `replay.frames`, or a synthetic source's `frames=`; None when only the file
    knows (the supervisor does not open the video to count: it stays free of OpenCV's memory)."""
    if source.replay.frames is not None:
        return source.replay.frames
    try:
        uri = parse_source_uri(source.uri, pipeline.folder)
    except Exception:  # noqa: BLE001 - a description must never stop a start; the runtime reports a bad URI itself
        return None
    frames = uri.params.get("frames", "") if uri.scheme == "synthetic" else ""
    return int(frames) if frames.isdigit() else None


def source_plan(pipeline) -> dict:
    """{"uri", "live", "loop", "frames", "rate_fps", "ends", "plan"}: what the service will do with its source; with
    several cameras, the first camera's, and `plan` says each camera's in turn."""
    cameras = pipeline.spec.cameras
    plans = {name: _camera_plan(pipeline, source) for name, source in cameras.items()}
    first = next(iter(plans.values()))
    if len(plans) == 1:
        return first
    return {**first, "plan": "; ".join(f"camera {name}: {plan['plan']}" for name, plan in plans.items())}


def _camera_plan(pipeline, source) -> dict:
    scheme = source.uri.partition("://")[0]
    live = scheme in LIVE_SCHEMES or "live=1" in source.uri
    plan = {"uri": source.uri, "live": live, "loop": source.replay.loop, "frames": None, "rate_fps": source.replay.rate_fps}
    if live:
        plan["ends"] = "never"
        plan["plan"] = f"running on the live source {source.uri} until stopped (restarted if its stream ends)"
        return plan
    frames = clip_frames(pipeline, source)
    plan["frames"] = frames
    length = f"{frames} frames" if frames else "every frame of it"
    pace = f" at {source.replay.rate_fps:g} fps" if source.replay.rate_fps else " as fast as the pipeline goes"
    seconds = f", about {frames / source.replay.rate_fps:.0f} s" if frames and source.replay.rate_fps else ""
    if source.replay.loop:
        plan["ends"] = "never"
        plan["plan"] = f"replaying {source.uri} ({length}{pace}) in a loop until stopped"
    else:
        plan["ends"] = "with the clip"
        plan["plan"] = (
            f"replaying {source.uri} once ({length}{pace}{seconds}): the service stops by itself when the clip ends "
            "(state stopped, not restarted); set source.replay.loop: true to keep it running"
        )
    return plan


__all__ = ["clip_frames", "source_plan"]
