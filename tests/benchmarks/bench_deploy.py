"""Benchmark: deploy over real SSH on loopback (simulated targets), ratios from one run.

1. Upload of a 50 MB release (5 files) through the SDK (one stream into the device agent, each file
   hashed while written, fsynced and renamed on the device) vs OpenSSH `scp -r` of the same files to the
   same server, side by side in each round. Target: >= 1.0x scp's speed, verification included.
2. Redeploy with nothing changed: connect, agent, probe, lock, compare, nothing sent. Target: < 1.0 s, 0 bytes.
3. Fleet staging (connect, agent, lock, send, verify, assemble) on 1, 2, 4, 8, 16 simulated targets at once:
   wall time, host CPU time, file bytes sent. Target: 8 <= 2x the time of one. The full deploy (trial with a
   health check of the real model) of 8 vs 1 is reported apart: eight devices' checks share this machine.

    python tests/benchmarks/bench_deploy.py [--smoke] [--part upload|redeploy|fleet] [--counts 1,8] [--redeploys N] [--stage-rounds N]

`--smoke`: 0.3 MB uploaded once; the redeploy and the staging table (one row: 1 target) on the tests' tiny pipeline,
without the waits for the devices' processes to end before their CPU is read.

Other jobs on this machine load the same two cores: note `uptime`'s load average (printed first) beside every number.
"""

from __future__ import annotations

import argparse
import getpass
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.benchmarks.smoke import tiny_pipeline  # noqa: E402
from tools.connect.sessions import open_session  # noqa: E402
from tools.deploy.fleet import deploy_fleet  # noqa: E402
from tools.deploy.flow import install_release  # noqa: E402
from tools.models.prepare import PrepareModel  # noqa: E402
from tools.progress import SilentProgress  # noqa: E402
from tools.release.bundle import Bundle, collect_bundle, runtime_files  # noqa: E402
from tools.release.stage import manifest_for, stage_release  # noqa: E402
from tools.targets import resolve_target  # noqa: E402
from tools.targets.sim import SimServer  # noqa: E402


def manifest_size(manifest) -> int:
    return sum(e.size for e in manifest.files.values())


class _NoTask:
    def advance(self, amount: float = 1) -> None:
        pass


def upload_vs_scp(work: Path, sizes: tuple[int, ...] = (20_000_000, 15_000_000, 10_000_000, 4_000_000, 1_000_000), rounds: int = 3) -> None:
    files = {}
    for k, size in enumerate(sizes):
        path = work / f"blob{k}.bin"
        path.write_bytes(os.urandom(size))
        files[f"artifacts/blob{k}.bin"] = path
    bundle = Bundle(files, "pipeline/none.yaml", "artifacts", {})
    manifest = manifest_for(bundle)
    total = sum(p.stat().st_size for p in files.values())
    sdk_times, scp_times = [], []
    for round_ in range(rounds):
        with SimServer(work / f"up{round_}") as server:
            server.write_target(work / "targets" / "bench.yaml", remote_root=str(work / f"root{round_}"))
            target = resolve_target("bench")
            with open_session(target) as session:
                session.ensure_agent(runtime_files())
                session.lock("bench")
                session.prepare()
                objects = {e.sha256: (e.size, files[name]) for name, e in manifest.files.items()}
                started = time.perf_counter()
                sent = session.upload(objects, _NoTask())  # streamed, hashed while written, fsynced, renamed
                uploaded = time.perf_counter()
                session.assemble(manifest)
                session.unlock("bench")
            sdk_times.append(uploaded - started)
            assert sent == total
            dest = work / f"scp{round_}"
            source = work / "blobs"
            source.mkdir(exist_ok=True)
            for path in files.values():
                if not (source / path.name).exists():
                    os.link(path, source / path.name)
            started = time.perf_counter()
            subprocess.run(
                [
                    "scp",
                    "-q",
                    "-B",
                    "-i",
                    str(server.client_key),
                    "-o",
                    f"UserKnownHostsFile={server.known_hosts}",
                    "-o",
                    "StrictHostKeyChecking=yes",
                    "-P",
                    str(server.port),
                    "-r",
                    str(source),
                    f"{getpass.getuser()}@127.0.0.1:{dest}",
                ],
                check=True,
            )
            scp_times.append(time.perf_counter() - started)
            shutil.rmtree(work / f"root{round_}", ignore_errors=True)
    sdk_s, scp_s = (statistics.median(t) for t in (sdk_times, scp_times))
    ratios = [scp / sdk for scp, sdk in zip(scp_times, sdk_times, strict=True)]
    print(
        f"upload {total / 1e6:.0f} MB (median of {rounds}, side by side): sdk {sdk_s:.2f} s = {total / sdk_s / 1e6:.0f} MB/s "
        f"(one stream, sha256 while written, fsync + rename on the device), scp -r {scp_s:.2f} s = {total / scp_s / 1e6:.0f} MB/s "
        f"(incl. its connect, no hash, no fsync); sdk speed = {statistics.median(ratios):.2f}x scp "
        f"(rounds: {', '.join(f'{r:.2f}' for r in ratios)}; target >= 1.0x)"
    )


