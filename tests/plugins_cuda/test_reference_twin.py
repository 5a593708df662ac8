"""The numpy twins the emulated device runs (sdk/gpu/reference.py) against the C++ host reference of the kernels,
with the same bound parameter blocks, and the emulated device driven by the C++ reference itself."""

from __future__ import annotations

import numpy as np
import pytest

from sdk.gpu import reference as twin
from sdk.gpu.decode import YoloDecodePlan
from sdk.gpu.emulation import EmulatedCuda
from sdk.gpu.plan import PreprocessPlan
from sdk.pixels import Nv12Image, YuvColour, yuv_to_bgr
from sdk.spec.schema import Postprocess, Preprocess

from .helpers import host_yolo, nv12_to_bgr, to_nv12, to_yuyv, yolo_outputs

SPECS = [
    Preprocess(resize={"width": 300, "height": 300, "coordinates": "asymmetric"}, normalize={"scale": 1 / 127.5, "mean": [1, 1, 1]}),
    Preprocess(resize={"width": 320, "height": 192, "mode": "letterbox"}, color="bgr", layout="nhwc", dtype="float16"),
    Preprocess(resize={"width": 96, "height": 64}, crop={"x": 100, "y": 50, "width": 400, "height": 300}, dtype="uint8"),
    Preprocess(resize={"width": 128, "height": 128, "coordinates": "align_corners"}, color="gray"),
]


@pytest.mark.parametrize("spec", SPECS, ids=["ssd", "letterbox-f16-nhwc", "crop-u8", "gray"])
@pytest.mark.parametrize("source_format", ["bgr8", "rgb8"])
def test_preprocess_twin_is_the_host_reference(reference, real_frames, spec, source_format):
    image = real_frames[1] if source_format == "bgr8" else np.ascontiguousarray(real_frames[1][:, :, ::-1])
    h, w = image.shape[:2]
    plan = PreprocessPlan.build(spec, source_format, w, h)
    theirs = reference.run(plan, image)
    ours = np.full(plan.output_shape, 77, plan.numpy_dtype)
    twin.preprocess(plan.bound(image.ctypes.data, ours.ctypes.data), source_format, plan.dtype, plan.layout)
    diff = np.abs(ours.astype(np.float64) - theirs.astype(np.float64))
    # One float32 ulp of the double-rounded fma at most (and one step of a u8 rounding at a .5 edge).
    assert diff.max() <= (1.0 if spec.dtype == "uint8" else 4e-6 * max(1.0, np.abs(theirs.astype(np.float64)).max()))
    assert (diff > 0).mean() < 1e-3


@pytest.mark.parametrize("layout", ["v5", "v8"])
def test_yolo_twin_is_the_host_reference(reference, layout):
    output = yolo_outputs(layout)
    spec = Postprocess(decoder={"kind": "yolo", "output": "out", "layout": layout}, classes=tuple(str(k) for k in range(80)), score_threshold=0.25)
    plan = YoloDecodePlan.build(spec, output.shape, capacity=300)  # fewer than the 350 candidates: overflow on both
    boxes, scores, classes, found = host_yolo(reference, plan, output)
    out = plan.output_buffers()
    twin.yolo_decode(
        plan.bound(output.ctypes.data, out["boxes"].ctypes.data, out["scores"].ctypes.data, out["classes"].ctypes.data, out["count"].ctypes.data)
    )
    assert int(out["count"][0]) == found > plan.capacity
    assert np.array_equal(out["boxes"][: len(boxes)], boxes) and np.array_equal(out["scores"][: len(scores)], scores)
    assert np.array_equal(out["classes"][: len(classes)], classes)


