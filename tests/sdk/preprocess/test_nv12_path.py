"""NV12 frames through the preprocessors: the CUDA stage picks the NV12 kernel (emulated: SDK_CUDA_EMULATION's
device with the numpy twins), reads the planes from its pinned buffer or in place from the source's device
memory, and the CPU stage converts with OpenCV. Real frames of the shipped video, converted to NV12."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from sdk.gpu.session import DeviceChoice
from sdk.pixels import Nv12Image, YuvColour
from sdk.preprocess import CpuPreprocessor
from sdk.preprocess.cuda import CudaPreprocessor
from sdk.spec.schema import Preprocess

SPEC = Preprocess(resize={"width": 320, "height": 192, "mode": "letterbox"}, normalize={"scale": 1 / 255})
CHOICE = DeviceChoice("cuda", "test", emulated=True)


class InputBackend:
    name = "onnxruntime"

    def __init__(self, spec: Preprocess) -> None:
        self.inputs = {"images": np.zeros(spec.tensor_shape, spec.dtype)}
        self.outputs: dict = {}


@pytest.fixture(scope="module")
def frames(video_path) -> list[np.ndarray]:
    capture = cv2.VideoCapture(str(video_path))
    images = []
    for _ in range(3):
        ok, image = capture.read()
        assert ok
        images.append(image.copy())
    capture.release()
    return images


def cpu(spec: Preprocess, image) -> np.ndarray:
    output = np.zeros(spec.tensor_shape, spec.dtype)
    CpuPreprocessor(spec, output)(image)
    return output


def test_cpu_stage_converts_nv12_with_opencv(frames):
    nv12 = Nv12Image.from_bgr(frames[0])
    converted = cv2.cvtColor(np.concatenate([nv12.y, nv12.uv.reshape(nv12.height // 2, -1)]), cv2.COLOR_YUV2BGR_NV12)
    assert np.array_equal(cpu(SPEC, nv12), cpu(SPEC, converted))


def test_cuda_stage_picks_the_nv12_kernel_and_copies_one_and_a_half_bytes_a_pixel(monkeypatch, frames):
    monkeypatch.setenv("SDK_CUDA_EMULATION", "host")
    bgr_backend, nv12_backend = InputBackend(SPEC), InputBackend(SPEC)
    bgr_stage = CudaPreprocessor(SPEC, bgr_backend, CHOICE, memory="copy")
    nv12_stage = CudaPreprocessor(SPEC, nv12_backend, CHOICE, memory="copy")
    with bgr_stage, nv12_stage:
        for image in frames:
            nv12 = Nv12Image.from_bgr(image)
            converted = nv12.to_bgr()
            bgr_stage(converted)
            nv12_stage(nv12)
            # The NV12 kernel equals OpenCV's conversion followed by the BGR kernel, to the bit.
            assert np.array_equal(nv12_backend.inputs["images"], bgr_backend.inputs["images"])
        assert nv12_stage.plan.kernel == "pp_nv12_f32_nchw" and nv12_stage.report()["source_format"] == "nv12"
        h, w = frames[0].shape[:2]
        assert nv12_stage.session.gpu.bytes_copied["to_device"] == len(frames) * w * h * 3 // 2
        assert bgr_stage.session.gpu.bytes_copied["to_device"] == len(frames) * w * h * 3
    # And the CPU stage on the same NV12 frame: the known rounding of the two samplers (a quarter step).
    assert np.abs(nv12_backend.inputs["images"] - cpu(SPEC, Nv12Image.from_bgr(frames[-1]))).max() <= 0.25 / 255


def test_frames_in_the_sources_device_memory_are_read_in_place(monkeypatch, frames):
    """A source that holds NV12 in memory the GPU reads (pitched like an NVMM surface) hands the addresses:
    no copy, the kernel reads the planes where they are, pitches and colour from the frame."""
    monkeypatch.setenv("SDK_CUDA_EMULATION", "host")
    image = frames[1]
    h, w = image.shape[:2]
    pitch = (w + 255) // 256 * 256  # NvBufSurface pitches are padded (here to 256 bytes)
    colour = YuvColour("bt709", "limited")
    reference = Nv12Image.from_bgr(image)
    backend, host_backend = InputBackend(SPEC), InputBackend(SPEC)
    with CudaPreprocessor(SPEC, backend, CHOICE, memory="copy") as stage, CudaPreprocessor(SPEC, host_backend, CHOICE, memory="copy") as host_stage:
        gpu = stage.session.gpu
        address = gpu.device_buffer(pitch * h + pitch * (h // 2), "the source's NV12 surface")
        surface = np.frombuffer((np.ctypeslib.ctypes.c_ubyte * (pitch * h * 3 // 2)).from_address(address), np.uint8)
        y = surface[: pitch * h].reshape(h, pitch)[:, :w]
        uv = surface[pitch * h :].reshape(h // 2, pitch)[:, :w].reshape(h // 2, w // 2, 2)
        np.copyto(y, reference.y)
        np.copyto(uv, reference.uv)
        resident = Nv12Image(y, uv, colour, device=(address, address + pitch * h))
        stage(resident)
        assert gpu.bytes_copied["to_device"] == 0  # nothing uploaded: the kernel read the source's memory
        assert (stage.plan.source_pitch, stage.plan.uv_pitch) == (pitch, pitch)
        host_stage(Nv12Image(reference.y, reference.uv, colour))  # the same frame from host memory, copied
    assert np.array_equal(backend.inputs["images"], host_backend.inputs["images"])


def test_nv12_views_of_opencvs_gstreamer_buffer():
    """OpenCV's GStreamer backend returns NV12 caps as one (H*3/2) x W Mat: views of it, no copy."""
    stacked = np.arange(6 * 4, dtype=np.uint8).reshape(6, 4)
    image = Nv12Image.from_opencv(stacked)
    assert image.shape == (4, 4, 3) and (image.pitch, image.uv_pitch) == (4, 4)
    assert np.shares_memory(image.y, stacked) and np.shares_memory(image.uv, stacked)
    assert image.uv[1, 1].tolist() == [22, 23]


