"""The regression gate of the pytest plugin: `--baseline last-committed|RELEASE --max-regression 5%`.

The acceptance run just measured (B) against the baseline release's runs on the same device class (A), from the
history, by `sdk compare`'s statistics with the tolerance as the minimum difference: a figure regresses when its
whole interval lies beyond the tolerance on the worse side. So a CI job fails only on a regression the runs can show
and that is larger than the tolerance; noise, or a slowdown smaller than the tolerance, passes. A history with no
baseline to compare with (the first release on this device class) skips the gate, saying so.
"""

from __future__ import annotations

from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from sdk.errors import ConfigError
from tools.history.compare import compare
from tools.history.noise import spreads
from tools.history.resolve import LAST_COMMITTED, resolve_pair
from tools.history.store import HistoryError, history_path, open_for_reading


@dataclass(frozen=True)
class GateResult:
    baseline: str
    comparison: dict | None
    skipped: str | None = None  # why the gate could not judge

    @property
    def regressions(self) -> list[dict]:
        return [f for f in (self.comparison or {}).get("figures", []) if f["verdict"] == "worse"]

    def message(self) -> str:
        if self.skipped:
            return self.skipped
        a = self.comparison["a"]
        lines = [f"against release {a['release']} ({len(a['runs'])} run(s)), tolerance {self.comparison['min_difference']:.0%}:"]
        for f in self.regressions:
            lines.append(
                f"  {f['name']}: {f['a']:.4g} -> {f['b']:.4g} ({f['relative']:+.1%}), interval of the difference "
                f"[{f['interval'][0]:.4g}, {f['interval'][1]:.4g}], beyond the tolerance {f['margin']:.4g}"
            )
        return "\n".join(lines) if self.regressions else lines[0] + " no figure regressed beyond it"


def regression_gate(report_dir: Path, baseline: str, max_regression: float, confidence: float = 0.95) -> GateResult:
    """B = the run in `report_dir` (recorded in the history); A = `baseline` on its device class."""
    path = history_path()
    if path is None:
        raise ConfigError("the regression gate needs the history (SDK_HISTORY=off)", hint="unset SDK_HISTORY, or leave out --baseline")
    try:
        connection = open_for_reading(path)
    except HistoryError as exc:
        return GateResult(baseline, None, f"regression gate skipped: {exc.message}")
    with closing(connection):
        try:
            a, b = resolve_pair(connection, baseline, str(report_dir))
        except ConfigError as exc:
            if baseline == LAST_COMMITTED and "no release of" in exc.message:
                return GateResult(baseline, None, f"regression gate skipped: {exc.message}")
            raise
        row = connection.execute("SELECT device_class FROM runs WHERE report_dir = ?", (str(Path(report_dir).resolve()),)).fetchone()
        known = spreads(connection, b.runs[0].report.get("pipeline"), row[0]) if row is not None else {}
    return GateResult(baseline, compare(a, b, confidence=confidence, min_difference=max_regression, spreads=known))
