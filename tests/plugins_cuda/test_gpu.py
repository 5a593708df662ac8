"""On a GPU: the kernels give the host reference's bytes, and their time by CUDA events.

Marked `gpu`; skipped unless the CUDA driver library loads and reports a device. Nothing here
has run on this project's CI machines (no GPU). `sdk selftest --target T` runs these on a device, with the
release's own kernels (SDK_SELFTEST_RELEASE); from a checkout on a GPU machine, `python -m pytest -m gpu`.
"""

from __future__ import annotations

import ctypes
import os
import statistics
from pathlib import Path

import numpy as np
import pytest

from sdk.gpu.plan import PreprocessPlan
from sdk.spec.schema import Preprocess

from .helpers import host_decode, host_yolo, to_nv12, to_yuyv, yolo_outputs

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="session")
def gpu_kernels(request, tmp_path_factory):
    """A release-style kernels folder with every binary, or, under `sdk selftest`, the release's own (the kernels the
    device really runs); skips unless a driver and a device exist."""
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        pytest.skip("no CUDA driver (libcuda.so.1)")
    driver = pytest.importorskip("cuda.bindings.driver", reason="cuda-bindings is not installed")
    (err,) = driver.cuInit(0)
    err2, count = driver.cuDeviceGetCount()
    if err != driver.CUresult.CUDA_SUCCESS or err2 != driver.CUresult.CUDA_SUCCESS or count == 0:
        pytest.skip(f"no CUDA device ({err!r})")
    release = os.environ.get("SDK_SELFTEST_RELEASE")
    if release and (Path(release) / "kernels").is_dir():
        return Path(release) / "kernels"
    from tools.release.kernels import kernel_files

    kernel_build = request.getfixturevalue("kernel_build")  # only where a GPU can run it
    folder = tmp_path_factory.mktemp("release")
    for rel, path in kernel_files(kernel_build.folder, None).items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(path.read_bytes())
    return folder / "kernels"


CASES = [
    ("bgr8", {"resize": {"width": 300, "height": 300, "coordinates": "asymmetric"}, "normalize": {"scale": 2 / 255, "mean": [1, 1, 1]}}, None),
    ("nv12", {"resize": {"width": 640, "height": 640, "mode": "letterbox"}, "layout": "nhwc", "dtype": "float16"}, None),
    ("yuyv", {"resize": {"width": 320, "height": 320}, "color": "gray", "dtype": "uint8"}, None),
    ("rgb8", {"resize": {"width": 640, "height": 384, "mode": "letterbox"}, "normalize": {"scale": 1 / 255}}, 1 / 127),
]


@pytest.mark.parametrize(("source_format", "spec_args", "int8_scale"), CASES)
def test_kernel_equals_the_host_reference(gpu_kernels, reference, real_frames, source_format, spec_args, int8_scale):
    from sdk.gpu.driver import CudaModule, CudaPreprocessor

    image = real_frames[0]
    h, w = image.shape[:2]
    plan = PreprocessPlan.build(Preprocess(**spec_args), source_format, w, h, int8_scale=int8_scale)
    uv = None
    if source_format == "nv12":
        source, uv = to_nv12(image)
        frame = np.concatenate([source.reshape(-1), uv.reshape(-1)])
    elif source_format == "yuyv":
        source = frame = to_yuyv(image)
    else:
        source = frame = image if source_format == "bgr8" else np.ascontiguousarray(image[:, :, ::-1])
    expected = reference.run(plan, source, uv)
    with CudaModule(gpu_kernels) as cuda:
        gpu = CudaPreprocessor(plan, cuda)
        gpu(frame)
        ours = gpu.download()
        print(f"{plan.kernel}: {cuda.choice.kind} sm_{cuda.choice.arch}, input memory {cuda.memory}")
    # Same explicit roundings on both sides: bit for bit.
    assert ours.tobytes() == expected.tobytes()


