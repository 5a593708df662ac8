"""pytest plugin for safety acceptance suites: `pytest --target orin-01 --pipeline P tests/acceptance`.

Once per session it deploys the pipeline (nothing is sent when the release is current; or
`--no-deploy` to validate what is there), runs the validation on the target and hands the
measured statistics to test functions through the `acceptance` fixture, so a team writes its
safety requirements as plain asserts. Tests that ask for `budget_check` are parametrized with
every check the pipeline file declares, one test per budget. Registered as a pytest11 entry point.

A check's test passes, fails or is skipped by the same mapping as junit.xml (sdk/runtime/junit.py):
PASS passes; FAIL, INCONCLUSIVE and an unverifiable requirement fail; a requirement the pipeline
only warns about (`on_unmet: warn`) is skipped with its reason. A user error (a missing --pipeline
file, a bad pipeline) ends the session with the CLI's `error:` and `hint:` lines, no traceback.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from sdk.errors import SdkError
from sdk.runtime.junit import outcome, properties
from sdk.runtime.timeline import TIMELINE_FILE, read_timeline
from sdk.spec.loader import load_pipeline
from sdk.spec.schema import Budgets

ACCEPTED = ("PASS",)  # the only status a check's test passes with (see `Acceptance.judge`)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("perception-sdk", "latency and accuracy acceptance on a target (perception deploy SDK)")
    group.addoption("--pipeline", type=Path, default=None, help="pipeline file whose budgets the acceptance suite checks")
    group.addoption("--target", default=None, help="target name (default: local, or the labgrid place of --lg-env's RemotePlace)")
    group.addoption("--frames", type=int, default=None, help="frames to run (default: the pipeline's replay setting)")
    group.addoption("--repeat", type=int, default=None, help="runs compared for determinism (default 1, or 2 with budgets.determinism)")
    group.addoption("--stress", default=None, help="interference on the device during the run, e.g. cpu=2,memory=1")
    group.addoption("--no-deploy", action="store_true", help="validate the target's current release without deploying")
    group.addoption(
        "--acceptance-report-dir", type=Path, default=None, help="an empty folder for report.json/html (default: a new one under reports/<pipeline>/)"
    )
    group.addoption("--acceptance-force", action="store_true", help="empty --acceptance-report-dir first when it holds files")
    group.addoption(
        "--baseline", default=None, help="regression gate: compare the run with `last-committed` or a release id from the history (sdk history)"
    )
    group.addoption(
        "--max-regression", type=_share, default=0.05, help="regression gate: the tolerance, e.g. 5% (fail only on a detectable regression beyond it)"
    )


def _share(text: str) -> float:
    from tools.history.commands import fraction

    return fraction(text)


def _user_error(exc: SdkError) -> None:
    sys.stderr.write(f"error: {exc.message}\nhint: {exc.hint}\n")


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config):
    """A pipeline file that cannot be read is the user's error, said as the CLI says it (exit 4, pytest's usage error)."""
    path = config.getoption("--pipeline", default=None)
    if path is None:
        return None
    try:
        load_pipeline(path)
    except SdkError as exc:
        _user_error(exc)
        return pytest.ExitCode.USAGE_ERROR
    return None


def declared_checks(budgets: Budgets, repeat: int) -> list[str]:
    """The names of the checks a validation of these budgets reports, in the report's order."""
    names = []
    groups = [("end_to_end", budgets.end_to_end)] + list(budgets.stages.items())
    for group, limits in groups:
        names += [f"{group}.{key}" for key, _ in (limits.items() if limits is not None else [])]
    if budgets.max_jitter_ms is not None:
        names.append("end_to_end.jitter_ms")
    if budgets.max_drift_ms is not None:
        names.append("end_to_end.drift_ms")
    if budgets.deadline_ms is not None and budgets.max_miss_ratio is not None:
        names.append("deadline.miss_ratio")
    if budgets.deadline_ms is not None and budgets.max_consecutive_misses is not None:
        names.append("deadline.consecutive_misses")
    if budgets.max_dropped is not None:
        names.append("dropped")
    env = budgets.environment
    if env is not None:
        wanted = {"power_mode": env.power_mode is not None, "clocks_locked": env.clocks_locked, "cpu_governor": env.cpu_governor is not None}
        wanted["max_temperature_c"] = env.max_temperature_c is not None
        wanted["max_load"] = env.max_load is not None
        names += [f"environment.{key}" for key, on in wanted.items() if on]
    if budgets.accuracy is not None:
        names += [f"accuracy.{key}" for key in ("recall", "precision", "mean_iou", "mean_score_drift")]
        names += [f"accuracy.{key}" for key, _ in budgets.accuracy.label_minimums()]  # on evaluation.labels; INCONCLUSIVE without
    names += [f"determinism.run{run}" for run in range(2, repeat + 1)]
    return names


def _repeat(config: pytest.Config, budgets: Budgets) -> int:
    return config.getoption("--repeat") or (2 if budgets.determinism is not None else 1)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "budget_check" not in metafunc.fixturenames:
        return
    path = metafunc.config.getoption("--pipeline")
    if path is None:
        metafunc.parametrize("budget_check", [pytest.param(None, marks=pytest.mark.skip(reason="no --pipeline given"))], ids=["no-pipeline"])
        return
    budgets = load_pipeline(path).spec.budgets
    names = declared_checks(budgets, _repeat(metafunc.config, budgets))
    metafunc.parametrize("budget_check", names or [pytest.param(None, marks=pytest.mark.skip(reason="the pipeline declares no budgets"))])


