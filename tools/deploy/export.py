"""`sdk export`: a release as a Mender Artifact, and the Update Module that installs it.

`sdk export PIPELINE --target T --mender OUT.mender [--sign-key KEY]` builds the bundle an SSH deploy
would upload (the same `collect_bundle` and `bundle_for_facts`), with what a probe would have said
of the device taken from the target file instead (`assumed_facts`), and wraps it with the real
`mender-artifact write module-image`:

    payload files     manifest.json (the SDK manifest), manifest.json.sig (when the target file has a
                      sign_key), then one file per distinct object, named by its sha256: the device's
                      store is content-addressed, so the module streams each straight into it
    meta-data         {"perception_release": {"release", "pipeline", "min_frames", "timeout_s", "if_damaged"}}: the
                      health check the device runs before Mender may commit (signed with the header)
    -T perception-release   -t DEVICE_TYPE (target `mender.device_type`, else `platform`)
    -n PIPELINE-RELEASE_ID  --software-name perception --software-version RELEASE_ID
    --provides rootfs-image.perception.pipeline:PIPELINE    -k KEY (ECDSA P-256 or RSA) with --sign-key

`sdk export --mender-module DIR [--target T | --root R --python P]` writes the Update Module
`DIR/perception-release` (see `write_module`) and its configuration `DIR/perception-release.conf`,
to be installed as /usr/share/mender/modules/v3/perception-release and /etc/mender/perception-release.conf.

`sdk export --root-tool DIR [--python P]` writes `DIR/perception-sdk-root`, root's own copy of the SDK's device code
(the same archive, running `python -m sdk`), to be installed once by root as /usr/local/sbin/perception-sdk-root:
root's steps on an SSH device (`service install`, `store trust` install-policy) run from it, never from the deploy
login's agent copy (decision 0960).
"""

from __future__ import annotations

import io
import json
import os
import platform
import shutil
import subprocess
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from sdk.errors import ConfigError, ReleaseError
from sdk.release import MANIFEST, SIGNATURE
from sdk.store.mender import CONFIG_FILE, META_KEY, PAYLOAD_TYPE
from tools.progress import Progress, SilentProgress
from tools.targets import RemoteTarget, resolve_target

SOFTWARE_NAME = "perception"
MODULE_DIR = "/usr/share/mender/modules/v3"
JETPACK_PYTHON = {"jetson-thor": "cp312"}  # JetPack 7 (Ubuntu 24.04); every other Jetson/DRIVE platform: JetPack 6, cp310
TEGRA_COMPUTE_CAPABILITY = {"jetson-thor": "11.0"}  # every other Jetson/DRIVE platform is Orin (tegra234): 8.7
PROVIDED_BY_JETPACK = ("numpy", "cv2")  # JetPack's own numpy and GStreamer-enabled OpenCV: never shadowed by wheels
# Both run as root: `python3 -I` (no PYTHONPATH, no user site, not the working folder), root's own sdk from the zip,
# and nothing imported from a folder another user controls (sdk/rootsafe.py).
MODULE_MAIN = (
    "import sys\n\nfrom sdk.rootsafe import confine_imports\n\nconfine_imports()\nfrom sdk.store.mender import main\n\nsys.exit(main(sys.argv[1:]))\n"
)
ROOT_TOOL = "perception-sdk-root"
ROOT_TOOL_DIR = "/usr/local/sbin"
ROOT_TOOL_MAIN = (
    "import runpy\n\nfrom sdk.rootsafe import confine_imports\n\nconfine_imports()\nrunpy.run_module('sdk', run_name='__main__', alter_sys=True)\n"
)


@dataclass(frozen=True)
class ExportResult:
    path: Path
    release_id: str
    artifact_name: str
    device_type: str
    files: int
    objects: int
    manifest_signed: bool
    artifact_signed: bool
    facts: dict


def mender_artifact() -> str:
    tool = shutil.which("mender-artifact")
    if tool is None:
        raise ConfigError("mender-artifact is not installed", hint="install it: apt-get install mender-artifact (Debian/Ubuntu)")
    return tool


def _remote_target(name: str) -> RemoteTarget:
    target = resolve_target(name)
    if not isinstance(target, RemoteTarget):
        raise ConfigError(f"--target {name}: an export needs a target file (its platform, device type and store)", hint="write targets/NAME.yaml")
    return target