def test_a_frame_captured_as_a_cuda_graph_replays_like_the_uncaptured_launch(gpu_kernels, real_frames):
    """preprocess.cuda_graph's adapter on a GPU (sdk/gpu/graph.py): the upload, the kernel and the copy back captured
    once with cuStreamBeginCapture/cuStreamEndCapture, instantiated, and replayed per frame with cuGraphLaunch give
    the un-captured launch's bytes for each new frame written into the same pinned buffer."""
    from sdk.gpu.driver import CudaModule, CudaPreprocessor
    from sdk.gpu.graph import FrameGraph

    h, w = real_frames[0].shape[:2]
    plan = PreprocessPlan.build(Preprocess(**CASES[0][1]), "bgr8", w, h)
    with CudaModule(gpu_kernels) as cuda:
        kernel = CudaPreprocessor(plan, cuda)
        plain = []
        for image in real_frames:
            kernel(image)
            plain.append(kernel.download())
        raw, _ = cuda.pinned_buffer(plan.output_bytes, False)  # a captured copy needs pinned host memory
        out = raw.view(plan.numpy_dtype).reshape(plan.output_shape)

        def frame() -> bool:
            kernel.enqueue()
            cuda.download(out, kernel.output_pointer)
            return True

        graph = FrameGraph(cuda)
        assert graph.capture(frame), graph.reason
        for image, expected in zip(real_frames, plain, strict=True):
            np.copyto(kernel.input_array, image.reshape(-1))
            graph.launch()
            cuda.synchronize()
            assert out.tobytes() == expected.tobytes()
        assert graph.report() == {"requested": True, "captured": True, "replayed_frames": len(real_frames)}
    assert plain[0].tobytes() != plain[1].tobytes()  # the frames differ: the replay read each new one


def test_kernel_time_by_cuda_events(gpu_kernels):
    from sdk.gpu.driver import CudaModule, CudaPreprocessor

    plan = PreprocessPlan.build(Preprocess(resize={"width": 640, "height": 640, "mode": "letterbox"}, dtype="float16"), "nv12", 1920, 1080)
    with CudaModule(gpu_kernels) as cuda:
        gpu = CudaPreprocessor(plan, cuda)
        gpu.input_array[:] = np.random.default_rng(0).integers(0, 256, gpu.input_array.size, dtype=np.uint8)
        times = [gpu() for _ in range(200)][20:]
    median = statistics.median(times)
    print(f"{plan.kernel} 1920x1080 NV12 -> 640x640 fp16: median {median * 1000:.1f} us, {plan.minimum_bytes() / median / 1e6:.1f} GB/s effective")
    assert 0 < median < 5.0


def test_ssd_decode_kernel_finds_the_host_references_candidates(gpu_kernels, reference, example_pipeline, prepared_example, real_frames):
    """Same candidates as the host reference (in atomic order: compared sorted), scores and boxes to an ulp or two of expf."""
    from sdk.backends import create_backend
    from sdk.gpu.decode import SsdDecodePlan
    from sdk.gpu.driver import CudaModule, CudaSsdDecoder
    from sdk.preprocess import CpuPreprocessor

    spec = example_pipeline.spec
    decoder = spec.postprocess.decoder
    anchors = prepared_example.load_tensors()[decoder.anchors]
    with create_backend("onnxruntime", prepared_example.model_path) as backend:
        (buffer,) = backend.inputs.values()
        CpuPreprocessor(spec.preprocess, buffer)(real_frames[0])
        backend.infer()
        encodings, logits = backend.outputs[decoder.box_encodings].copy(), backend.outputs[decoder.class_logits].copy()
    logits = logits.reshape(anchors.reshape(-1, 4).shape[0], -1)
    plan = SsdDecodePlan.build(spec.postprocess.model_copy(update={"score_threshold": 0.05}), anchors, logits.shape[1], (300, 300))
    boxes, scores, classes, found = host_decode(reference, plan, encodings, logits)
    with CudaModule(gpu_kernels) as cuda:
        g_boxes, g_scores, g_classes, g_found = CudaSsdDecoder(plan, cuda)(encodings, logits)
        assert g_found == found > 0
        ours, theirs = np.lexsort((g_boxes[:, 1], g_boxes[:, 0], g_scores)), np.lexsort((boxes[:, 1], boxes[:, 0], scores))
        assert np.allclose(g_scores[ours], scores[theirs], rtol=1e-5)
        assert np.allclose(g_boxes[ours], boxes[theirs], atol=1e-3)


