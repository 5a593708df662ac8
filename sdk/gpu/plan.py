"""Everything a preprocessing launch needs, decided in plain Python: kernel, parameters, geometry, buffers.

The CUDA adapter only maps a plan onto driver calls, so all of this is tested without a GPU,
and the host reference runs the very same parameter block.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from sdk.errors import ConfigError
from sdk.geometry import ResizeGeometry
from sdk.gpu.params import DTYPES, FORMATS, PpParams
from sdk.pixels import BT601_LIMITED, YuvColour
from sdk.spec.schema import Preprocess

# Must not exceed __launch_bounds__ in plugins_cuda/src/preprocess.cu (PP_BLOCK_THREADS).
BLOCK_THREADS = 256
# A warp spans 32 consecutive output pixels of a row: coalesced stores in both layouts.
BLOCK = (32, 8, 1)
MAX_GRID_Y = 65535
_SPEC_DTYPES = {"float32": "f32", "float16": "f16", "uint8": "u8"}
_NUMPY = {"f32": np.float32, "f16": np.float16, "u8": np.uint8, "i8": np.int8}
# Every kernel plugins_cuda/src/preprocess.cu defines: pp_<format>_<type>_<layout>.
KERNEL_NAMES = tuple(f"pp_{f}_{d}_{layout}" for f in FORMATS for d in DTYPES for layout in ("nchw", "nhwc"))
_PICK = {"rgb": (2, 1, 0), "bgr": (0, 1, 2), "gray": (0, 0, 0)}  # which B, G, R channel feeds output channel c


def launch_geometry(out_width: int, out_height: int, block: tuple[int, int, int] = BLOCK) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(grid, block): one thread per output pixel, the fewest blocks that cover the output."""
    bx, by, bz = block
    if bx * by * bz > BLOCK_THREADS or bx % 32:
        raise ValueError(f"block {block} must be whole warps along x and at most {BLOCK_THREADS} threads")
    grid = (-(-out_width // bx), -(-out_height // by), 1)
    if grid[1] > MAX_GRID_Y:
        raise ConfigError(f"output height {out_height} needs {grid[1]} blocks in y; CUDA allows {MAX_GRID_Y}")
    return grid, block


def source_layout(source_format: str, width: int, height: int, pitch: int | None = None, uv_pitch: int | None = None) -> tuple[int, int, int, int]:
    """(pitch, bytes, uv_pitch, uv_bytes) of one source frame; pitches default to tightly packed rows."""
    if source_format not in FORMATS:
        raise ConfigError(f"unknown source pixel format {source_format!r}; known: {', '.join(FORMATS)}")
    half_w, half_h = (width + 1) // 2, (height + 1) // 2  # chroma of odd sizes covers the last pixel
    row = {"bgr8": 3 * width, "rgb8": 3 * width, "nv12": width, "yuyv": 4 * half_w}[source_format]
    pitch = row if pitch is None else pitch
    if pitch < row:
        raise ConfigError(f"{source_format} rows of {width} pixels need a pitch of at least {row} bytes, got {pitch}")
    if source_format != "nv12":
        return pitch, pitch * height, 0, 0
    uv_pitch = 2 * half_w if uv_pitch is None else uv_pitch
    if uv_pitch < 2 * half_w:
        raise ConfigError(f"nv12 chroma rows need a pitch of at least {2 * half_w} bytes, got {uv_pitch}")
    return pitch, pitch * height, uv_pitch, uv_pitch * half_h


@dataclass(frozen=True)
class PreprocessPlan:
    geometry: ResizeGeometry
    source_format: str
    dtype: str  # f32, f16, u8 or i8
    layout: str
    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    source_pitch: int
    source_bytes: int
    uv_pitch: int
    uv_bytes: int
    output_shape: tuple[int, int, int, int]
    output_bytes: int
    params: PpParams

    @classmethod
    def build(
        cls,
        spec: Preprocess,
        source_format: str,
        width: int,
        height: int,
        *,
        pitch: int | None = None,
        uv_pitch: int | None = None,
        int8_scale: float | None = None,
        colour: YuvColour = BT601_LIMITED,
    ) -> PreprocessPlan:
        """The plan for frames of one size. `int8_scale` (the model input's quantization scale) turns a
        float32 spec into INT8 output: q = round_half_even(value / scale), saturated to [-128, 127].
        `colour`: the YUV matrix and range of nv12 / yuyv sources (BT.601 limited range, OpenCV's, by default)."""
        pitch, source_bytes, uv_pitch, uv_bytes = source_layout(source_format, width, height, pitch, uv_pitch)
        dtype = _SPEC_DTYPES[spec.dtype]
        if int8_scale is not None:
            if dtype != "f32" or not int8_scale > 0:
                raise ConfigError("INT8 output quantizes normalised float32 values: use dtype float32 and a positive scale")
            dtype = "i8"
        g = ResizeGeometry.plan(width, height, spec.resize, spec.crop)
        grid, block = launch_geometry(g.out_width, g.out_height)
        ax, bx, ay, by = g.sampling()
        n = spec.normalize
        channels = spec.channels
        params = PpParams(
            src_pitch=pitch,
            uv_pitch=uv_pitch,
            crop_x=g.crop_x,
            crop_y=g.crop_y,
            crop_w=g.crop_width,
            crop_h=g.crop_height,
            out_w=g.out_width,
            out_h=g.out_height,
            pad_x=g.pad_x,
            pad_y=g.pad_y,
            content_w=g.content_width,
            content_h=g.content_height,
            ax=ax,
            bx=bx,
            ay=ay,
            by=by,
            pad_value=float(spec.resize.pad_value),
            quant_scale=int8_scale or 1.0,
            channels=channels,
        )
        # Gain and offset as the CPU path computes them: float32(scale / std), float32(-mean / std).
        params.gain[:] = [float(np.float32(n.scale / n.std[c])) for c in range(3)]
        params.offset[:] = [float(np.float32(-n.mean[c] / n.std[c])) for c in range(3)]
        params.pick[:] = _PICK[spec.color]
        params.yuv[:] = colour.coefficients()
        shape = spec.tensor_shape
        output_bytes = int(np.prod(shape)) * np.dtype(_NUMPY[dtype]).itemsize
        kernel = f"pp_{source_format}_{dtype}_{spec.layout}"
        return cls(g, source_format, dtype, spec.layout, kernel, grid, block, pitch, source_bytes, uv_pitch, uv_bytes, shape, output_bytes, params)

    @property
    def numpy_dtype(self) -> np.dtype:
        return np.dtype(_NUMPY[self.dtype])

    @property
    def format_id(self) -> int:
        return FORMATS[self.source_format]

    @property
    def dtype_id(self) -> int:
        return DTYPES[self.dtype]

    @property
    def layout_id(self) -> int:
        return 0 if self.layout == "nchw" else 1

    def bound(self, src: int, dst: int, src_uv: int = 0) -> PpParams:
        """A copy of the parameter block with the buffer addresses of one launch filled in."""
        params = PpParams.from_buffer_copy(self.params)
        params.src, params.src_uv, params.dst = src, src_uv, dst
        if self.source_format == "nv12" and not src_uv:
            raise ConfigError("an nv12 launch needs the address of the chroma plane")
        return params

    def minimum_bytes(self) -> int:
        """Read every source byte the crop covers once, write the output once: the floor for any kernel."""
        g = self.geometry
        if self.source_format == "nv12":
            chroma = 2 * ((g.crop_width + 1) // 2) * ((g.crop_height + 1) // 2)
            read = g.crop_width * g.crop_height + chroma
        else:
            read = g.crop_width * g.crop_height * (3 if self.source_format in ("bgr8", "rgb8") else 2)
        return read + self.output_bytes


def params_bytes(params: PpParams) -> bytes:
    return ctypes.string_at(ctypes.addressof(params), ctypes.sizeof(params))
