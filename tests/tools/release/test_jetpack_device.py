"""A release installs on a JetPack-shaped aarch64 device without replacing its numpy or OpenCV (issue 21 item 6).

The device: Debian's arm64 Python unpacked into a folder and run through qemu-user (`qemu-aarch64-static -L ROOT`),
reached over a real sshd (`sdk targets sim` with `python:` pointing at it). Its system site-packages hold what a
JetPack 6 device has and keeps, at JetPack-like versions where aarch64 wheels exist for Debian's Python 3.11: numpy 1.x,
an OpenCV built against numpy 1.x (opencv-python-headless 4.9.0.80, whose pip metadata is removed: JetPack's own
OpenCV has none, only cv2/version.py) and PyYAML. JetPack's exact numpy 1.21.5 and PyYAML 5.4.1 have no wheels for
Python 3.11; the unit tests (test_wheel_plan.py) hold those versions. ONNX Runtime reads /proc/cpuinfo to know its CPU
and crashes on an x86 one under emulation, so the device folder carries an ARM stand-in (Orin's Cortex-A78AE), which
qemu's `-L` prefix serves in place of the host's.

Before the fix the offline wheels carried numpy 2 (onnxruntime's dependency), the release's environment put it in front
of the system's numpy, OpenCV failed to import, and the health check rolled the release back: the release passing its
health check here is that fix's proof.

The device folder is built once (Debian packages and wheels downloaded, about 60 MB) and cached outside the checkout
(SDK_TEST_CACHE or ~/.cache/perception-sdk-tests); without the network, arm64 apt lists or qemu the test skips
and says which.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

from sdk.probe import PIPELINE_MODULES
from sdk.release import ReleaseManifest
from sdk.spec.loader import load_pipeline
from tools.connect.sessions import open_session
from tools.deploy.flow import health_policy, install_release
from tools.models.prepare import PrepareModel
from tools.progress import SilentProgress
from tools.release.bundle import collect_bundle
from tools.state import cache_dir
from tools.targets import resolve_target

REPO = Path(__file__).resolve().parents[3]
PYTHON = "3.11"  # Debian 12's; the emulated device's Python
ARM64_DEBS = (
    f"python{PYTHON}-minimal",
    f"libpython{PYTHON}-minimal",
    f"libpython{PYTHON}-stdlib",
    "libc6",
    "libgcc-s1",
    "libstdc++6",
    "zlib1g",
    "libexpat1",
    "libssl3",
    "libffi8",
    "libbz2-1.0",
    "liblzma5",
    "libuuid1",
    "libcrypt1",
    "libsqlite3-0",
)
# The device's own packages, the JetPack-shaped part: numpy 1.x and an OpenCV compiled against numpy 1.x.
SYSTEM_WHEELS = ("numpy==1.26.4", "opencv-python-headless==4.9.0.80", "pyyaml==6.0.1")
AARCH64_PLATFORMS = ("manylinux2014_aarch64", "manylinux_2_17_aarch64", "manylinux_2_28_aarch64", "manylinux_2_31_aarch64")
# Two cores of an AGX Orin (ARM Cortex-A78AE, part 0xd42), as its kernel lists them.
CPUINFO = "".join(
    f"processor\t: {n}\nBogoMIPS\t: 62.50\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm "
    "lrcpc dcpop asimddp uscat ilrcpc flagm paca pacg\nCPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x0\n"
    "CPU part\t: 0xd42\nCPU revision\t: 1\n\n"
    for n in range(2)
)
SYSTEM_SITE = "usr/lib/python3/dist-packages"  # Debian's (and Ubuntu's, JetPack's) site for the distribution's packages
QEMU_CPU = "cortex-a76"


def _cache_root() -> Path:
    return Path(os.environ.get("SDK_TEST_CACHE") or Path.home() / ".cache" / "perception-sdk-tests")


def _build_device(folder: Path, qemu: str) -> None:
    debs, wheels, root = folder / "debs", folder / "wheels", folder / "root"
    for path in (debs, wheels, root):
        path.mkdir(parents=True)
    done = subprocess.run(["apt-get", "download", "-q", *(f"{name}:arm64" for name in ARM64_DEBS)], cwd=debs, capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["apt-get failed"])[-1]
        pytest.skip(
            f"needs Debian's arm64 packages, downloaded once with apt-get and kept in {_cache_root()} ($SDK_TEST_CACHE): "
            f"cannot download them ({last}); run once with the network"
        )
    for deb in sorted(debs.glob("*.deb")):
        subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    platforms = [option for platform in AARCH64_PLATFORMS for option in ("--platform", platform)]
    done = subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--only-binary=:all:", "--no-deps"]
        + ["--implementation", "cp", "--python-version", PYTHON, "--abi", f"cp{PYTHON.replace('.', '')}", *platforms, "-d", str(wheels)]
        + list(SYSTEM_WHEELS),
        capture_output=True,
        text=True,
        env={**os.environ, "PIP_NO_INPUT": "1"},
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["pip download failed"])[-1]
        pytest.skip(
            f"needs the device's aarch64 wheels, downloaded once from PyPI and kept in {_cache_root()} ($SDK_TEST_CACHE): "
            f"cannot download them ({last}); run once with PyPI reachable"
        )
    site = root / SYSTEM_SITE
    site.mkdir(parents=True)
    for wheel in sorted(wheels.glob("*.whl")):
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(site)
    for metadata in site.glob("opencv_python_headless-*.dist-info"):
        shutil.rmtree(metadata)  # JetPack's OpenCV is installed by a .deb: no pip metadata, only cv2/version.py
    (root / "proc").mkdir()
    (root / "proc" / "cpuinfo").write_text(CPUINFO)


def _compile_device(folder: Path) -> None:
    """Byte-compile the device's own modules (Python's standard library, numpy, OpenCV, PyYAML), as a device has them:
    Debian's and JetPack's packages compile theirs when installed (py3compile, which `dpkg-deb -x` does not run), pip
    what it installs. Without the bytecode every emulated start (the store, the service, the health check: all
    `python -B`) compiled again each module it imported, under qemu: 6.1 CPU-s for the imports a store command makes,
    1.4 with it (measured). Python's bytecode is the same on every architecture: the host's Python compiles it where
    it is the device's version (CI's Debian 12 python3 is), else the device's Python, emulated."""
    root = folder / "root"
    folders = [str(root / "usr" / "lib" / f"python{PYTHON}"), str(root / SYSTEM_SITE)]
    if f"{sys.version_info[0]}.{sys.version_info[1]}" == PYTHON:
        command = [sys.executable, "-m", "compileall", "-q", "-j", "0", *folders]
    else:
        command = [str(root / "usr" / "bin" / "python3"), "-m", "compileall", "-q", *folders]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, f"{' '.join(command[:4])}: {(done.stdout + done.stderr)[-2000:]}"
    (folder / "COMPILED").write_text(f"{PYTHON}\n")


