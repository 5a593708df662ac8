"""The numpy twins the emulated device runs (sdk/gpu/reference.py) against the C++ host reference of the kernels,
with the same bound parameter blocks, and the emulated device driven by the C++ reference itself."""

from __future__ import annotations

import numpy as np
import pytest

from sdk.gpu import reference as twin
from sdk.gpu.decode import YoloDecodePlan
from sdk.gpu.emulation import EmulatedCuda
from sdk.gpu.plan import PreprocessPlan
from sdk.spec.schema import Postprocess, Preprocess

from .helpers import host_yolo, yolo_outputs

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
    ours = np.empty(plan.output_shape, np.float32)
    twin.preprocess(plan.bound(image.ctypes.data, ours.ctypes.data), "bgr8", "f32", "nchw")
    assert np.abs(result - ours).max() <= 4e-6
    with pytest.raises(Exception, match="does not cover"):
        gpu.enqueue(plan.kernel, (1, 1, 1), plan.block, plan.bound(source, output))