def redeploy_and_fleet(
    work: Path,
    fleet: int = 8,
    counts: tuple[int, ...] = (1, 2, 4, 8, 16),
    *,
    redeploys: int = 1,
    full_fleet: bool = True,
    staging: bool = True,
    stage_rounds: int = 1,
    pipeline_path: Path = REPO / "pipelines" / "pedestrian.yaml",
    settle: bool = True,
) -> None:
    """`settle`: wait for the devices' session processes to end before reading their CPU (the smoke mode does not: its
    numbers mean nothing)."""
    from sdk.spec import load_pipeline

    pipeline = load_pipeline(pipeline_path)
    prepare = PrepareModel(pipeline, work / "cache")
    bundle = collect_bundle(pipeline, prepare(), prepare.key)
    manifest = manifest_for(bundle)
    servers = [SimServer(work / f"fleet{k}").start() for k in range(max(fleet, *counts) if staging else fleet)]
    try:
        for k, server in enumerate(servers):
            server.write_target(work / "targets" / f"v{k}.yaml", remote_root=str(work / f"froot{k}"))
        targets = [resolve_target(f"v{k}") for k in range(len(servers))]

        def install(session, target):
            return install_release(session, target, bundle, SilentProgress())

        def no_run(session, release, folder):
            return {"verdict": "PASS"}

        started = time.perf_counter()
        deploy_fleet(targets[:1], install, no_run, None, work / "r1", SilentProgress(), parallel=1, canary=False)
        one = time.perf_counter() - started
        agains, device_cpu, host_cpu = [], [], []
        for _ in range(redeploys):
            device, cpu, started = _device_cpu(servers[0]), time.process_time(), time.perf_counter()
            with open_session(targets[0]) as session:
                staged = install(session, targets[0])
            agains.append(time.perf_counter() - started)
            host_cpu.append(time.process_time() - cpu)
            time.sleep(0.3 if settle else 0)  # the device's processes of that session end and are counted
            device_cpu.append(_device_cpu(servers[0]) - device)
        again = statistics.median(agains)
        print(
            f"redeploy with nothing changed: {again:.2f} s (median of {redeploys}: {', '.join(f'{t:.2f}' for t in agains)}), "
            f"{staged.bytes_sent} bytes of file data sent (target < 1.0 s, 0 bytes); CPU: host {statistics.median(host_cpu):.2f} s, "
            f"device {statistics.median(device_cpu):.2f} s (sshd and every process it started); load {_load()}"
        )
        eight = one  # a fleet of one (--smoke) is the first deploy
        if fleet > 1 and full_fleet:
            started = time.perf_counter()
            shutil.rmtree(work / "froot0")  # make the first target fresh again: all of them fresh at once
            result = deploy_fleet(targets, install, no_run, None, work / "r8", SilentProgress(), parallel=fleet, canary=False)
            eight = time.perf_counter() - started
            assert result.exit_code == 0, [o.error for o in result.outcomes]

        sent_bytes: list[int] = []

        def stage_only(session, target):  # the fleet's session holds the deploy lease already (tools/connect/sessions.py)
            staged = stage_release(session, bundle, manifest_for(bundle))
            sent_bytes.append(staged.bytes_sent)
            return staged

        if not staging:
            return
        print(
            f"fleet: full deploy incl. trial + health check: one target {one:.2f} s, {fleet} at once {eight:.2f} s = {eight / one:.2f}x one "
            f"(each a 5-frame health check of the real model, all sharing this {os.cpu_count()}-core machine)"
        )
        print(f"fleet, staging only (connect, agent, lock, send {manifest_size(manifest) / 1e6:.1f} MB, verify, assemble), fresh targets:")
        print("| targets | wall time | x one | host CPU | host CPU per added target | device CPU per target | file bytes sent | load |")
        print("|---:|---:|---:|---:|---:|---:|---:|---|")
        rows = {}
        for count in counts:
            walls, cpus, device_cpus = [], [], []
            for _ in range(stage_rounds):
                for k in range(count):
                    shutil.rmtree(work / f"froot{k}", ignore_errors=True)
                sent_bytes.clear()
                devices = [_device_cpu(server) for server in servers[:count]]
                cpu, started = time.process_time(), time.perf_counter()
                result = deploy_fleet(targets[:count], stage_only, no_run, None, work / f"s{count}", SilentProgress(), parallel=count, canary=False)
                walls.append(time.perf_counter() - started)
                cpus.append(time.process_time() - cpu)
                assert result.exit_code == 0, [o.error for o in result.outcomes]
                time.sleep(0.5 if settle else 0)  # the devices' session processes end and are counted
                device_cpus.append(sum(_device_cpu(server) - before for server, before in zip(servers[:count], devices, strict=True)) / count)
            wall, cpu, device = (statistics.median(values) for values in (walls, cpus, device_cpus))
            rows[count] = (wall, cpu)
            one_wall, one_cpu = rows[counts[0]]
            per = f"{(cpu - one_cpu) / (count - 1):.2f} s" if count > 1 else "-"
            spread = f" ({min(walls):.2f}-{max(walls):.2f})" if stage_rounds > 1 else ""
            sent = f"{sum(sent_bytes) / 1e6:.1f} MB"
            print(f"| {count} | {wall:.2f} s{spread} | {wall / one_wall:.2f}x | {cpu:.2f} s | {per} | {device:.2f} s | {sent} | {_load()} |")
    finally:
        for server in servers:
            server.stop()