def _write_interpreter(root: Path, qemu: str) -> Path:
    """ROOT/usr/bin/python3: the device's python3. `-0 "$0"` hands Python the path it was started as, so a venv
    made from it (a symlink to this file) finds its pyvenv.cfg, as on a real device. `-cpu`: the emulated CPU is an
    ARMv8.2-A core with dot product, as Orin's Cortex-A78AE is (qemu's nearest model); qemu's default `max` also
    offers SVE and SME, which no Orin has, and ONNX Runtime's kernels for those run ~10x slower emulated (measured:
    65 s against 5 s for one run of the example detector)."""
    python = root / "usr" / "bin" / "python3"
    python.write_text(f'#!/bin/sh\nexec {qemu} -cpu {QEMU_CPU} -L {root} -0 "$0" {root}/usr/bin/python{PYTHON} "$@"\n')
    python.chmod(0o755)
    return python


@pytest.fixture(scope="session")
def jetpack_device() -> Path:
    """The device folder's python3, built once and cached by its recipe."""
    qemu = shutil.which("qemu-aarch64-static")
    if qemu is None:
        pytest.skip("not installed: qemu-aarch64-static (apt-get install qemu-user-static; .ci/run does)")
    if "arm64" not in subprocess.run(["dpkg", "--print-foreign-architectures"], capture_output=True, text=True).stdout.split():
        pytest.skip("Debian's arm64 packages are not known to apt (dpkg --add-architecture arm64 && apt-get update; .ci/run does)")
    recipe = json.dumps([ARM64_DEBS, SYSTEM_WHEELS, CPUINFO, 1]).encode()
    final = _cache_root() / f"jetpack6-aarch64-{hashlib.sha256(recipe).hexdigest()[:12]}"
    if not (final / "COMPLETE").is_file():
        final.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
        try:
            _build_device(staging, qemu)
            (staging / "COMPLETE").write_text("\n".join([*ARM64_DEBS, *SYSTEM_WHEELS]) + "\n")
            shutil.rmtree(final, ignore_errors=True)
            os.replace(staging, final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    python = _write_interpreter(final / "root", qemu)  # the wrapper names the final folder and this host's qemu
    if not (final / "COMPILED").is_file():  # also a folder cached before the device had its bytecode
        _compile_device(final)
    return python


def _install(pipeline_path: Path):
    """The deploy's install step (probe, wheels, stage, offline environment, device-owned health check, commit),
    without the validation run that follows it in `deploy`: the emulated CPU is ~20x slower than the host's."""
    pipeline = load_pipeline(pipeline_path)
    prepare = PrepareModel(pipeline, cache_dir())
    artifacts = prepare()
    base = collect_bundle(pipeline, artifacts, prepare.key, None)
    target = resolve_target("sim")
    with open_session(target) as session:
        return install_release(session, target, base, SilentProgress(), None, None, health_policy(pipeline, target))


def _pipeline(tmp_path: Path, name: str, source: str = "file://assets/vtest.avi") -> Path:
    folder = tmp_path / "pipeline"
    if not folder.exists():
        shutil.copytree(REPO / "pipelines" / "assets", folder / "assets")
    text = (REPO / "pipelines" / "pedestrian.yaml").read_text().replace("file://assets/vtest.avi", source)
    text = text.replace("  - {kind: video, path: annotated.mp4}   # MPEG-4 part 2, plays everywhere\n", "")
    text = text.replace("  threads: 2\n", "  threads: 1\n")  # no spinning intra-op pool on an emulated CPU
    (folder / name).write_text(text + "health: {min_frames: 1, timeout_s: 600}\n")
    return folder / name


def _tree_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(folder)).encode() + path.read_bytes())
    return digest.hexdigest()


