"""What every start pays to hash every byte: the example release, and the same release with an offline environment.

    python tests/benchmarks/bench_verify.py [--wheels DIR] [--rounds 7] [--cold] [--smoke]

Deploys the example (`deploy --target local pipelines/pedestrian.yaml --frames 20`) into a temporary state folder
(nothing is left in the checkout), then times `verify_release` on the committed release (median of `--rounds`).
With `--wheels DIR`, a second release is the example plus every wheel in DIR (shipped in `wheels/`, as a device that
lacks them gets them); its offline environment is built, and `verify_release` and `verify_env` are timed on it.
`--cold` times each once more with the page cache dropped first (root only: it writes /proc/sys/vm/drop_caches, which
slows everything else on the machine for a moment). `--smoke`: a tiny release and one tiny wheel, no deploy.
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


def timed(step, rounds: int, cold: bool) -> tuple[float, float | None]:
    """(median warm seconds, cold seconds or None)."""
    step()
    warm = []
    for _ in range(rounds):
        started = time.perf_counter()
        step()
        warm.append(time.perf_counter() - started)
    if cold and drop_caches():
        started = time.perf_counter()
        step()
        return statistics.median(warm), time.perf_counter() - started
    return statistics.median(warm), None


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
    cold_text = f", cold {cold * 1000:.0f} ms" if cold is not None else ""
    print(f"{what}: {count} files, {size / 1e6:.1f} MB: warm {warm * 1000:.1f} ms (median){cold_text}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheels", type=Path, help="a folder of wheels to ship in a second release (its offline environment)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--cold", action="store_true", help="also once with the page cache dropped (root)")
    parser.add_argument("--smoke", action="store_true", help="a tiny release and wheel, one round: only that the script runs")
    args = parser.parse_args()
    if args.smoke:
        return smoke()
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
        report("example release", folder, *timed(lambda: verify_release(folder), args.rounds, args.cold))
        if args.wheels:
            measure(store, release, args.wheels, args.rounds, args.cold)
    finally:
        shutil.rmtree(state, ignore_errors=True)
    return 0


def measure(store: ReleaseStore, release: str, wheels: Path, rounds: int, cold: bool) -> None:
    bigger = with_wheels(store, release, wheels)
    report("with its wheels", store.release_dir(bigger), *timed(lambda: verify_release(store.release_dir(bigger)), rounds, cold))
    report("its offline environment", store.env_dir(bigger), *timed(lambda: verify_env(store.env_dir(bigger)), rounds, cold))


def smoke() -> int:
    import zipfile

    folder = Path(tempfile.mkdtemp(prefix="bench-verify-"))
    try:
        store = ReleaseStore(folder / "root")
        store.ensure()
        files = {}
        for name, data in {"pipeline/p.yaml": b"name: p\n", "artifacts/model.onnx": b"M" * 4096}.items():
            sha = hashlib.sha256(data).hexdigest()
            (folder / sha).write_bytes(data)
            store.add_file(folder / sha, sha)
            files[name] = FileEntry(sha, len(data))
        manifest = ReleaseManifest(files, "pipeline/p.yaml", "artifacts", {})
        with store.locked():
            store.assemble(manifest)
        tiny = store.release_dir(manifest.release_id)
        report("tiny release", tiny, *timed(lambda: verify_release(tiny), 1, False))
        (folder / "wheels").mkdir()
        with zipfile.ZipFile(folder / "wheels" / "tiny-1.0-py3-none-any.whl", "w") as wheel:
            wheel.writestr("tiny.py", "X = 1\n")
        measure(store, manifest.release_id, folder / "wheels", 1, False)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


def sha_rate() -> float:
    data = os.urandom(64 << 20)
    started = time.perf_counter()
    hashlib.sha256(data).digest()
    return 64 * 1.048576 / (time.perf_counter() - started)


if __name__ == "__main__":
    raise SystemExit(main())