def assumed_facts(target: RemoteTarget) -> dict:
    """What a probe would report, from the target file alone (no device is reached):

    - arch: aarch64 for Jetson/DRIVE platforms, this host's machine for `linux-generic`;
    - python_abi: `mender.python_abi`, else cp310 (JetPack 6) / cp312 (Thor), or this host's for `linux-generic`;
    - missing_modules: `mender.missing_modules`, else every runtime module but numpy and cv2 on
      Jetson/DRIVE (JetPack's own), every runtime module elsewhere: those travel as offline wheels
      (the pipeline modules, scipy, mcap, ..., only with a pipeline that uses them);
    - compute_capability: 8.7 (Orin) / 11.0 (Thor) on Jetson/DRIVE, none elsewhere (the CUDA kernels it selects);
    - tensorrt: none. The TensorRT engine is built on the device by a deploy, never by an export: an
      exported release runs ONNX Runtime (`model.backend: auto`), and `backend: tensorrt` is refused.
    """
    from sdk.probe import PIPELINE_MODULES, RUNTIME_MODULES, python_abi

    spec = target.spec
    generic = spec.platform == "linux-generic"
    if spec.mender.missing_modules is not None:
        missing = list(spec.mender.missing_modules)
    else:
        missing = [m for m in (*RUNTIME_MODULES, *PIPELINE_MODULES) if generic or m not in PROVIDED_BY_JETPACK]
    return {
        "assumed": True,
        "platform": spec.platform,
        "arch": platform.machine() if generic else "aarch64",
        "python_abi": spec.mender.python_abi or (python_abi() if generic else JETPACK_PYTHON.get(spec.platform, "cp310")),
        "missing_modules": missing,
        "compute_capability": None if generic else TEGRA_COMPUTE_CAPABILITY.get(spec.platform, "8.7"),
        "tensorrt": None,
    }


def device_type(target: RemoteTarget) -> str:
    return target.spec.mender.device_type or target.spec.platform


class ExportMender:
    """Settings in the constructor; calling it builds the bundle and writes the artifact."""

    def __init__(self, pipeline_path: Path, target: str, out: Path, *, sign_key: Path | None = None, progress: Progress | None = None) -> None:
        self.pipeline_path = Path(pipeline_path)
        self.target_name = target
        self.out = Path(out)
        self.sign_key = Path(sign_key) if sign_key else None
        self.progress = progress or SilentProgress()

    def __call__(self) -> ExportResult:
        from sdk.spec.loader import load_pipeline
        from tools.deploy.flow import bundle_for_facts, health_policy, int8_artifacts
        from tools.models.prepare import PrepareModel
        from tools.release.bundle import collect_bundle
        from tools.release.signing import binding_for, signer_for
        from tools.release.stage import manifest_for
        from tools.state import cache_dir

        tool = mender_artifact()  # refused before anything is prepared
        target = _remote_target(self.target_name)
        if self.sign_key is not None and not self.sign_key.is_file():
            raise ConfigError(f"--sign-key {self.sign_key}: no such file")
        if self.out.suffix != ".mender":
            raise ConfigError(f"--mender {self.out}: a Mender Artifact's name ends in .mender")
        pipeline = load_pipeline(self.pipeline_path)
        if pipeline.spec.model.backend == "tensorrt":
            raise ConfigError(
                f"{pipeline.path}: model.backend is tensorrt, but an exported release carries no TensorRT engine (a deploy builds it on the device)",
                hint="use backend: auto (ONNX Runtime in the artifact), or deploy over SSH",
            )
        key = target.host_path(target.spec.sign_key) if target.spec.sign_key else None
        sign = signer_for(key, binding_for(target, pipeline.spec.name))  # the version and binding the device checks
        prepare = PrepareModel(pipeline, cache_dir())
        task = self.progress.task("preparing model" + (" (cached)" if prepare.cached else ""), total=None)
        artifacts = prepare()
        task.done()
        int8 = int8_artifacts(pipeline, artifacts, self.progress)
        facts = assumed_facts(target)
        bundle = bundle_for_facts(collect_bundle(pipeline, artifacts, prepare.key, int8), facts, self.progress, int8)
        manifest = manifest_for(bundle)
        signature = sign(manifest)
        policy = health_policy(pipeline, target)
        release = manifest.release_id
        name = f"{pipeline.spec.name}-{release}"
        meta = {META_KEY: {"release": release, "pipeline": pipeline.spec.name, "min_frames": policy.min_frames, "timeout_s": policy.timeout_s}}
        meta[META_KEY]["if_damaged"] = pipeline.spec.service.if_damaged
        self.out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".export-", dir=self.out.parent) as work:
            staging = Path(work)
            payload = [staging / MANIFEST]
            payload[0].write_text(manifest.to_json())
            if signature is not None:
                payload.append(staging / SIGNATURE)
                payload[-1].write_text(signature)
            source_of = {entry.sha256: bundle.files[file] for file, entry in sorted(manifest.files.items())}
            for sha256, source in source_of.items():
                payload.append(staging / sha256)
                os.symlink(source.resolve(), payload[-1])
            (staging / "meta-data.json").write_text(json.dumps(meta, sort_keys=True))
            partial = staging / "out.mender"
            command = [tool, "write", "module-image", "-T", PAYLOAD_TYPE, "-t", device_type(target), "-n", name, "-o", str(partial)]
            command += ["--software-name", SOFTWARE_NAME, "--software-version", release]
            command += ["--provides", f"rootfs-image.{SOFTWARE_NAME}.pipeline:{pipeline.spec.name}", "-m", str(staging / "meta-data.json")]
            command += [arg for path in payload for arg in ("-f", str(path))]
            if self.sign_key is not None:
                command += ["-k", str(self.sign_key)]
            task = self.progress.task(f"writing the Mender Artifact {name}", total=None)
            done = subprocess.run(command, capture_output=True, text=True, timeout=3600)
            task.done()
            if done.returncode != 0:
                detail = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
                raise ReleaseError(f"mender-artifact could not write {self.out.name}: {detail}")
            os.replace(partial, self.out)
        return ExportResult(
            self.out, release, name, device_type(target), len(manifest.files), len(source_of), signature is not None, self.sign_key is not None, facts
        )


