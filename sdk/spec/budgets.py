"""The `budgets` section: what a run must meet (latency, deadlines, environment, accuracy, determinism)."""


from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from sdk.spec.bounds import MAX_COUNT, MAX_REPLAY_FRAMES, Flag, Frozen, Int, Real

RECALL_AT_PRECISION = "min_recall_at_precision"  # budgets.accuracy's per-class key, and its checks' prefix
MAX_MS = 3_600_000  # an hour: no frame budget is longer


def Ms(description: str) -> Any:  # noqa: N802
    """A time budget in milliseconds, above 0 and at most an hour."""
    return Real(description, gt=0, le=MAX_MS)


PositiveMs = Ms("milliseconds, above 0 and at most an hour")


def Ratio(description: str) -> Any:  # noqa: N802
    """A fraction, score or IoU: from 0 to 1."""
    return Real(description, ge=0, le=1)


class LatencyLimits(Frozen):
    p50_ms: Ms("median latency, at most") | None = None
    p99_ms: Ms("99th percentile latency, at most") | None = None
    p999_ms: Ms("99.9th percentile latency, at most") | None = None
    p9999_ms: Ms("99.99th percentile latency, at most") | None = None
    max_ms: Ms("the slowest frame, at most") | None = None

    def items(self) -> list[tuple[str, float]]:
        return [(name, value) for name, value in self.model_dump().items() if value is not None]


class EnvironmentRequirements(Frozen):
    """What the device must be set to for the measurement to count (checked against the captured environment)."""

    power_mode: str | None = None  # nvpmodel mode, by name ("MAXN") or number ("0")
    clocks_locked: Flag = False  # jetson_clocks: CPU, GPU and EMC at their maximum, min == max
    cpu_governor: str | None = None  # e.g. "performance", on every online CPU
    max_temperature_c: Real("hottest thermal zone during the run, degrees Celsius", gt=0, le=150) | None = None
    max_load: Real("1-minute load average before, during and after the run; over it the verdict is INCONCLUSIVE", gt=0, le=4096) | None = None
    on_unmet: Literal["fail", "warn"] = "fail"  # warn: an unmet or unreadable requirement is reported, skipped in JUnit

    @field_validator("power_mode", mode="before")
    @classmethod
    def _mode_as_text(cls, mode: object) -> object:
        return str(mode) if isinstance(mode, int) and not isinstance(mode, bool) else mode


class AccuracyAcceptance(Frozen):
    """The validation run's detections against the host's FP32 reference on the same frames."""

    min_recall: Ratio("reference detections found, at least") = 0.95
    min_precision: Ratio("detections that match the reference, at least") = 0.95
    min_mean_iou: Ratio("mean IoU of matched detections, at least") = 0.9
    max_mean_score_drift: Ratio("mean |score - reference score| of matched detections, at most") = 0.05


class AccuracyBudget(AccuracyAcceptance):
    """`budgets.accuracy`: the FP32-reference thresholds, and minimums on labelled images (judged by `sdk evaluate`
    on the 95 % bootstrap bound over images)."""

    map50_95: Ratio("COCO mAP@[.5:.95] on the labels, at least") | None = None
    map50: Ratio("COCO AP at IoU 0.5 on the labels, at least") | None = None
    # Per class of the model (its names, checked at load): the recall at the evaluation's precision
    # (evaluation.recall_at_precision), at IoU 0.5, at least.
    min_recall_at_precision: Annotated[dict[str, Ratio("recall at the evaluation's precision, at least")], Field(max_length=10_000)] = {}

    def reference_thresholds(self) -> AccuracyAcceptance:
        """The thresholds against the FP32 reference alone (what a camera without its own inherits)."""
        return AccuracyAcceptance(**{name: getattr(self, name) for name in AccuracyAcceptance.model_fields})

    def label_minimums(self) -> list[tuple[str, float]]:
        """(figure, minimum) of the budgets judged on labels; a class's recall at precision is
        `min_recall_at_precision.CLASS`."""
        maps = [(name, value) for name, value in (("map50_95", self.map50_95), ("map50", self.map50)) if value is not None]
        return maps + [(f"{RECALL_AT_PRECISION}.{name}", value) for name, value in self.min_recall_at_precision.items()]


class Determinism(Frozen):
    """Two runs on the same replay: identical outputs, or within these tolerances per matched detection."""

    max_score_diff: Ratio("score difference per matched detection, at most") = 0.0
    min_iou: Ratio("IoU per matched detection, at least") = 1.0


class CameraBudget(Frozen):
    """A camera's own latency budget under `budgets.cameras.NAME` (a rear camera may have a looser one than the front)."""

    end_to_end: LatencyLimits | None = None
    deadline_ms: Ms("per frame of this camera, end to end from its capture") | None = None
    accuracy: AccuracyAcceptance | None = None  # this camera's thresholds against the FP32 reference (else budgets.accuracy's)


class Budgets(Frozen):
    warmup_frames: Int(0, MAX_REPLAY_FRAMES, "first frames left out of the statistics") = 0
    end_to_end: LatencyLimits | None = None
    stages: dict[Literal["preprocess", "infer", "postprocess", "sink"], LatencyLimits] = {}
    # A cascade step's time a frame (part of postprocess), by the step's name in `cascade:`.
    cascade: dict[Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,31}$")], LatencyLimits] = {}
    max_dropped: Int(0, MAX_COUNT, "frames dropped (late or overwritten), at most") | None = None
    deadline_ms: Ms("per frame, end to end from capture; a dropped frame misses it") | None = None
    max_miss_ratio: Ratio("deadline misses per frame, at most") | None = None
    max_consecutive_misses: Int(0, MAX_COUNT, "deadline misses in a row, at most") | None = None
    max_jitter_ms: Ms("end to end p99.9 - p50, at most") | None = None
    max_drift_ms: Ms("median of the last third - median of the first third, at most") | None = None
    environment: EnvironmentRequirements | None = None
    accuracy: AccuracyBudget | None = None
    determinism: Determinism | None = None
    cameras: dict[str, CameraBudget] = {}  # per camera, by the names of `sources` (checked against them at load)

    @model_validator(mode="after")
    def _misses_need_a_deadline(self) -> "Budgets":
        for key in ("max_miss_ratio", "max_consecutive_misses"):
            if getattr(self, key) is not None and self.deadline_ms is None:
                raise ValueError(f"{key} counts deadline misses: set budgets.deadline_ms too (e.g. 33.3 at 30 fps)")
        for name, camera in self.cameras.items():
            if camera.accuracy is not None and self.accuracy is None:
                raise ValueError(
                    f"cameras.{name}.accuracy sets this camera's own accuracy thresholds: set budgets.accuracy too "
                    "(it turns the comparison with the FP32 reference on, and holds for the other cameras)"
                )
        return self


__all__ = [
    "AccuracyAcceptance",
    "AccuracyBudget",
    "Budgets",
    "CameraBudget",
    "Determinism",
    "EnvironmentRequirements",
    "LatencyLimits",
    "Ms",
    "PositiveMs",
    "RECALL_AT_PRECISION",
    "Ratio",
]
