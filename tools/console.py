"""Everything the host CLI shows a person: rich progress bars and the run summary."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from sdk.runtime.report import preprocess_line
from sdk.runtime.verdict import SHORT_UNITS, check_unit, format_number
from tools import progress


class RichProgress(progress.RichProgress):
    """The CLI's progress display, always on stderr: stdout holds the results only, clean when piped (`> out.txt`)."""

    def __init__(self, console: Console, heartbeat_s: float | None = None) -> None:
        errors = Console(stderr=True, highlight=False)
        errors.soft_wrap = not errors.is_terminal
        super().__init__(errors, heartbeat_s)


VERDICT_STYLE = {"PASS": "bold green", "FAIL": "bold red", "INCONCLUSIVE": "bold yellow", "WARN": "yellow"}


def _value(value, unit: str = "") -> str:
    if value is None:
        return "-"
    text = format_number(value)
    return f"{text} {unit}" if unit in SHORT_UNITS and isinstance(value, (int, float)) else text


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def render_report(console: Console, report: dict, report_dir, staged) -> None:
    console.print(
        f"[bold]{report['pipeline']}[/] on [bold]{report['target']}[/]: {report['measured_frames']} frames measured "
        f"({report['warmup_frames']} warm-up), {report['dropped']} dropped, backend {report['backend']}"
    )
    if report.get("postprocess"):  # older reports have none
        console.print(f"postprocess: {report['postprocess']}")
    table = Table()
    for column in ("stage", "p50 ms", "p99 ms", "max ms", "mean ms"):
        table.add_column(column, justify="left" if column == "stage" else "right")
    for stage, stats in report["stages"].items():
        table.add_row(stage, _ms(stats["p50_ms"]), _ms(stats["p99_ms"]), _ms(stats["max_ms"]), _ms(stats["mean_ms"]))
    if report.get("queue"):  # waiting between capture and pickup (a camera's frame waits for the batch of several)
        queue = report["queue"]
        table.add_row("[dim]queue (waiting)[/]", _ms(queue["p50_ms"]), _ms(queue["p99_ms"]), _ms(queue["max_ms"]), _ms(queue["mean_ms"]))
    e2e = report["end_to_end"]
    table.add_row("[bold]end to end[/]", _ms(e2e["p50_ms"]), _ms(e2e["p99_ms"]), _ms(e2e["max_ms"]), _ms(e2e["mean_ms"]))
    console.print(f"preprocessing: {preprocess_line(report.get('preprocess'))}", highlight=False)
    console.print(table)
    for check in report["checks"]:
        style = VERDICT_STYLE[check["status"]]
        unit = check_unit(check["name"])
        bound = f", 95% bound {_value(check['bound'], unit)}" if check.get("bound") is not None else ""
        status = "UNVERIFIED" if check.get("unverified") else check["status"]
        console.print(
            f"  [{style}]{status:<12}[/] {check['name']}: {_value(check['measured'], unit)} (limit {_value(check['limit'], unit)}{bound})",
            highlight=False,
        )
    for note in report["notes"]:
        console.print(f"  [yellow]note[/] {note}")
    if report.get("corrupt_frames") or report.get("stage_errors"):
        console.print(f"  [yellow]skipped[/] {report['corrupt_frames']} corrupt frame(s), stage errors {report['stage_errors']}")
    if staged.recovered:
        console.print(f"  [yellow]note[/] an unfinished trial of release {staged.recovered} was rolled back before this deploy")
    unit = getattr(staged, "service_unit", None) or {}
    vehicle = report.get("target") != "local"  # a laptop is never asked for root: the service is a vehicle's
    if vehicle and unit and (not unit.get("user_exists") or unit.get("removed_units")):  # the root step the deploy cannot take
        removed = f"; units removed: {', '.join(unit['removed_units'])}" if unit.get("removed_units") else ""
        console.print(
            f"  [yellow]note[/] to run this pipeline as a systemd service on the vehicle: the unit {unit['unit']} runs as user "
            f"{unit['user']}{'' if unit.get('user_exists') else ' (not created yet)'}{removed}; once, as root on the device: {unit['install']}",
            highlight=False,
        )
    sent = (
        f"{staged.files_sent} of {staged.files} file(s), {staged.bytes_sent / 1e6:.1f} MB sent" if staged.files else "current release, nothing sent"
    )
    console.print(f"release {staged.release_id} ({sent}); report in {report_dir} (report.html)")
    detail = report.get("verdict_detail") or report["verdict"]
    console.print(f"verdict: [{VERDICT_STYLE[report['verdict']]}]{report['verdict']}[/]{detail[len(report['verdict']) :]}")


