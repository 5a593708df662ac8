"""What a value in a pipeline file may be: numbers finite, of the right kind and inside a documented range.

Every number of the schema is declared with `Int(...)` or `Real(...)`: the range is a pydantic
`Field(ge=..., le=..., description=...)`, so a generated reference reads it from the schema, and a
validator that runs first turns a bad value into one sentence naming the value and the range.
Booleans are not numbers here (`threads: true` is refused) and numbers are not booleans
(`loop: 1` is refused). PyYAML reads YAML 1.1, where `1e8` is a string and `1.0e+8` a float; a
number written either way is taken for what it says, so an integer field takes `1e3` as 1000 and
refuses `2.5`. NaN and infinities are refused everywhere.

The memory a replay may take is capped here too (`MAX_REPLAY_FRAMES`, `MAX_HELD_FRAMES_BYTES`),
and the caps are named in the error.
"""


import math
import numbers
import re
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic_core import PydanticCustomError

ERROR_TYPE = "value_bounds"  # the loader prints these errors' messages as they are

# A run keeps per-frame records (timestamps, frame index, output digest) for every frame it is
# told to play (`replay.frames`, `--frames`): sdk.runtime.recorder.LatencyRecorder, 8 int64 a frame.
RECORD_BYTES_PER_FRAME = 64
MAX_REPLAY_FRAMES = 1_000_000  # 61 MiB of records; 9.3 hours at 30 fps
# Calibration keeps the held-out frames, preprocessed, in memory (the accuracy gate runs them twice).
MAX_HELD_FRAMES_BYTES = 4 << 30
MAX_COUNT = 1_000_000_000  # counts over a run of any length (a service runs for days): a year at 30 fps
MAX_SOURCE_PIXELS = 8192  # a frame side, in pixels (8K video is 7680 x 4320)
MAX_TENSOR_SIDE = 8192  # a network input side: the float32 canvas of 8192 x 8192 x 3 is 768 MiB

_NUMBER_TEXT = re.compile(r"[-+]?(\d[\d_]*(\.[\d_]*)?|\.\d[\d_]*)([eE][-+]?\d+)?")