@dataclass(frozen=True)
class Acceptance:
    """What one validation measured, for plain asserts: `acceptance.end_to_end.p99_ms < 40`."""

    report: dict
    report_dir: Path

    @property
    def verdict(self) -> str:
        return self.report["verdict"]

    def check(self, name: str) -> dict:
        for check in self.report["checks"]:
            if check["name"] == name:
                return check
        raise KeyError(f"no check {name!r} in the report; it has {[c['name'] for c in self.report['checks']]}")

    def judge(self, name: str) -> None:
        """Pass, fail or skip the calling test as junit.xml shows this check (never a plain pass for WARN)."""
        result = outcome(self.check(name))
        where = f"; report in {self.report_dir}"
        if result.kind == "failure":
            pytest.fail(result.message + where, pytrace=False)
        if result.kind == "skipped":
            pytest.skip(result.message)

    @property
    def end_to_end(self) -> SimpleNamespace:
        return SimpleNamespace(**self.report["end_to_end"])

    def stage(self, name: str) -> SimpleNamespace:
        return SimpleNamespace(**self.report["stages"][name])

    @property
    def deadline(self) -> SimpleNamespace | None:
        return SimpleNamespace(**self.report["deadline"]) if self.report.get("deadline") else None

    @property
    def dropped(self) -> int:
        return self.report["dropped"]

    @property
    def environment(self) -> dict:
        return self.report["environment"]

    def latencies_ms(self, stage: str = "end_to_end") -> np.ndarray:
        """Every measured frame's latency (warm-up excluded), for percentiles of your own."""
        from tools.reports.plots import latencies_from_timeline

        return latencies_from_timeline(read_timeline(self.report_dir / TIMELINE_FILE))[stage]


@pytest.fixture(scope="session")
def acceptance(request: pytest.FixtureRequest, record_testsuite_property) -> Acceptance:
    config = request.config
    path = config.getoption("--pipeline")
    if path is None:
        pytest.skip("no --pipeline given: run the acceptance suite as pytest --target T --pipeline P tests/acceptance")
    from tools.validation.validate import Validate

    target = target_of(config)
    validate = Validate(
        path,
        target,
        frames=config.getoption("--frames"),
        report_dir=config.getoption("--acceptance-report-dir"),
        repeat=config.getoption("--repeat"),
        stress=config.getoption("--stress"),
        deploy=not config.getoption("--no-deploy"),
        force=config.getoption("--acceptance-force"),
    )
    try:
        from tools.targets import resolve_targets

        if len(resolve_targets(target)) > 1:  # a group is validated by `sdk validate --target GROUP` (a fleet report)
            raise SdkError(f"--target {target} names several targets", hint="the acceptance suite judges one target; run it once per target")
        result = validate()
    except SdkError as exc:  # the CLI's two lines instead of a traceback into the SDK
        pytest.fail(f"error: validation on {target} failed: {exc.message}\nhint: {exc.hint}", pytrace=False)
    for key, value in properties(result.report).items():  # traceability in pytest's own --junitxml too
        record_testsuite_property(key, value)
    return Acceptance(result.report, result.report_dir)


@pytest.fixture(scope="session")
def regression(request: pytest.FixtureRequest, acceptance: Acceptance):
    """The regression gate's result for this run (`--baseline`), or a skip without one; `.judge()` fails the calling
    test on a statistically detectable regression beyond `--max-regression` (tests/acceptance/test_regression_gate.py)."""
    baseline = request.config.getoption("--baseline")
    if baseline is None:
        pytest.skip("no --baseline given: the regression gate compares with last-committed or a release (--baseline)")
    from tools.history.gate import regression_gate

    try:
        return regression_gate(acceptance.report_dir, baseline, request.config.getoption("--max-regression"))
    except SdkError as exc:
        pytest.fail(f"error: regression gate: {exc.message}\nhint: {exc.hint}", pytrace=False)


def target_of(config: pytest.Config) -> str:
    """`--target`; else, beside labgrid's own plugin (`--lg-env ENV.yaml`), the environment's RemotePlace as
    `labgrid:PLACE` (its coordinator_address as LG_COORDINATOR unless set); else `local`."""
    given = config.getoption("--target")
    if given:
        return given
    env_file = config.getoption("lg_env", default=None) or (os.environ.get("LG_ENV") if _has_labgrid_plugin(config) else None)
    if not env_file:
        return "local"
    place, coordinator = remote_place(Path(env_file))
    if place is None:
        return "local"
    if coordinator and not os.environ.get("LG_COORDINATOR"):
        os.environ["LG_COORDINATOR"] = coordinator
    return f"labgrid:{place}"


def _has_labgrid_plugin(config: pytest.Config) -> bool:
    return config.pluginmanager.has_plugin("labgrid")


def remote_place(env_file: Path) -> tuple[str | None, str | None]:
    """The RemotePlace of a labgrid environment file's first target (`main` first), and its coordinator_address."""
    import yaml

    try:
        data = yaml.safe_load(env_file.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None, None
    targets = data.get("targets") or {}
    names = sorted(targets, key=lambda name: name != "main")
    for name in names:
        resources = (targets[name] or {}).get("resources") or {}
        entries = resources if isinstance(resources, list) else [{k: v} for k, v in resources.items()]
        for entry in entries:
            remote = entry.get("RemotePlace") if isinstance(entry, dict) else None
            if isinstance(remote, dict) and remote.get("name"):
                return str(remote["name"]), (data.get("options") or {}).get("coordinator_address")
    return None, (data.get("options") or {}).get("coordinator_address")