def render_fleet(console: Console, result) -> None:
    table = Table(title=f"fleet: {len(result.outcomes)} targets")
    for column in ("target", "verdict", "release", "error"):
        table.add_column(column)
    for o in result.outcomes:
        verdict = f"[{VERDICT_STYLE[o.verdict]}]{o.verdict}[/]" if o.verdict else "[bold red]ERROR[/]"
        table.add_row(o.target, verdict, o.release or "-", o.error or "")
    console.print(table)
    errors = result.errors()
    if errors:
        console.print(f"[bold red]{len(errors)} of {len(result.outcomes)} failed to deploy or run:[/] " + ", ".join(o.target for o in errors))
    others = [o for o in result.failures() if o.error is None]
    if others:
        console.print(f"[yellow]{len(others)} ran but did not pass:[/] " + ", ".join(f"{o.target} ({o.verdict})" for o in others))
    _render_outliers(console, result.report_dir / "fleet.json")
    console.print(f"summary in {result.report_dir / 'fleet.json'}; one report folder per target")


def _render_outliers(console: Console, path) -> None:
    """The fleet report's outliers: devices outside their class's spread (tools/history/fleet_report.py)."""
    import json

    try:
        outliers = json.loads(path.read_text()).get("outliers") or []
    except (OSError, ValueError):
        return
    for o in outliers:
        console.print(
            f"[yellow]outlier:[/] {o['target']} is {o['direction']} than its class ({o['device_class']}): {o['figure']} "
            f"{o['value']:.4g} ms, the class's spread {o['class_spread'][0]:.4g} to {o['class_spread'][1]:.4g} ms",
            highlight=False,
        )


def render_accuracy(console: Console, report: dict) -> None:
    """The accuracy gate's report (AccuracyReport.as_dict())."""
    table = Table(title=f"INT8 vs FP32 on {report['frames']} held-out frames")
    for column in ("output", "mean cosine", "worst cosine", "max abs error"):
        table.add_column(column, justify="left" if column == "output" else "right")
    for name, stats in report["outputs"].items():
        table.add_row(name, f"{stats['mean_cosine']:.5f}", f"{stats['min_cosine']:.5f}", f"{stats['max_abs_error']:.4f}")
    console.print(table)
    console.print(
        f"detections: FP32 {report['fp32_detections']}, INT8 {report['int8_detections']}; recall {report['recall']:.3f}, precision "
        f"{report['precision']:.3f}, mean IoU {report['mean_iou']:.3f}, mean score drift {report['mean_score_drift']:.4f}"
    )
    for name, camera in report.get("cameras", {}).items():
        console.print(
            f"camera {name}: {camera['frames']} frames; recall {camera['recall']:.3f}, precision {camera['precision']:.3f}, "
            f"mean score drift {camera['mean_score_drift']:.4f}: " + ("[green]PASS[/]" if camera["passed"] else "[bold red]FAIL[/]")
        )
    labels = report.get("labels")
    if labels is not None:  # evaluation.labels: the drop of mAP against FP32 on them
        needed = f"; about {labels['images_needed']} images would settle it" if labels["images_needed"] else ""
        console.print(f"on labels: {labels['detail']}; allowed drop {labels['max_map_drop']:g}: {labels['status']}{needed}", highlight=False)
    for failure in report["failures"]:
        console.print(f"  [bold red]FAIL[/] {failure}")
    console.print("accuracy gate: " + ("[bold green]PASS[/]" if report["passed"] else "[bold red]FAIL[/]"))


FINDING_STYLE = {"ok": "green", "note": "cyan", "warn": "yellow", "blocked": "bold red", "problem": "bold red"}


def render_findings(console: Console, result, headline: str) -> None:
    """A check's findings, one line each (with its hint below where it is not ok), under `headline`."""
    from rich.text import Text

    console.print(Text(headline, style="bold"), soft_wrap=True)
    for finding in result.findings:
        style = FINDING_STYLE[finding.status]
        console.print(Text.assemble("  ", (f"{finding.status:<8}", style), f" {finding.what}: {finding.detail}"), soft_wrap=True)
        if finding.hint and finding.status != "ok":
            console.print(Text(f"{'':11}hint: {finding.hint}"), soft_wrap=True)