def test_emulated_device_runs_the_cpp_reference(host_build, real_frames):
    gpu = EmulatedCuda(memory="copy", library=host_build.folder / "libpp_reference.so").open()
    assert "C++ host reference" in gpu.describe()
    image = real_frames[0]
    spec = SPECS[0]
    plan = PreprocessPlan.build(spec, "bgr8", image.shape[1], image.shape[0])
    frame, mapped = gpu.pinned_buffer(plan.source_bytes, mapped=False)
    assert mapped == 0
    source, output = gpu.device_buffer(plan.source_bytes), gpu.device_buffer(plan.output_bytes)
    np.copyto(frame, image.reshape(-1))
    gpu.upload(source, frame)
    gpu.enqueue(gpu.function(plan.kernel), plan.grid, plan.block, plan.bound(source, output))
    result = np.empty(plan.output_shape, np.float32)
    gpu.download(result, output)
    gpu.synchronize()  # the emulated stream, as a GPU's, runs its work when the host waits for it
    ours = np.empty(plan.output_shape, np.float32)
    twin.preprocess(plan.bound(image.ctypes.data, ours.ctypes.data), "bgr8", "f32", "nchw")
    assert np.abs(result - ours).max() <= 4e-6
    with pytest.raises(Exception, match="does not cover"):
        gpu.enqueue(plan.kernel, (1, 1, 1), plan.block, plan.bound(source, output))


# NV12 (and YUYV) in the twin: the same per-pixel conversion as pp_yuv_to_bgr, then the BGR sampling.
COLOURS = [YuvColour(), YuvColour("bt601", "full"), YuvColour("bt709", "limited"), YuvColour("bt709", "full")]


