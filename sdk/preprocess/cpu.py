"""CPU preprocessing with OpenCV: crop, resize (stretch or letterbox), colour, normalise, layout, dtype.

One `cv2.warpAffine` does crop + resize + letterbox placement for every coordinate mode:
`cv2.resize` only knows half-pixel centres, and the asymmetric grid TF-trained models need
moves detection scores by up to 0.3 when ignored. Edges are clamped (BORDER_REPLICATE), as
in ONNX Resize and TF. The warp runs on float32 pixels: on 8-bit input OpenCV would round
weights and result to fixed point, which is half an 8-bit step off TF's resize and enough
to flip which of two near-equal anchors survives NMS. In float, OpenCV 5 samples at the exact
position; OpenCV 4 rounds positions to 1/32 pixel, so there the same sampling is done by
`sdk.preprocess.sampling.SeparableBilinear` (found by a probe): host and device give the same
pixels whichever OpenCV each has.
Buffers are allocated when a source size is first seen; a frame allocates nothing.
"""

from __future__ import annotations

import numpy as np

from sdk.errors import ConfigError
from sdk.geometry import ResizeGeometry
from sdk.pixels import Nv12Image
from sdk.preprocess.sampling import SAMPLERS, SeparableBilinear, warp_is_exact
from sdk.spec.schema import Preprocess
from sdk.stage import Stage


class CpuPreprocessor(Stage):
    name = "preprocess"
    session = None  # no CUDA session: the decoders run on the CPU
    choice = None  # the DeviceChoice that picked this stage (create_preprocessor sets it)

    def __init__(self, spec: Preprocess, output: np.ndarray, *, sampler: str = "auto") -> None:
        """`sampler`: "warp" (OpenCV's warpAffine), "separable" (`SeparableBilinear`) or "auto": the
        warp where this OpenCV samples at exact positions, else the separable sampler."""
        if sampler not in SAMPLERS:
            raise ValueError(f"sampler {sampler!r}: expected one of {', '.join(SAMPLERS)}")
        if tuple(output.shape) != spec.tensor_shape or output.dtype != np.dtype(spec.dtype):
            raise ConfigError(
                f"preprocess produces {list(spec.tensor_shape)} {spec.dtype} but the model input is {list(output.shape)} {output.dtype}",
                hint="make preprocess.resize, layout and dtype match the model's input tensor",
            )
        self.spec = spec
        self.output = output
        h, w = spec.resize.height, spec.resize.width
        self._canvas = np.full((h, w, 3), spec.resize.pad_value, np.float32)
        self._gray = np.empty((h, w), np.float32) if spec.color == "gray" else None
        self._scratch = np.empty((h, w), np.float32) if spec.dtype != "float32" else None
        self._source = np.empty((0, 0, 3), np.float32)  # the crop as float32, sized on first use
        n = spec.normalize
        channels = spec.channels
        self._gain = [np.float32(n.scale / n.std[c]) for c in range(channels)]
        self._offset = [np.float32(-n.mean[c] / n.std[c]) for c in range(channels)]
        # Which canvas (BGR) channel feeds output channel c: the colour swap costs nothing.
        self._source_channel = {"rgb": (2, 1, 0), "bgr": (0, 1, 2), "gray": (0,)}[spec.color]
        self.sampler = ("warp" if warp_is_exact() else "separable") if sampler == "auto" else sampler
        self._geometry: ResizeGeometry | None = None
        self._matrix: np.ndarray | None = None
        self._separable: SeparableBilinear | None = None
        self._bgr: np.ndarray | None = None  # NV12 frames converted to BGR
        self.source_format = "bgr8"

    def describe(self) -> str:
        import cv2

        how = "OpenCV warpAffine" if self.sampler == "warp" else "separable bilinear"
        return f"CPU, {how} (OpenCV {cv2.__version__})"

    def report(self) -> dict:
        """The report's `preprocess` section: the device used, why, and how."""
        chosen = {"device": "cpu", "reason": "the CPU preprocessor was asked for", "emulated": False}
        if self.choice is not None:
            chosen = self.choice.as_dict()
        return {**chosen, "how": self.describe(), "source_format": self.source_format}

    def geometry_for(self, width: int, height: int) -> ResizeGeometry:
        g = self._geometry
        if g is None or g.source_width != width or g.source_height != height:
            g = ResizeGeometry.plan(width, height, self.spec.resize, self.spec.crop)
            self._geometry, self._matrix = g, g.affine_to_source()
            self._separable = SeparableBilinear(g, 3) if self.sampler == "separable" else None
            if self.spec.resize.mode == "letterbox":
                self._canvas[...] = self.spec.resize.pad_value  # padding is fixed per geometry
        return g

    def __call__(self, image) -> ResizeGeometry:
        import cv2

        if isinstance(image, Nv12Image):  # OpenCV's NV12 conversion (the kernel's, bit for bit), into a reused buffer
            if self._bgr is None or self._bgr.shape != image.shape:
                self._bgr = np.empty(image.shape, np.uint8)
            image = image.to_bgr(out=self._bgr)
            self.source_format = "nv12"
        if image.ndim == 2:
            image = cv2.cvtColor(image, cv2.COLOR_GRAY2BGR)
        height, width = image.shape[:2]
        g = self.geometry_for(width, height)
        crop = image[g.crop_y : g.crop_y + g.crop_height, g.crop_x : g.crop_x + g.crop_width]
        content = self._canvas[g.pad_y : g.pad_y + g.content_height, g.pad_x : g.pad_x + g.content_width]
        if self._separable is not None:
            self._separable(crop, content)
        else:
            if self._source.shape != crop.shape:
                self._source = np.empty(crop.shape, np.float32)
            np.copyto(self._source, crop, casting="unsafe")
            cv2.warpAffine(
                self._source,
                self._matrix,
                (g.content_width, g.content_height),
                dst=content,
                flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP,
                borderMode=cv2.BORDER_REPLICATE,
            )
        canvas = self._canvas
        if self._gray is not None:
            cv2.cvtColor(canvas, cv2.COLOR_BGR2GRAY, dst=self._gray)
            canvas = self._gray[:, :, None]
        self._write_tensor(canvas)
        return g

    def _write_tensor(self, canvas: np.ndarray) -> None:
        nchw = self.spec.layout == "nchw"
        for c, source_c in enumerate(self._source_channel):
            plane = self.output[0, c] if nchw else self.output[0, :, :, c]
            pixels = canvas[:, :, source_c]
            if self.spec.dtype == "uint8":  # raw pixels, rounded to the nearest step
                np.add(pixels, np.float32(0.5), out=self._scratch)
                np.copyto(plane, self._scratch, casting="unsafe")
            elif self._scratch is not None:  # float16: compute in float32, store half
                np.multiply(pixels, self._gain[c], out=self._scratch, dtype=np.float32)
                np.add(self._scratch, self._offset[c], out=self._scratch)
                np.copyto(plane, self._scratch, casting="same_kind")
            else:
                np.multiply(pixels, self._gain[c], out=plane, dtype=np.float32)
                np.add(plane, self._offset[c], out=plane)