class Frozen(BaseModel):
    """Unknown keys are errors (the loader suggests the close one), nothing changes after load, no NaN or inf.

    A model's validator is built when it is first used (`defer_build`), not when its module is imported: loading a
    pipeline builds `Pipeline`'s (with every section's schema in it) once, and a process that never validates a
    section does not pay for its validator."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=False, allow_inf_nan=False, defer_build=True)


def bounds_error(message: str, hint: str | None = None, path: tuple[Any, ...] | None = None) -> PydanticCustomError:
    """A validation error printed as it is; `path` (from the pipeline's top) where a cross-field check knows it better."""
    context: dict[str, Any] = {"message": message}
    if hint is not None:
        context["hint"] = hint
    if path is not None:
        context["path"] = path
    return PydanticCustomError(ERROR_TYPE, "{message}", context)


def shown(value: Any) -> str:
    """A value as it was written in YAML, near enough to find it in the file."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        return repr(value)
    if isinstance(value, str):
        return value if _NUMBER_TEXT.fullmatch(value) else repr(value)
    if isinstance(value, (dict, list, tuple)):
        return "a mapping" if isinstance(value, dict) else "a list"
    if value is None:
        return "null"
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}...{text[-8:]} ({len(text)} digits)"


def number(value: Any) -> float | int | None:
    """The number a YAML value stands for (an int stays exact), or None where it is none."""
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, str) and _NUMBER_TEXT.fullmatch(value.strip()):
        text = value.strip().replace("_", "")
        if _looks_integral(text):
            return int(text)
        return float(text)
    return None


def _looks_integral(text: str) -> bool:
    return bool(re.fullmatch(r"[-+]?\d{1,4000}", text))


def _fmt(limit: float) -> str:
    return str(int(limit)) if float(limit).is_integer() and abs(limit) < 1e15 else repr(float(limit))


def describe_range(kind: str, ge: float | None = None, gt: float | None = None, le: float | None = None, lt: float | None = None) -> str:
    if ge is not None and le is not None:
        return f"{kind} from {_fmt(ge)} to {_fmt(le)}"
    parts = [f"{word} {_fmt(limit)}" for word, limit in (("at least", ge), ("above", gt), ("at most", le), ("below", lt)) if limit is not None]
    return f"{kind} {' and '.join(parts)}" if parts else kind


def Int(ge: int, le: int, description: str, *, over: Callable[[int], str] | None = None, over_hint: str | None = None) -> Any:  # noqa: N802
    """An integer from `ge` to `le`; `over(value)`, where given, says what a value above `le` would cost
    (it follows the value: "100000000 {over}"), and `over_hint` how to do without."""
    allowed = describe_range("an integer", ge=ge, le=le)

    def check(value: Any) -> int:
        got = number(value)
        if isinstance(value, bool):
            raise bounds_error(f"{shown(value)} is a boolean, not an integer; allowed: {allowed}")
        if got is None:
            raise bounds_error(f"{shown(value)} is not an integer; allowed: {allowed}")
        if isinstance(got, float):
            if not math.isfinite(got):
                raise bounds_error(f"{shown(value)} is not a finite number; allowed: {allowed}")
            if not got.is_integer():
                raise bounds_error(f"{shown(value)} is not a whole number; allowed: {allowed}")
            got = int(got)
        if got > le and over is not None:
            written = shown(value)
            said = written if written == str(got) or len(str(got)) > 15 else f"{written} = {got}"
            raise bounds_error(f"{said} {over(got)}; allowed: {allowed}", over_hint)
        if not ge <= got <= le:
            raise bounds_error(f"{shown(value)} is out of range; allowed: {allowed}")
        return got

    return Annotated[int, Field(ge=ge, le=le, description=description), BeforeValidator(check)]  # the check runs first


def Real(  # noqa: N802
    description: str,
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    hint: str | None = None,
) -> Any:
    """A finite number in the given range (an integer is a number too)."""
    allowed = describe_range("a number", ge=ge, gt=gt, le=le, lt=lt)

    def check(value: Any) -> float:
        got = number(value)
        if isinstance(value, bool):
            raise bounds_error(f"{shown(value)} is a boolean, not a number; allowed: {allowed}", hint)
        if got is None:
            raise bounds_error(f"{shown(value)} is not a number; allowed: {allowed}", hint)
        try:
            got = float(got)
        except OverflowError:
            got = math.inf
        if not math.isfinite(got):
            raise bounds_error(f"{shown(value)} is not a finite number; allowed: {allowed}", hint)
        if (ge is not None and got < ge) or (gt is not None and got <= gt) or (le is not None and got > le) or (lt is not None and got >= lt):
            raise bounds_error(f"{shown(value)} is out of range; allowed: {allowed}", hint)
        return got

    return Annotated[float, Field(ge=ge, gt=gt, le=le, lt=lt, description=description), BeforeValidator(check)]


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise bounds_error(f"{shown(value)} is not a boolean; allowed: true or false")
    return value


Flag = Annotated[bool, BeforeValidator(_flag)]


def size_text(nbytes: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            value = nbytes / scale
            return f"{value:.3g} {unit}" if value < 1e6 else f"{value:.3e} {unit}"
    return f"{int(nbytes)} bytes"


def replay_frames_cost(frames: int) -> str:
    """What `frames` frames of run records would take, against the cap (follows the number of frames)."""
    return (
        f"frames would take {size_text(frames * RECORD_BYTES_PER_FRAME)} of run records ({RECORD_BYTES_PER_FRAME} bytes a frame, "
        f"allocated when the run starts); the replay cap is {MAX_REPLAY_FRAMES} frames ({size_text(MAX_REPLAY_FRAMES * RECORD_BYTES_PER_FRAME)})"
    )


REPLAY_FRAMES_HINT = "play fewer frames, or leave replay.frames out: a run without it keeps the newest 65536 frames' records, however long it runs"


def replay_frames_problem(frames: int) -> str | None:
    """Why a run of `frames` frames is refused before anything is allocated, or None (the runtime's guard for --frames)."""
    if frames > MAX_REPLAY_FRAMES:
        return f"{frames} {replay_frames_cost(frames)}; allowed: at most {MAX_REPLAY_FRAMES} frames"
    return None