def _device_cpu(server) -> float:
    """CPU seconds of a simulated device's finished sessions: its sshd's reaped children (the session's sshd, the
    agent, every process they started), read from the kernel (/proc/PID/stat cutime + cstime)."""
    fields = Path(f"/proc/{server.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


def _load() -> str:
    return " ".join(f"{value:.1f}" for value in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="one short round with tiny sizes: proves the script runs (CI); its numbers mean nothing")
    parser.add_argument("--part", choices=("all", "upload", "redeploy", "fleet"), default="all", help="run one part only")
    parser.add_argument("--counts", default="1,2,4,8,16", help="fleet sizes for the staging table (comma list; the first is the reference)")
    parser.add_argument("--redeploys", type=int, default=3, help="no-change redeploys measured (the median is reported)")
    parser.add_argument("--stage-rounds", type=int, default=1, help="staging rounds per fleet size (the median is reported, the range beside it)")
    args = parser.parse_args()
    counts = tuple(int(c) for c in args.counts.split(","))
    print(f"load average before: {_load()} ({os.cpu_count()} cores)")
    work = Path(tempfile.mkdtemp(prefix="bench-deploy-"))
    os.environ["SDK_TARGETS_DIR"] = str(work / "targets")
    os.environ["SDK_STATE_DIR"] = str(work / "state")
    try:
        if args.smoke:
            upload_vs_scp(work, (200_000, 100_000), rounds=1)
            # The staging table's one row of 1 target (the reference row): the first target, made fresh, staged again; one
            # simulated device serves the whole smoke run (a second one's sshd and agent session measured nothing new)
            redeploy_and_fleet(work, fleet=1, counts=(1,), pipeline_path=tiny_pipeline(work / "tiny"), settle=False)
        else:
            if args.part in ("all", "upload"):
                upload_vs_scp(work)
            if args.part != "upload":
                redeploy_and_fleet(
                    work,
                    fleet=8 if args.part == "all" else 1,
                    counts=counts,
                    redeploys=args.redeploys,
                    full_fleet=args.part == "all",
                    staging=args.part != "redeploy",
                    stage_rounds=args.stage_rounds,
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
