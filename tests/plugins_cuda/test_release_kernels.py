"""What a release carries of the kernels for Orin and Thor, from a real build."""

from __future__ import annotations

from pathlib import Path

import pytest

from sdk.gpu.binaries import SOURCES, KernelManifest, choose_image
from tools.release.bundle import Bundle
from tools.release.kernels import kernel_files, with_kernels


def test_orin_and_thor_releases_carry_their_own_cubin(kernel_build):
    orin = kernel_files(kernel_build.folder, (8, 7))
    thor = kernel_files(kernel_build.folder, (11, 0))
    assert "kernels/preprocess.sm_87.cubin" in orin and "kernels/preprocess.sm_110.cubin" not in orin
    assert "kernels/preprocess.sm_110.cubin" in thor and "kernels/preprocess.sm_87.cubin" not in thor
    for files in (orin, thor):
        assert {"kernels/src/preprocess.cu", "kernels/include/pp_math.cuh", "kernels/include/pp_params.h"} <= set(files)
        assert all(path.is_file() for path in files.values())


def test_the_device_finds_in_a_release_what_it_would_choose(kernel_build, tmp_path):
    """Lay the Orin files out as a release does; the device's choice names a file that is there."""
    release = tmp_path / "release"
    for rel, path in kernel_files(kernel_build.folder, (8, 7)).items():
        (release / rel).parent.mkdir(parents=True, exist_ok=True)
        (release / rel).write_bytes(path.read_bytes())
    folder = release / "kernels"
    choice = choose_image(KernelManifest.load(folder / "preprocess.json"), (8, 7), 13000, {p.name for p in folder.iterdir()})
    assert choice.kind == "cubin" and (folder / choice.file).read_bytes()[:4] == b"\x7fELF"


def test_a_release_with_a_build_carries_the_source_nvrtc_compiles(kernel_build):
    """The NVRTC fallback on a device has every header it needs in the release itself: a release carries with its
    binaries exactly the source files test_build.py compiles with NVRTC for every architecture (laid out from
    kernel_files without a build)."""
    built = kernel_files(kernel_build.folder, (8, 7))
    source_only = kernel_files(None, (8, 7))
    assert {rel: path for rel, path in built.items() if not rel.endswith((".cubin", ".ptx", ".json"))} == source_only
    assert sorted(source_only) == sorted(f"kernels/{name}" for name in SOURCES)


def test_a_build_without_kernels_is_refused(host_build):
    with pytest.raises(FileNotFoundError):
        kernel_files(host_build.folder, (8, 7))


def test_bundle_gains_the_kernel_files():
    bundle = Bundle({"sdk/__init__.py": Path("x")}, "pipeline/p.yaml", "artifacts", {"sdk": "0"})
    grown = with_kernels(bundle, {"kernels/preprocess.json": Path("y")})
    assert set(grown.files) == {"sdk/__init__.py", "kernels/preprocess.json"} and grown.fingerprint["kernels"] == ["kernels/preprocess.json"]


class ProbedSession:
    """What bundle_for_device needs of a session: a name and the device's fingerprint."""

    def __init__(self, facts: dict) -> None:
        self.name, self.facts = "orin-test", facts

    def probe(self) -> dict:
        return self.facts


@pytest.mark.parametrize(("probed", "cubin"), [("8.7", "sm_87"), ("11.0", "sm_110"), ("7.5", None), (None, None)])
def test_deploy_adds_the_kernels_for_the_probed_gpu(kernel_build, monkeypatch, probed, cubin):
    import tools.deploy.flow as deploy
    from tools.progress import SilentProgress

    monkeypatch.setattr(deploy, "build_kernels", lambda cache: kernel_build.folder)  # the session's build
    base = Bundle({"sdk/__init__.py": Path("x")}, "pipeline/p.yaml", "artifacts", {"sdk": "0"})
    bundle, _ = deploy.bundle_for_device(ProbedSession({"compute_capability": probed, "missing_modules": []}), base, SilentProgress())
    cubins = [name for name in bundle.files if name.endswith(".cubin")]
    if probed is None:
        assert bundle is base  # no GPU: the release is what it was
    else:
        assert cubins == ([f"kernels/preprocess.{cubin}.cubin"] if cubin else [])
        assert "kernels/src/preprocess.cu" in bundle.files and "kernels/preprocess.compute_87.ptx" in bundle.files


def test_host_build_is_cached_and_without_nvcc_only_the_source_travels(kernel_cache, monkeypatch, nvcc):
    """The session's cache was filled by build_kernels (the kernel_cache fixture: what every kernel test reads is its
    build); asked again, it returns that build and builds nothing."""
    import shutil

    from tools.release import cuda_toolkit
    from tools.release.kernels import build_kernels, parse_compute_capability

    if shutil.which("cmake") is None:
        pytest.skip("needs cmake (apt-get install cmake)")
    monkeypatch.setenv("SDK_NVCC", str(nvcc))
    (first,) = (kernel_cache / "kernels").iterdir()  # one build, no temporary folder left beside it
    assert (first / "preprocess.sm_87.cubin").is_file() and (first / "preprocess.sm_110.cubin").is_file()
    stamp = (first / "preprocess.json").stat().st_mtime_ns
    assert build_kernels(kernel_cache) == first and (first / "preprocess.json").stat().st_mtime_ns == stamp  # not rebuilt
    assert list((kernel_cache / "kernels").iterdir()) == [first]
    monkeypatch.delenv("SDK_NVCC")
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(cuda_toolkit, "wheel_bin", lambda: None)
    assert build_kernels(kernel_cache) is None
    assert set(kernel_files(None, (8, 7))) == {f"kernels/{name}" for name in SOURCES}
    assert parse_compute_capability("8.7") == (8, 7) and parse_compute_capability(None) is None and parse_compute_capability("n/a") is None