def render_status(console: Console, target: str, status: dict) -> None:
    """`sdk status`: the store's answer in a few lines (`--json` prints it whole)."""
    current, committed = status.get("current"), status.get("committed")
    if current is None and committed is None:
        console.print(f"{target}: no release yet (deploy one: deploy --target {target} PIPELINE)")
    elif _fell_back(status):
        console.print(
            f"{target}: release {_fell_back(status)} is running, [bold yellow]fallen back[/]: the committed release {committed} "
            f"failed its check at the start; previous {status.get('previous') or 'none'}",
            highlight=False,
        )
        for note in (status["service"].get("supervisor") or {}).get("notes") or ():
            console.print(f"  [yellow]note[/]: {note}", highlight=False)
    else:
        same = " (committed)" if current == committed else f"; committed {committed or 'none'}"
        console.print(f"{target}: release {current or 'none'} is current{same}; previous {status.get('previous') or 'none'}")
    trial = status.get("trial")
    if trial:
        stale = f", cannot finish: {trial['stale']}" if trial.get("stale") else ""
        console.print(f"  trial in progress: release {trial.get('release')}{stale}")
    last = status.get("last_trial")
    if last:
        console.print(f"  last trial: release {last.get('release')} {last.get('outcome')} at {last.get('at')}: {last.get('reason')}")
    kept = status.get("releases") or []
    console.print(f"  releases kept: {len(kept)}; history (oldest first): {', '.join(status.get('history') or []) or 'none'}")
    lease = status.get("lease")
    console.print(f"  deploy lease: held by {lease['owner']} (token {lease['token']})" if lease else "  deploy lease: free")
    floors = status.get("floors")
    if floors:
        whose = {"root": "root's", "store": "the deploy login's"}
        held = ", ".join(f"{name} v{row['floor']} ({whose.get(row['held_by'], '?')})" for name, row in floors["pipelines"].items())
        console.print(f"  version floor: {held or 'none yet'}; {floors['note']}")
    for damage in status.get("damaged") or ():
        console.print(f"  [yellow]damaged[/]: {damage}")
    service = status.get("service")
    if service:
        pids = ", ".join(f"{k} pid {service[k + '_pid']}" for k in ("supervisor", "runtime") if service.get(k + "_pid"))
        why = f": {service['reason']}" if service.get("reason") else ""
        error = f"; last error: {service['last_error']}" if service.get("last_error") else ""
        console.print(f"  service: {service.get('state')}{' (' + pids + ')' if pids else ''}{why}{error}")


def _fell_back(status: dict) -> str | None:
    """The release the service runs where it is not the committed one (a start that fell back, service.if_damaged)."""
    service = status.get("service") or {}
    running = ((service.get("supervisor") or {}).get("release") or "").rstrip("/").rpartition("/")[2]
    return running if service.get("running") and running and running != status.get("committed") else None


def _service_line(service: dict) -> str:
    pids = ", ".join(f"{k} pid {service[k + '_pid']}" for k in ("supervisor", "runtime") if service.get(k + "_pid"))
    why = f": {service['reason']}" if service.get("reason") else ""
    return f"{service.get('state')}{' (' + pids + ')' if pids else ''}{why}"


def render_service_result(console: Console, target: str, command: str, result: dict) -> None:
    """`sdk rollback | start | stop` in a few lines (`--json` prints the whole answer)."""
    if command == "rollback":
        committed = result.get("committed") or "none"
        console.print(f"{target}: went back one release: {committed} is committed and current", highlight=False)
        console.print(f"  previous now: {result.get('previous') or 'none'}; releases kept: {len(result.get('releases') or [])}", highlight=False)
        unit = result.get("service_unit") or {}
        if unit.get("unit"):
            console.print(f"  the service's unit follows it: {unit['unit']} (sdk start --target {target} runs it)", highlight=False)
        return
    if command == "start":
        if result.get("started"):
            console.print(f"{target}: service started: release {result.get('release')}; {_service_line(result)}", highlight=False)
        else:
            console.print(f"{target}: {result.get('note') or 'not started'}: {_service_line(result)}", highlight=False)
        return
    if result.get("stopped"):
        orphan_pid = result.get("orphan_runtime_stopped")
        orphan = f"; a runtime left by its supervisor (pid {orphan_pid}) stopped too" if orphan_pid else ""
        console.print(f"{target}: service stopped{orphan}", highlight=False)
    else:
        console.print(f"{target}: nothing stopped: {result.get('note') or 'not running'} (service {result.get('state')})", highlight=False)
    if result.get("last_error"):
        console.print(f"  last error: {result['last_error']}", highlight=False)
