"""Deploy one pipeline to many targets: bounded parallelism, one result per target, a summary naming each failure.

The model is prepared and the bundle hashed once; each target gets its own session, trial
activation and validation run, and its own report folder (`DIR/<target>/`). With `canary`, the
first target must pass before the others start.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from sdk.errors import EXIT_BUDGET_FAIL, EXIT_INCONCLUSIVE, EXIT_PASS, EXIT_USER_ERROR, SdkError
from sdk.sinks.files import write_whole
from tools.connect.sessions import open_session, paused_service
from tools.progress import Progress

FLEET_FILE = "fleet.json"


@dataclass(frozen=True)
class TargetOutcome:
    target: str
    verdict: str | None  # PASS / FAIL / INCONCLUSIVE, or None when it did not get that far
    error: str | None
    release: str | None
    report_dir: Path

    @property
    def exit_code(self) -> int:
        if self.error is not None:
            return EXIT_USER_ERROR
        return {"PASS": EXIT_PASS, "FAIL": EXIT_BUDGET_FAIL, "INCONCLUSIVE": EXIT_INCONCLUSIVE}[self.verdict]


@dataclass(frozen=True)
class FleetResult:
    outcomes: list[TargetOutcome]
    report_dir: Path

    @property
    def exit_code(self) -> int:
        """An error anywhere beats FAIL, which beats INCONCLUSIVE, which beats PASS."""
        codes = {o.exit_code for o in self.outcomes}
        for code in (EXIT_USER_ERROR, EXIT_BUDGET_FAIL, EXIT_INCONCLUSIVE):
            if code in codes:
                return code
        return EXIT_PASS

    def failures(self) -> list[TargetOutcome]:
        """Targets that did not PASS (an error, a budget FAIL or INCONCLUSIVE)."""
        return [o for o in self.outcomes if o.exit_code != EXIT_PASS]

    def errors(self) -> list[TargetOutcome]:
        """Targets where the deploy or the run itself failed."""
        return [o for o in self.outcomes if o.error is not None]


def deploy_fleet(
    targets,
    install,
    measure,
    frames: int | None,
    report_dir: Path,
    progress: Progress,
    *,
    parallel: int,
    canary: bool,
    kind: str | None = "deploy",
) -> FleetResult:
    """`install(session, target)` stages and activates; `measure(session, staged, dir)` runs and returns the report.
    Each target's run goes into the history as it ends (`kind`: deploy or validate; None: not, a part of a run recorded
    whole, like an evaluation's shard); fleet.json adds the fleet report."""
    from tools.history.hook import finished

    def one(target) -> TargetOutcome:
        folder = report_dir / target.name
        try:
            with open_session(target) as session, paused_service(session, progress):
                staged = install(session, target)
                report = measure(session, staged, folder)
            if kind is not None:
                finished(folder, kind, fleet_dir=report_dir)  # concurrent writers: one connection per target
            return TargetOutcome(target.name, report["verdict"], None, staged.release_id, folder)
        except SdkError as exc:
            return TargetOutcome(target.name, None, exc.message, None, folder)

    outcomes: dict[str, TargetOutcome] = {}
    rest = list(targets)
    if canary and rest:
        first = rest.pop(0)
        outcomes[first.name] = one(first)
        if outcomes[first.name].exit_code != EXIT_PASS:
            for target in rest:
                outcomes[target.name] = TargetOutcome(
                    target.name, None, f"not attempted: the canary {first.name} did not pass", None, report_dir / target.name
                )
            rest = []
    with ThreadPoolExecutor(max_workers=max(1, parallel), thread_name_prefix="deploy") as pool:
        for outcome in pool.map(one, rest):
            outcomes[outcome.target] = outcome
    result = FleetResult([outcomes[t.name] for t in targets], report_dir)
    write_summary(result)
    return result


def write_summary(result: FleetResult) -> Path:
    result.report_dir.mkdir(parents=True, exist_ok=True)
    final = result.report_dir / FLEET_FILE
    summary = {
        "exit_code": result.exit_code,
        "targets": [
            {"target": o.target, "verdict": o.verdict, "error": o.error, "release": o.release, "report_dir": str(o.report_dir)}
            for o in result.outcomes
        ],
        "not_passed": [o.target for o in result.failures()],
        "errors": {o.target: o.error for o in result.errors()},
    }
    from tools.history.fleet_report import fleet_sections  # per-device figures, their spread per device class, outliers

    summary.update(fleet_sections(summary["targets"]))
    write_whole(final, json.dumps(summary, indent=2) + "\n")
    return final