@pytest.mark.parametrize("layout", ["v5", "v8"])
def test_yolo_decode_kernel_finds_the_host_references_candidates(gpu_kernels, reference, layout):
    """No transcendental in YOLO decode: the same candidates bit for bit, in atomic order."""
    from sdk.gpu.decode import YoloDecodePlan
    from sdk.gpu.driver import CudaModule, CudaYoloDecoder
    from sdk.spec.schema import Postprocess

    spec = Postprocess(decoder={"kind": "yolo", "output": "out", "layout": layout}, classes=tuple(f"c{i}" for i in range(80)), score_threshold=0.25)
    output = yolo_outputs(layout)
    plan = YoloDecodePlan.build(spec, output.shape)
    boxes, scores, classes, found = host_yolo(reference, plan, output)
    with CudaModule(gpu_kernels) as cuda:
        g_boxes, g_scores, g_classes, g_found = CudaYoloDecoder(plan, cuda)(output)
        assert g_found == found > 100
        ours = np.lexsort((g_boxes[:, 1], g_boxes[:, 0], g_scores))
        theirs = np.lexsort((boxes[:, 1], boxes[:, 0], scores))
        assert (g_scores[ours] == scores[theirs]).all() and (g_boxes[ours] == boxes[theirs]).all()
        assert (g_classes[ours] == classes[theirs]).all()


def test_the_runtime_stage_writes_the_engines_binding_and_times_by_events(gpu_kernels, reference, real_frames):
    """sdk/preprocess/cuda.py on a GPU: the kernel writes a device buffer standing for TensorRT's input binding,
    on the stream the backend hands over, the binding is marked as never copied, and the stage's time comes from
    CUDA events. (The whole path with an engine: the selftest's cuda_pipeline_matches_cpu, tests/tools/validation/test_selftest.py.)"""
    from cuda.bindings import driver as cu

    from sdk.gpu.handles import device_address, native_handle
    from sdk.gpu.session import DeviceChoice
    from sdk.preprocess.cuda import CudaPreprocessor

    spec = Preprocess(**CASES[0][1])
    nbytes = int(np.prod(spec.tensor_shape)) * 4
    _, device = cu.cuDeviceGet(0)
    _, context = cu.cuDevicePrimaryCtxRetain(device)
    cu.cuCtxSetCurrent(context)
    _, stream = cu.cuStreamCreate(0)
    _, binding = cu.cuMemAlloc(nbytes)

    class DeviceBackend:
        name = "tensorrt"
        inputs = {"input": np.zeros(spec.tensor_shape, np.float32)}  # the pinned host view TensorRT's backend also keeps
        outputs: dict = {}
        stream_handle = native_handle(stream)
        kept: set = set()

        def keep_on_device(self, *names):
            self.kept.update(names)

        def device_address(self, name):
            return device_address(binding)

    backend = DeviceBackend()
    stage = CudaPreprocessor(spec, backend, DeviceChoice("cuda", "test"), kernels_dir=gpu_kernels)
    try:
        image = real_frames[0]
        for _ in range(3):
            stage(image)
        out = np.empty(spec.tensor_shape, np.float32)
        cu.cuMemcpyDtoH(out.ctypes.data, binding, nbytes)
        assert out.tobytes() == reference.run(stage.plan, image).tobytes()
        assert backend.kept == {"input"} and not backend.inputs["input"].any()  # written on the device only
        times = stage.report()["event_ms"]["preprocess"]
        assert times["frames"] == 3 and 0 < times["mean_ms"] <= times["max_ms"]
    finally:
        stage.close()
        cu.cuMemFree(binding)
        cu.cuStreamDestroy(stream)
        cu.cuDevicePrimaryCtxRelease(device)


