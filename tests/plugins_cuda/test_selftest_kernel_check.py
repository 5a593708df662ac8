"""The selftest's CUDA preprocessing check, everything but the GPU: a local release for an H100 (compute capability
9.0, which has no cubin of its own) carries the PTX and the source, and the check's plan, frame and CPU comparison
pass when the kernel computes what the host reference computes (which test_gpu.py proves bit for bit on a GPU)."""

from __future__ import annotations

from pathlib import Path

from sdk.gpu.binaries import KernelManifest, choose_image
from sdk.spec import load_pipeline
from tools.connect.sessions import open_session
from tools.deploy.flow import install_release
from tools.models.prepare import PrepareModel
from tools.progress import SilentProgress
from tools.release.bundle import collect_bundle
from tools.state import cache_dir
from tools.targets import resolve_target

EXAMPLE = Path(__file__).resolve().parents[2] / "pipelines" / "pedestrian.yaml"


def test_the_selftest_kernel_check_passes_an_h100_release_on_the_host_reference(reference, kernel_cache, state_dir, tmp_path, monkeypatch):
    import tools.deploy.flow
    from sdk import probe
    from sdk import selftest as selftest_module
    from sdk.gpu import driver
    from tools.release.kernels import build_kernels

    monkeypatch.setattr(probe, "_compute_capability", lambda soc: "9.0")  # what nvidia-smi says on an H100
    # The deploy builds the kernels as always, into the session's cache (built once for every kernel test).
    monkeypatch.setattr(tools.deploy.flow, "build_kernels", lambda cache: build_kernels(kernel_cache))
    # The release a deploy installs (probe, kernels for the GPU, staging, health check, commit), without its measured
    # run: the check reads the release, not a run's report.
    pipeline = load_pipeline(EXAMPLE)
    prepare = PrepareModel(pipeline, cache_dir())
    target = resolve_target("local")
    with open_session(target) as session:
        install_release(session, target, collect_bundle(pipeline, prepare(), prepare.key), SilentProgress())
    release = (state_dir / "targets" / "local" / "current").resolve()
    kernels = release / "kernels"
    names = {path.name for path in kernels.iterdir()}
    assert {"preprocess.cu", "pp_math.cuh"} <= {path.name for path in kernels.rglob("*")}
    if "preprocess.json" in names:  # the host had nvcc: the PTX travels, no cubin fits sm_90
        assert not [name for name in names if name.endswith(".cubin")]
        manifest = KernelManifest.load(kernels / "preprocess.json")
        version = 1000 * manifest.toolkit[0] + 10 * manifest.toolkit[1]  # a driver as new as the toolkit that wrote the PTX
        choice = choose_image(manifest, (9, 0), version, names)
        assert choice.kind == "ptx" and choice.file in names
        assert choose_image(manifest, (9, 0), version - 10, names).kind != "ptx"  # an older driver cannot JIT that PTX

    launched = []

    class HostModule:
        """CudaModule's part the check uses, with no driver."""

        def __init__(self, kernels_dir: Path) -> None:
            assert Path(kernels_dir) == kernels

        def __enter__(self):
            return self

        def __exit__(self, *exc) -> None:
            pass

    class HostPreprocessor:
        """CudaPreprocessor's interface, computing with the host reference (the kernels' per-pixel source)."""

        def __init__(self, plan, cuda) -> None:
            self.plan = plan

        def __call__(self, frame):
            launched.append((self.plan.kernel, frame.shape))
            self.out = reference.run(self.plan, frame)
            return 0.0

        def download(self):
            return self.out

    monkeypatch.setattr(driver, "CudaModule", HostModule)
    monkeypatch.setattr(driver, "CudaPreprocessor", HostPreprocessor)
    status, detail = selftest_module.cuda_preprocess_matches_cpu(release, True)
    assert launched == [("pp_bgr8_f32_nchw", (576, 768, 3))]  # the example's 768 x 576 BGR frame, 300 x 300 f32 NCHW out
    assert status == "PASS", detail
    worst = float(detail.split("= ")[1].split(" of")[0])
    assert worst <= 0.25
    print(detail)
