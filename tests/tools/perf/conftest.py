"""Real models profiled once per session (a few frames each): the example's prepared SSDLite, YOLOX-Nano, and PaddleOCR's
detector, recogniser and direction classifier from rapidocr-onnxruntime (tests/reference-packages.txt), at fixed shapes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import TEST_ASSETS

PADDLE = {"det": ("ch_PP-OCRv4_det_infer.onnx", (1, 3, 320, 320)), "rec": ("ch_PP-OCRv4_rec_infer.onnx", (1, 3, 48, 320)),
          "cls": ("ch_ppocr_mobile_v2.0_cls_infer.onnx", (1, 3, 48, 192))}  # fmt: skip


def fixed_shape(source: Path, shape: tuple[int, ...], out: Path) -> Path:
    """The model with its one input fixed to `shape` (what model.prepare.inputs does for a pipeline)."""
    import onnx

    model = onnx.load(str(source))
    for dim, value in zip(model.graph.input[0].type.tensor_type.shape.dim, shape, strict=True):
        dim.Clear()
        dim.dim_value = value
    for output in model.graph.output:
        output.type.tensor_type.ClearField("shape")
    onnx.save(onnx.shape_inference.infer_shapes(model, data_prop=True), str(out))
    return out


@pytest.fixture(scope="session")
def real_models(prepared_example, tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("real-models")
    found = {"ssdlite": prepared_example.model_path}
    found["yolox"] = TEST_ASSETS / "yolox_nano.onnx"  # shipped with its provenance (tests/integration/assets/PROVENANCE.md)
    try:
        import rapidocr_onnxruntime
    except ImportError:
        return found
    models = Path(rapidocr_onnxruntime.__file__).parent / "models"
    for name, (file, shape) in PADDLE.items():
        if (models / file).is_file():
            found[f"paddle-{name}"] = fixed_shape(models / file, shape, folder / f"{name}.onnx")
    return found


@pytest.fixture(scope="session")
def real_profiles(real_models, tmp_path_factory) -> dict[str, tuple[Path, dict, Path]]:
    """name -> (model, raw profile, its folder): 2 frames after 1 warm-up each, ONNX Runtime as the runtime uses it."""
    from sdk.profiling.onnxruntime_profile import profile_onnxruntime

    found = {}
    for name, path in real_models.items():
        folder = tmp_path_factory.mktemp(f"profile-{name}")
        found[name] = (path, profile_onnxruntime(path, folder, frames=2, warmup=1, threads=1, spinning=False), folder)
    return found