@pytest.mark.slow
@pytest.mark.aarch64
def test_a_release_installs_on_a_jetpack_shaped_device_and_keeps_its_numpy_and_opencv(jetpack_device, ssh_target, tmp_path):
    site = jetpack_device.parents[2] / SYSTEM_SITE
    before = {name: _tree_digest(site / name) for name in ("numpy", "cv2")}
    shared = _cache_root() / "wheels"  # the deploy's aarch64 wheels, fetched once across runs like the device folder
    shared.mkdir(parents=True, exist_ok=True)
    (ssh_target.state / "cache").mkdir(parents=True, exist_ok=True)
    (ssh_target.state / "cache" / "wheels").symlink_to(shared)
    # A device ~20x slower than its host: the deploy lease (3 keepalives) must outlast an emulated heartbeat. One frame
    # of health check shows the release's environment runs (the pipeline asks for 1; the target's default floor is 5,
    # about 7 s of emulated CPU a frame).
    ssh_target.write(python=str(jetpack_device), health_frames=1, timeouts={"connect_s": 10, "command_s": 600, "deadline_s": 1800, "keepalive_s": 20})

    good = _install(_pipeline(tmp_path, "good.yaml"))  # passes its health check on the device, or raises

    facts = good.device
    assert facts["arch"] == "aarch64" and facts["module_versions"]["numpy"] == "1.26.4" and facts["module_versions"]["cv2"] == "4.9.0.80"
    # scipy, mcap, ...: only a pipeline that tracks or reads or writes recordings ships them
    assert set(facts["missing_modules"]) == {"pydantic", "onnxruntime", "cuda.bindings", *PIPELINE_MODULES}
    shipped = sorted(name.removeprefix("wheels/") for name in ReleaseManifest.load(ssh_target.root / "current").files if name.startswith("wheels/"))
    assert any(w.startswith("onnxruntime-") and "aarch64" in w for w in shipped) and any(w.startswith("pydantic-") for w in shipped), shipped
    assert not any(w.startswith(("numpy-", "opencv", "PyYAML-", "pyyaml-")) for w in shipped), shipped  # the device's own, kept
    # The release's environment imports the device's numpy and OpenCV, untouched.
    imports = "import json, numpy, cv2; print(json.dumps([numpy.__version__, numpy.__file__, cv2.__version__, cv2.__file__]))"
    done = subprocess.run([good.python, "-c", imports], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    numpy_version, numpy_file, cv2_version, cv2_file = json.loads(done.stdout.strip().splitlines()[-1])
    assert numpy_version == "1.26.4" and Path(numpy_file).is_relative_to(site) and cv2_version == "4.9.0" and Path(cv2_file).is_relative_to(site)
    assert {name: _tree_digest(site / name) for name in ("numpy", "cv2")} == before

    # A release failing its health check is rolled back by the device: the same store code on every architecture, tested
    # over SSH on the x86 simulated device (tests/tools/deploy/test_deploy_ssh.py); under emulation it cost a third of
    # this test (a second health child importing the runtime at ~20x), so it is not repeated here.
    assert (ssh_target.root / "current").resolve().name == good.release_id