# The Update Module ---------------------------------------------------------------------------------
def module_archive(main: str = MODULE_MAIN) -> bytes:
    """A zip of the device's `sdk` package and a `__main__` that runs sdk.store.mender (or `main`): the store, trial
    and signing code the module drives travel inside the module, so it works before any release exists."""
    from tools.release.bundle import runtime_files

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(zipfile.ZipInfo("__main__.py", (2020, 1, 1, 0, 0, 0)), main)
        for name, path in sorted(runtime_files().items()):
            info = zipfile.ZipInfo(name, (2020, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, path.read_bytes())
    return buffer.getvalue()


def _interpreter(python: str) -> str:
    if not python.startswith("/") or any(c.isspace() for c in python):
        why = f"--python {python!r}: the interpreter must be an absolute path without spaces (it is the #! line)"
        raise ConfigError(why, hint="e.g. /usr/bin/python3")
    return python


def write_root_tool(folder: Path, *, python: str = "/usr/bin/python3") -> tuple[Path, str]:
    """`folder/perception-sdk-root`: root's own copy of the SDK's device code, a Python zip application run with
    `-I`; (its path, its sha256, to compare with the copy installed on the device)."""
    import hashlib

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tool = folder / ROOT_TOOL
    header = f"#!{_interpreter(python)} -I\n# Root's copy of the perception SDK's device code, written by `sdk export --root-tool`.\n"
    header += f"# Install it as root: install -o root -g root -m 0755 {ROOT_TOOL} {ROOT_TOOL_DIR}/{ROOT_TOOL}. A Python zip application follows.\n"
    data = header.encode() + module_archive(ROOT_TOOL_MAIN)
    partial = folder / f".{tool.name}.partial"
    partial.write_bytes(data)
    partial.chmod(0o755)
    os.replace(partial, tool)
    return tool, hashlib.sha256(data).hexdigest()


def write_module(folder: Path, *, python: str = "/usr/bin/python3", root: str = "/var/lib/perception", target: str = "mender") -> tuple[Path, Path]:
    """`folder/perception-release`: an executable Python zip application (a `#!` line, then the zip) holding
    the SDK's device code; `folder/perception-release.conf`: where the release store is."""
    python = _interpreter(python)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    module, config = folder / PAYLOAD_TYPE, folder / f"{PAYLOAD_TYPE}.conf"
    header = f"#!{python} -I\n# Mender Update Module {PAYLOAD_TYPE} (protocol v3), written by `sdk export --mender-module`.\n"
    header += f"# Install it as {MODULE_DIR}/{PAYLOAD_TYPE}, and {config.name} as {CONFIG_FILE}. A Python zip application follows.\n"
    partial = folder / f".{module.name}.partial"
    partial.write_bytes(header.encode() + module_archive())
    partial.chmod(0o755)
    os.replace(partial, module)
    config.write_text(json.dumps({"root": root, "target": target, "commit_window_s": 3600, "lock_wait_s": 60}, indent=2) + "\n")
    return module, config


def module_settings(target_name: str | None, root: str | None, python: str | None) -> dict:
    """The module's interpreter and store: from the target file when given (its `python` and `remote_root`)."""
    settings = {"python": python or "/usr/bin/python3", "root": root or "/var/lib/perception", "target": "mender"}
    if target_name is not None:
        target = _remote_target(target_name)
        device_python = target.spec.python if target.spec.python.startswith("/") else f"/usr/bin/{target.spec.python}"
        settings = {"python": python or device_python, "root": root or target.root, "target": target.name}
    return settings
