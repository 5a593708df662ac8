"""The handlers of the commands that act on targets: `sdk deploy`, `validate`, `targets ...`, `export`, `selftest`, and
the store and service commands (`rollback`, `status`, `start`, `stop`, `logs`)."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console


def deploy_command(args: argparse.Namespace, console: Console) -> int:
    from sdk.spec import load_pipeline
    from tools.console import RichProgress, render_fleet, render_report
    from tools.deploy.fleet import FleetResult
    from tools.deploy.flow import Deploy
    from tools.reports.report_dirs import check_report_dir, default_report_dir, empty_report_dir, update_latest

    # The report folder is settled before anything runs: a run of its own, or an empty named one.
    pipeline = load_pipeline(args.pipeline)  # a bad file is refused before --force empties anything
    if args.report_dir is None:
        report_dir = default_report_dir(pipeline, args.target, "deploy").resolve()
    else:
        report_dir = check_report_dir(args.report_dir, args.force)
        if args.force:
            empty_report_dir(report_dir)
    with RichProgress(console) as progress:
        deploy = Deploy(
            args.pipeline,
            args.target,
            frames=args.frames,
            report_dir=report_dir,
            progress=progress,
            parallel=args.parallel,
            canary=args.canary,
            sign_key=args.sign_key,
            live_view=args.live_view,
        )
        result = deploy()
    if args.report_dir is None:
        update_latest(report_dir)
    if isinstance(result, FleetResult):
        render_fleet(console, result)
    else:
        from tools.perf.summary import render_top_layers
        from tools.targets import resolve_target

        render_report(console, result.report, result.report_dir, result.staged)
        render_top_layers(console, result, resolve_target(args.target))
    return result.exit_code


def validate_command(args: argparse.Namespace, console: Console) -> int:
    from tools.console import RichProgress, render_fleet, render_report
    from tools.deploy.fleet import FleetResult
    from tools.validation.validate import Validate

    with RichProgress(console) as progress:
        validate = Validate(
            args.pipeline,
            args.target,
            frames=args.frames,
            report_dir=args.report_dir,
            repeat=args.repeat,
            stress=args.stress,
            deploy=args.deploy,
            progress=progress,
            force=args.force,
            parallel=args.parallel,
            canary=args.canary,
        )
        result = validate()
    if isinstance(result, FleetResult):
        render_fleet(console, result)
    else:
        render_report(console, result.report, result.report_dir, result.staged)
    return result.exit_code


def targets_command(args: argparse.Namespace, console: Console) -> int:
    import json

    from tools.targets import known_targets, resolve_target, targets_dir

    if args.targets_command == "list":
        for name in known_targets():
            console.print(name)
    elif args.targets_command == "probe":
        from tools.connect.remote_ops import probe

        console.print_json(json.dumps(probe(resolve_target(args.target))))
    elif args.targets_command == "add":
        return targets_add_command(args, console)
    elif args.targets_command == "check":
        return targets_check_command(args, console)
    elif args.targets_command == "trust-key":
        from tools.connect.trust_key import trust_key

        if (args.key is None) == (args.revoke is None):
            from sdk.errors import ConfigError

            raise ConfigError("trust-key needs a key to trust, or --revoke FINGERPRINT (one of them)", hint="sdk targets trust-key T KEY.pub")
        result = trust_key(resolve_target(args.target), args.key, args.signed_by, args.revoke)
        keys = ", ".join(f"{name} {fp}".strip() for fp, name in result["keys"].items())
        what = f"revoked {result['revoked_key']}" if args.revoke else f"trusts {result['trusted']}"
        console.print(f"{args.target} {what}; it accepts only releases signed by: {keys} ({result['source']})", highlight=False)
    elif args.targets_command == "sim":
        from sdk.errors import TargetError
        from tools.state import state_dir
        from tools.targets.sim import SimServer, is_sim_file

        server = SimServer(state_dir() / "sim")
        path = targets_dir() / "sim.yaml"
        if path.exists() and not is_sim_file(path):
            raise TargetError(f"{path} is not a simulated target's file; not touched", hint="rename that target, or set SDK_TARGETS_DIR")
        server.stop()
        if args.stop:
            path.unlink(missing_ok=True)  # the target file names a server that is gone
            console.print(f"simulated target stopped; {path} removed", markup=False, soft_wrap=True)
            return 0
        server.start()
        path = server.write_target(path)
        console.print(f"simulated target on 127.0.0.1:{server.port} (sshd pid {server.pid}); target file {path}")
        console.print("deploy to it with: deploy --target sim PIPELINE; stop it with: sdk targets sim --stop")
    return 0


def export_command(args: argparse.Namespace, console: Console) -> int:
    from sdk.errors import ConfigError

    if args.pipeline is None and args.mender_module is None and args.root_tool is None:
        raise ConfigError("nothing to export", hint="give PIPELINE --target T --mender OUT.mender, --mender-module DIR or --root-tool DIR")
    if args.pipeline is not None:
        from tools.console import RichProgress
        from tools.deploy.export import ExportMender

        if args.target is None or args.mender is None:
            raise ConfigError("exporting a pipeline needs --target and --mender", hint="sdk export PIPELINE --target T --mender OUT.mender")
        with RichProgress(console) as progress:
            result = ExportMender(args.pipeline, args.target, args.mender, sign_key=args.sign_key, progress=progress)()
        signed = ("artifact signed" if result.artifact_signed else "artifact unsigned") + (", manifest signed" if result.manifest_signed else "")
        console.print(
            f"release {result.release_id} ({result.files} files, {result.objects} objects) as {result.path}: artifact {result.artifact_name}, "
            f"device type {result.device_type}, {signed}",
            highlight=False,
        )
    if args.mender_module is not None:
        from tools.deploy.export import MODULE_DIR, module_settings, write_module

        settings = module_settings(args.target, args.root, args.python)
        module, config = write_module(args.mender_module, **settings)
        console.print(f"update module {module} (runs {settings['python']}); install it as {MODULE_DIR}/{module.name}", highlight=False)
        console.print(f"its configuration {config} (store {settings['root']}); install it as /etc/mender/{config.name}", highlight=False)
    if args.root_tool is not None:
        from tools.deploy.export import ROOT_TOOL_DIR, module_settings, write_root_tool

        python = module_settings(args.target, None, args.python)["python"]
        tool, digest = write_root_tool(args.root_tool, python=python)
        console.print(f"root's copy of the SDK {tool} (runs {python} -I), sha256 {digest}", highlight=False, soft_wrap=True)
        step = f"install -o root -g root -m 0755 {tool.name} {ROOT_TOOL_DIR}/{tool.name}"
        console.print(f"install it on the device as root: {step}", highlight=False, soft_wrap=True)
    return 0


def targets_add_command(args: argparse.Namespace, console: Console) -> int:
    from tools.connect.add_target import AddTarget

    def show(key) -> None:
        # Never wrapped: a fingerprint is compared character by character.
        console.print(f"host key of {args.host}:{args.port}: {key.key_type} {key.fingerprint}", markup=False, highlight=False, soft_wrap=True)
        console.print("compare it with the device's own (on it: ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub)", markup=False, soft_wrap=True)

    def confirm(key) -> bool:
        try:
            return input(f"pin this key for {args.name}? [y/N] ").strip().lower() in ("y", "yes")
        except EOFError:
            return False

    on_terminal = sys.stdin is not None and sys.stdin.isatty()
    add = AddTarget(args.name, args.host, args.user, args.key, args.platform, args.port, args.remote_root, args.fingerprint)
    add.confirm, add.on_key = (confirm if on_terminal else None), show
    added = add()
    console.print(f"wrote {added.path} (host key {added.host_key.fingerprint} pinned in {added.known_hosts.name})", markup=False, soft_wrap=True)
    console.print(f"next: sdk targets check {args.name}", markup=False, highlight=False, soft_wrap=True)
    return 0


def targets_check_command(args: argparse.Namespace, console: Console) -> int:
    from rich.text import Text

    from tools.connect.check_target import check_target
    from tools.console import render_findings
    from tools.targets import resolve_target

    result = check_target(resolve_target(args.target))
    render_findings(console, result, f"{result.target} ({result.where})")
    blocking = result.blocking
    if not blocking:
        console.print(Text(f"nothing blocks a deploy to {result.target}", style="bold green"), soft_wrap=True)
        return 0
    what = ", ".join(f.what for f in blocking)
    console.print(Text(f"{len(blocking)} problem(s) block a deploy to {result.target}: {what}", style="bold red"), soft_wrap=True)
    return 1


def store_command(args: argparse.Namespace, console: Console) -> int:
    import json

    from tools.connect.remote_ops import store_command
    from tools.targets import resolve_target

    result = store_command(resolve_target(args.target), args.command)
    if args.json:
        console.print_json(json.dumps(result))
    elif args.command == "status":
        from tools.console import render_status

        render_status(console, args.target, result)
    else:
        from tools.console import render_service_result

        render_service_result(console, args.target, args.command, result)
    return 0


def service_command(args: argparse.Namespace, console: Console) -> int:
    import json

    from tools.connect.remote_ops import service_command
    from tools.targets import resolve_target

    extra = ["--lines", str(args.lines)] if args.command == "logs" else []
    result = service_command(resolve_target(args.target), args.command, *extra)
    if args.command == "logs":
        for line in result["lines"]:
            console.print(line, highlight=False, markup=False)
    else:
        if result.get("plan"):  # what the service will do, and when it ends (a replay ends with its clip)
            sys.stderr.write(f"{args.target}: {result['plan']}\n")
        for note in result.get("notes") or ():  # damage found, a repair that waits, a fallback taken
            sys.stderr.write(f"{args.target}: note: {note}\n")
        if args.json:
            console.print_json(json.dumps(result))
        else:
            from tools.console import render_service_result

            render_service_result(console, args.target, args.command, result)
    return 0


def selftest_command(args: argparse.Namespace, console: Console) -> int:
    from rich.table import Table

    from sdk.errors import EXIT_BUDGET_FAIL, EXIT_INCONCLUSIVE, EXIT_PASS
    from tools.targets import resolve_target
    from tools.validation.selftest import selftest

    result = selftest(resolve_target(args.target), deadline_s=args.tests_deadline, report_dir=args.report_dir)
    from tools.history.hook import finished

    finished(args.report_dir, "selftest", result=None if args.report_dir is not None else {"target": args.target, **result})
    table = Table(title=f"selftest of release {result['release']} on {args.target}")
    for column in ("check", "status", "detail"):
        table.add_column(column)
    style = {"PASS": "bold green", "FAIL": "bold red", "SKIP": "yellow", "N/A": "dim"}
    for check in result["checks"]:
        table.add_row(check["name"], f"[{style[check['status']]}]{check['status']}[/]", check["detail"], end_section=check["name"] == "gpu_tests")
        outcome_style = {"passed": "green", "failed": "bold red", "error": "bold red", "skipped": "yellow"}
        for test in check.get("tests", []):  # the gpu tests, one row each
            table.add_row(f"  {test['name']}", f"[{outcome_style[test['outcome']]}]{test['outcome']}[/]", test["reason"])
    console.print(table)
    if args.report_dir is not None:
        sys.stderr.write(f"report: {args.report_dir}\n")
    statuses = {check["status"] for check in result["checks"]}
    if "FAIL" in statuses:
        return EXIT_BUDGET_FAIL
    return EXIT_INCONCLUSIVE if "SKIP" in statuses else EXIT_PASS  # a check skipped for lack of hardware proves nothing


__all__ = [
    "deploy_command",
    "export_command",
    "selftest_command",
    "service_command",
    "store_command",
    "targets_add_command",
    "targets_check_command",
    "targets_command",
    "validate_command",
]