FRAMES = 12  # the walkway's first 12 frames hold 34 people: every comparison below has more than 30 detections


def pedestrian(tmp_path, device: str, video_path, pixel_format: str) -> object:
    import shutil
    from pathlib import Path

    example = Path(__file__).resolve().parents[3] / "pipelines" / "pedestrian.yaml"
    (tmp_path / "assets").mkdir(exist_ok=True)
    if not (tmp_path / "assets" / "vtest.avi").exists():
        shutil.copy(video_path, tmp_path / "assets" / "vtest.avi")
    text = example.read_text().replace("  dtype: float32\n", f"  dtype: float32\n  device: {device}\n", 1)
    text = text.replace("    rate_fps: 30 ", "    rate_fps: null ")
    text = text.replace("  - {kind: video, path: annotated.mp4}   # MPEG-4 part 2, plays everywhere\n", "")
    uri = {"nv12": "file://assets/vtest.avi?format=nv12", "converted": "images://assets/converted"}[pixel_format]
    text = text.replace("uri: file://assets/vtest.avi", f"uri: {uri}")
    path = tmp_path / f"pedestrian_{device}_{pixel_format}.yaml"
    path.write_text(text)
    return path


def run(path, artifacts, out, monkeypatch, emulate: bool):
    import json

    from sdk.runtime import PipelineRunner
    from sdk.spec import load_pipeline

    if emulate:
        monkeypatch.setenv("SDK_CUDA_EMULATION", "host")
    else:
        monkeypatch.delenv("SDK_CUDA_EMULATION", raising=False)
    result = PipelineRunner(load_pipeline(path, check_files=False), artifacts, out, max_frames=FRAMES).run()
    return result, [json.loads(line) for line in (out / "detections.jsonl").read_text().splitlines()]


def test_nv12_replay_on_the_emulated_cuda_path_gives_the_bgr_cuda_paths_detections(tmp_path, monkeypatch, prepared_example, video_path):
    """The real video replayed as NV12 (`file://...?format=nv12`) through the whole runtime on the emulated CUDA
    path, against the BGR CUDA path on the same frames converted by OpenCV (cvtColor COLOR_YUV2BGR_NV12, kept
    as PNG: lossless): 99 % of detections within IoU 0.98 and score 0.02. And the CPU path on the NV12 frames."""
    from sdk.postprocess.compare import matched_share

    converted = tmp_path / "assets" / "converted"
    converted.mkdir(parents=True)
    capture = cv2.VideoCapture(str(video_path))
    for index in range(FRAMES):
        ok, image = capture.read()
        assert ok
        cv2.imwrite(str(converted / f"{index:04d}.png"), Nv12Image.from_bgr(image).to_bgr())
    capture.release()
    bgr_result, bgr = run(pedestrian(tmp_path, "cuda", video_path, "converted"), prepared_example, tmp_path / "bgr", monkeypatch, emulate=True)
    nv12_result, nv12 = run(pedestrian(tmp_path, "cuda", video_path, "nv12"), prepared_example, tmp_path / "nv12", monkeypatch, emulate=True)
    cpu_result, cpu_nv12 = run(pedestrian(tmp_path, "cpu", video_path, "nv12"), prepared_example, tmp_path / "cpu", monkeypatch, emulate=False)
    section = nv12_result.preprocess
    assert (section["device"], section["emulated"], section["kernel"], section["source_format"]) == ("cuda", True, "pp_nv12_f32_nchw", "nv12")
    assert bgr_result.preprocess["kernel"] == "pp_bgr8_f32_nchw"
    assert cpu_result.preprocess["device"] == "cpu" and cpu_result.preprocess["source_format"] == "nv12"
    assert len(nv12) == len(bgr) == len(cpu_nv12) == FRAMES
    share, total = matched_share(nv12, bgr)
    assert total > 30 and share >= 0.99, (share, total)
    assert [d["detections"] for d in nv12] == [d["detections"] for d in bgr]  # measured: identical (the same kernel math)
    share, total = matched_share(nv12, cpu_nv12)
    assert total > 30 and share >= 0.99, (share, total)