@pytest.mark.parametrize("colour", [("bt601", "limited"), ("bt601", "full"), ("bt709", "limited"), ("bt709", "full")])
def test_nv12_kernel_with_pitched_planes_and_each_colour_equals_the_host_reference(gpu_kernels, reference, real_frames, colour):
    """NV12 as NVMM surfaces hold it (each plane's rows padded to its own pitch), every colour the caps can state."""
    from sdk.gpu.driver import CudaModule, CudaPreprocessor
    from sdk.pixels import YuvColour

    image = real_frames[1]
    h, w = image.shape[:2]
    y, uv = to_nv12(image)
    pitch, uv_pitch = w + 256, w + 128
    y_padded = np.full((h, pitch), 0xEE, np.uint8)
    y_padded[:, :w] = y
    uv_padded = np.full((h // 2, uv_pitch), 0xEE, np.uint8)
    uv_padded[:, :w] = uv
    spec = Preprocess(resize={"width": 300, "height": 300, "coordinates": "asymmetric"}, normalize={"scale": 2 / 255, "mean": [1, 1, 1]})
    plan = PreprocessPlan.build(spec, "nv12", w, h, pitch=pitch, uv_pitch=uv_pitch, colour=YuvColour(*colour))
    expected = reference.run(plan, y_padded, uv_padded)
    with CudaModule(gpu_kernels) as cuda:
        gpu = CudaPreprocessor(plan, cuda)
        gpu(np.concatenate([y_padded.reshape(-1), uv_padded.reshape(-1)]))
        ours = gpu.download()
    assert ours.tobytes() == expected.tobytes()


def test_the_runtime_stage_reads_nv12_in_place_from_the_sources_device_memory(gpu_kernels, reference, real_frames):
    """sdk/preprocess/cuda.py with NV12 frames on a GPU: host NV12 (copied once into the pinned buffer) and NV12 the
    source holds in device memory (Nv12Image.device: a pitched cuMemAlloc standing for an NVMM surface, read in
    place, no frame buffer of the stage's) both give the host reference's tensor in the binding, bit for bit."""
    from cuda.bindings import driver as cu

    from sdk.gpu.handles import device_address, native_handle
    from sdk.gpu.session import DeviceChoice
    from sdk.pixels import Nv12Image
    from sdk.preprocess.cuda import CudaPreprocessor

    spec = Preprocess(**CASES[0][1])
    nbytes = int(np.prod(spec.tensor_shape)) * 4
    image = real_frames[0]
    h, w = image.shape[:2]
    host = Nv12Image.from_bgr(image)
    pitch = (w + 255) // 256 * 256
    surface = np.zeros(pitch * h * 3 // 2, np.uint8)  # the surface's layout, on the host
    y = surface[: pitch * h].reshape(h, pitch)[:, :w]
    uv = surface[pitch * h :].reshape(h // 2, pitch)[:, :w].reshape(h // 2, w // 2, 2)
    np.copyto(y, host.y)
    np.copyto(uv, host.uv)
    _, device = cu.cuDeviceGet(0)
    _, context = cu.cuDevicePrimaryCtxRetain(device)
    cu.cuCtxSetCurrent(context)
    _, stream = cu.cuStreamCreate(0)
    _, binding = cu.cuMemAlloc(nbytes)
    _, planes = cu.cuMemAlloc(surface.nbytes)
    cu.cuMemcpyHtoD(planes, surface.ctypes.data, surface.nbytes)
    base = device_address(planes)

    class DeviceBackend:
        name = "tensorrt"
        inputs = {"input": np.zeros(spec.tensor_shape, np.float32)}
        outputs: dict = {}
        stream_handle = native_handle(stream)
        kept: set = set()

        def keep_on_device(self, *names):
            self.kept.update(names)

        def device_address(self, name):
            return device_address(binding)

    stage = CudaPreprocessor(spec, DeviceBackend(), DeviceChoice("cuda", "test"), kernels_dir=gpu_kernels)
    try:
        out = np.empty(spec.tensor_shape, np.float32)
        stage(host)
        cu.cuMemcpyDtoH(out.ctypes.data, binding, nbytes)
        expected = reference.run(stage.plan, host.y, host.uv)
        assert stage.plan.kernel == "pp_nv12_f32_nchw" and out.tobytes() == expected.tobytes()
        out[...] = 0
        stage(Nv12Image(y, uv, device=(base, base + pitch * h)))
        cu.cuMemcpyDtoH(out.ctypes.data, binding, nbytes)
        assert stage._frame is None and (stage.plan.source_pitch, stage.plan.uv_pitch) == (pitch, pitch)
        assert out.tobytes() == expected.tobytes()
    finally:
        stage.close()
        cu.cuMemFree(planes)
        cu.cuMemFree(binding)
        cu.cuStreamDestroy(stream)
        cu.cuDevicePrimaryCtxRelease(device)
