"""Published models the decoder tests run, obtained from PyPI (no file of them is shipped here):

- rapidocr-onnxruntime 1.4.4 (Apache-2.0; a test extra) ships PaddleOCR's ONNX models: `ch_ppocr_mobile_v2.0_cls_infer.onnx`
  (text orientation classifier, 0 / 180 degrees, softmax in the graph) and `ch_PP-OCRv4_det_infer.onnx` (DBNet text
  detector: a one-channel text probability map, sigmoid in the graph, i.e. a segmenter). Both have dynamic input
  sizes; the tests pin them in a temporary copy (the runtime binds its buffers once).
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import onnx


def rapidocr_model(name: str) -> Path:
    import rapidocr_onnxruntime

    return Path(rapidocr_onnxruntime.__file__).resolve().parent / "models" / name


def pinned(source: Path, target: Path, input_shape: list[int], output_shape: list[int]) -> Path:
    """A copy of a one-input, one-output model with static input and output shapes: the graph is otherwise unchanged."""
    model = onnx.load(str(source))
    for value, shape in ((model.graph.input[0], input_shape), (model.graph.output[0], output_shape)):
        dims = value.type.tensor_type.shape.dim
        for dim, size in zip(dims, shape, strict=True):
            dim.ClearField("dim_param")
            dim.dim_value = size
    onnx.save(model, str(target))
    return target


def text_image(text: str, width: int, height: int, seed: int, *, flipped: bool = False) -> np.ndarray:
    """A line of dark text on a light, slightly noisy background (BGR), upside down when `flipped`."""
    rng = np.random.default_rng(seed)
    image = (np.full((height, width, 3), 225) + rng.integers(-12, 12, (height, width, 3))).clip(0, 255).astype(np.uint8)
    scale = height / 40
    (tw, th), _ = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, scale, max(1, int(scale * 2)))
    x, y = max(2, (width - tw) // 2), (height + th) // 2
    cv2.putText(image, text, (x, y), cv2.FONT_HERSHEY_SIMPLEX, scale, (30, 30, 30), max(1, int(scale * 2)), cv2.LINE_AA)
    return cv2.rotate(image, cv2.ROTATE_180) if flipped else image


def document_frame(seed: int, width: int = 640, height: int = 360) -> np.ndarray:
    """A page-like frame: several lines of text of different sizes at different places."""
    rng = np.random.default_rng(seed)
    frame = (np.full((height, width, 3), 215) + rng.integers(-15, 15, (height, width, 3))).clip(0, 255).astype(np.uint8)
    words = ["PERCEPTION", "deploy 2026", "Orin NX", "STOP", "lane 3 closed", "speed 80", "EXIT 12"]
    for line in range(4):
        text = words[(seed + line * 3) % len(words)]
        scale = 0.7 + 0.5 * ((seed + line) % 3)
        x = int(20 + (width - 320) * ((seed * 3 + line * 5) % 7) / 7)
        y = int(50 + line * (height - 70) / 4)
        cv2.putText(frame, text, (x, y), cv2.FONT_HERSHEY_SIMPLEX, scale, (20, 20, 40), 2, cv2.LINE_AA)
    return frame