@pytest.mark.parametrize("colour", COLOURS, ids=lambda c: c.name.replace(" ", "-"))
@pytest.mark.parametrize("spec", SPECS, ids=["ssd", "letterbox-f16-nhwc", "crop-u8", "gray"])
def test_nv12_twin_is_the_host_reference(reference, real_frames, spec, colour):
    """Padded pitches (as NVMM surfaces have) on both planes, every colour: the twin and the C++ reference agree."""
    image = real_frames[1]
    h, w = image.shape[:2]
    y, uv = to_nv12(image)
    pitch, uv_pitch = w + 64, w + 32
    y_padded = np.full((h, pitch), 0xEE, np.uint8)
    y_padded[:, :w] = y
    uv_padded = np.full((h // 2, uv_pitch), 0xEE, np.uint8)
    uv_padded[:, :w] = uv
    plan = PreprocessPlan.build(spec, "nv12", w, h, pitch=pitch, uv_pitch=uv_pitch, colour=colour)
    theirs = reference.run(plan, y_padded, uv_padded)
    ours = np.full(plan.output_shape, 77, plan.numpy_dtype)
    twin.preprocess(plan.bound(y_padded.ctypes.data, ours.ctypes.data, uv_padded.ctypes.data), "nv12", plan.dtype, plan.layout)
    diff = np.abs(ours.astype(np.float64) - theirs.astype(np.float64))
    assert diff.max() <= (1.0 if spec.dtype == "uint8" else 4e-6 * max(1.0, np.abs(theirs.astype(np.float64)).max()))
    assert (diff > 0).mean() < 1e-3


def test_yuyv_twin_is_the_host_reference(reference, real_frames):
    image = real_frames[0]
    h, w = image.shape[:2]
    packed = to_yuyv(image)
    spec = SPECS[1]
    plan = PreprocessPlan.build(spec, "yuyv", w, h)
    theirs = reference.run(plan, packed)
    ours = np.full(plan.output_shape, 77, plan.numpy_dtype)
    twin.preprocess(plan.bound(packed.ctypes.data, ours.ctypes.data), "yuyv", plan.dtype, plan.layout)
    assert np.abs(ours.astype(np.float64) - theirs.astype(np.float64)).max() <= 4e-6 * np.abs(theirs.astype(np.float64)).max()


@pytest.mark.parametrize("spec", SPECS[:3], ids=["ssd", "letterbox-f16-nhwc", "crop-u8"])
def test_nv12_twin_is_opencvs_conversion_then_the_bgr_path(real_frames, spec):
    """On real frames: the NV12 twin equals cv2.cvtColor(COLOR_YUV2BGR_NV12) followed by the BGR twin, to the bit
    (the conversion is per source pixel, so converting the taps or the whole frame is the same)."""
    for image in real_frames:
        h, w = image.shape[:2]
        y, uv = to_nv12(image)
        plan = PreprocessPlan.build(spec, "nv12", w, h)
        ours = np.full(plan.output_shape, 77, plan.numpy_dtype)
        twin.preprocess(plan.bound(y.ctypes.data, ours.ctypes.data, uv.ctypes.data), "nv12", plan.dtype, plan.layout)
        bgr = np.ascontiguousarray(nv12_to_bgr(y, uv))
        bgr_plan = PreprocessPlan.build(spec, "bgr8", w, h)
        theirs = np.full(bgr_plan.output_shape, 77, bgr_plan.numpy_dtype)
        twin.preprocess(bgr_plan.bound(bgr.ctypes.data, theirs.ctypes.data), "bgr8", bgr_plan.dtype, bgr_plan.layout)
        assert np.array_equal(ours, theirs)


def test_default_colour_is_opencvs_bt601_limited_range(real_frames):
    """pp_yuv_to_bgr with the default block is OpenCV's integer conversion bit for bit, on every pixel of a real frame."""
    y, uv = to_nv12(real_frames[0])
    image = Nv12Image(y, uv.reshape(y.shape[0] // 2, y.shape[1] // 2, 2))
    u = np.repeat(np.repeat(image.uv[..., 0], 2, 0), 2, 1)
    v = np.repeat(np.repeat(image.uv[..., 1], 2, 0), 2, 1)
    assert np.array_equal(yuv_to_bgr(image.y, u, v, YuvColour()), nv12_to_bgr(y, uv))
    assert np.array_equal(image.to_bgr(), nv12_to_bgr(y, uv))


@pytest.mark.parametrize("colour", COLOURS[1:], ids=lambda c: c.name.replace(" ", "-"))
def test_other_colours_follow_the_itu_formulas(colour):
    """Full range and BT.709 (no OpenCV conversion to compare with): within one step of the float formula
    of ITU-R BT.601 / BT.709 (Kr, Kb; limited range scales luma by 255/219 and chroma by 255/224)."""
    grid = np.arange(0, 256, 3, dtype=np.uint8)
    y, u, v = (a.reshape(-1) for a in np.meshgrid(grid, grid, grid, indexing="ij"))
    ours = yuv_to_bgr(y, u, v, colour).astype(np.float64)
    kr, kb = {"bt601": (0.299, 0.114), "bt709": (0.2126, 0.0722)}[colour.matrix]
    kg = 1 - kr - kb
    ys, cs, offset = (255 / 219, 255 / 224, 16) if colour.range == "limited" else (1.0, 1.0, 0)
    luma = np.maximum(y.astype(np.float64) - offset, 0) * ys
    cb, cr = (u.astype(np.float64) - 128) * cs, (v.astype(np.float64) - 128) * cs
    green = luma - 2 * kb * (1 - kb) / kg * cb - 2 * kr * (1 - kr) / kg * cr
    expected = np.stack([luma + 2 * (1 - kb) * cb, green, luma + 2 * (1 - kr) * cr], axis=1)
    assert np.abs(ours - np.clip(expected, 0, 255)).max() <= 1.0


def test_the_nv12_stage_on_the_emulated_device_runs_the_cpp_reference(host_build, real_frames, monkeypatch):
    """SDK_CUDA_EMULATION=host with SDK_CUDA_REFERENCE_LIB: the runtime's CUDA stage on NV12 frames launches the
    C++ host reference (the kernels' own source) and gives the numpy twins' tensor."""
    from sdk.gpu.session import DeviceChoice
    from sdk.preprocess.cuda import CudaPreprocessor

    class InputBackend:
        name = "onnxruntime"

        def __init__(self, spec) -> None:
            self.inputs = {"images": np.zeros(spec.tensor_shape, spec.dtype)}
            self.outputs: dict = {}

    spec = SPECS[1]
    frame = Nv12Image.from_bgr(real_frames[0])
    monkeypatch.setenv("SDK_CUDA_EMULATION", "host")
    outputs = []
    for library in (str(host_build.folder / "libpp_reference.so"), None):
        if library:
            monkeypatch.setenv("SDK_CUDA_REFERENCE_LIB", library)
        else:
            monkeypatch.delenv("SDK_CUDA_REFERENCE_LIB", raising=False)
        backend = InputBackend(spec)
        with CudaPreprocessor(spec, backend, DeviceChoice("cuda", "test", emulated=True)) as stage:
            stage(frame)
            assert ("C++ host reference" in stage.describe()) is bool(library) and stage.plan.kernel == "pp_nv12_f16_nhwc"
        outputs.append(backend.inputs["images"].astype(np.float64))
    assert np.abs(outputs[0] - outputs[1]).max() <= 4e-6 * np.abs(outputs[0]).max() + 2.0**-10 * np.abs(outputs[0]).max()
