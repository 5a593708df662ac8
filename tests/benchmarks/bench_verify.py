"""What every start pays to hash every byte: the example release, and the same release with an offline environment.

    python tests/benchmarks/bench_verify.py [--wheels DIR] [--rounds 7]

Deploys the example (`deploy --target local pipelines/pedestrian.yaml --frames 20`) into a temporary state folder
(nothing is left in the checkout), then times `verify_release` on the committed release (median of `--rounds`).
With `--wheels DIR`, a second release is the example plus every wheel in DIR (shipped in `wheels/`, as a device that
lacks them gets them); its offline environment is built, and `verify_release` and `verify_env` are timed on it. Both
are timed cold too (the page cache of the files dropped first, root only) where /proc/sys/vm/drop_caches is writable.
"""

from __future__ import annotations

import argparse
import hashlib
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

from sdk.release import MANIFEST, FileEntry, ReleaseManifest  # noqa: E402
from sdk.store.objects import ReleaseStore  # noqa: E402
from sdk.store.offline_env import verify_env  # noqa: E402
from sdk.store.verify import verify_release  # noqa: E402


def drop_caches() -> bool:
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def timed(step, rounds: int) -> tuple[float, float | None]:
    """(median warm seconds, cold seconds or None)."""
    step()
    warm = []
    for _ in range(rounds):
        started = time.perf_counter()
        step()
        warm.append(time.perf_counter() - started)
    cold = None
    if drop_caches():
        started = time.perf_counter()
        step()
        cold = time.perf_counter() - started
    return statistics.median(warm), cold


def size_of(folder: Path) -> tuple[int, int]:
    files = [p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()]
    return len(files), sum(p.stat().st_size for p in files)


def with_wheels(store: ReleaseStore, release: str, wheels: Path) -> str:
    """The committed release plus every wheel in `wheels`, assembled beside it (the store's own objects)."""
    manifest = ReleaseManifest.load(store.release_dir(release))
    files = dict(manifest.files)
    for wheel in sorted(wheels.glob("*.whl")):
        sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
        store.add_file(wheel, sha)
        files[f"wheels/{wheel.name}"] = FileEntry(sha, wheel.stat().st_size)
    bigger = ReleaseManifest(files, manifest.pipeline, manifest.artifacts, manifest.fingerprint)
    with store.locked():
        store.assemble(bigger)
    store.build_env(bigger.release_id)
    return bigger.release_id


def report(what: str, folder: Path, warm: float, cold: float | None) -> None:
    count, size = size_of(folder)
    cold_text = f", cold {cold * 1000:.0f} ms" if cold is not None else ", cold: not measured (drop_caches not writable)"
    print(f"{what}: {count} files, {size / 1e6:.1f} MB: warm {warm * 1000:.1f} ms (median){cold_text}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheels", type=Path, help="a folder of wheels to ship in a second release (its offline environment)")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    state = Path(tempfile.mkdtemp(prefix="bench-verify-"))
    try:
        env = {**os.environ, "SDK_STATE_DIR": str(state / "state"), "PYTHONPATH": str(REPO)}
        deploy = "import sys; from tools.cli import deploy_main; sys.argv[0] = 'deploy'; sys.exit(deploy_main())"
        command = [sys.executable, "-c", deploy, "--target", "local", "pipelines/pedestrian.yaml", "--frames", "20"]
        done = subprocess.run([*command, "--report-dir", str(state / "reports")], cwd=REPO, env=env, capture_output=True, text=True)
        if done.returncode not in (0, 3, 4):  # a PASS, FAIL or INCONCLUSIVE verdict: the release was committed either way
            print(done.stdout[-2000:], done.stderr[-2000:], file=sys.stderr)
            return 1
        store = ReleaseStore(state / "state" / "targets" / "local")
        release = store.committed()
        folder = store.release_dir(release)
        assert (folder / MANIFEST).is_file()
        print(f"sha256 of this Python: {sha_rate():.0f} MB/s; load {os.getloadavg()[0]:.1f}; {os.cpu_count()} CPUs")
        report("example release", folder, *timed(lambda: verify_release(folder), args.rounds))
        if args.wheels:
            bigger = with_wheels(store, release, args.wheels)
            report("with its wheels", store.release_dir(bigger), *timed(lambda: verify_release(store.release_dir(bigger)), args.rounds))
            report("its offline environment", store.env_dir(bigger), *timed(lambda: verify_env(store.env_dir(bigger)), args.rounds))
    finally:
        shutil.rmtree(state, ignore_errors=True)
    return 0


def sha_rate() -> float:
    data = os.urandom(64 << 20)
    started = time.perf_counter()
    hashlib.sha256(data).digest()
    return 64 * 1.048576 / (time.perf_counter() - started)


if __name__ == "__main__":
    raise SystemExit(main())
