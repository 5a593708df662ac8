"""The kernels' parameter block, laid out as `struct PpParams` in plugins_cuda/include/pp_params.h.

ctypes is in the standard library, so the device packs the block without a compiler; a test reads
the offsets the C compiler chose (the host reference exports them) and compares them with these.
"""

from __future__ import annotations

import ctypes

# Enumerations shared with pp_params.h (PP_FMT_*, PP_DT_*, PP_LAYOUT_*).
FORMATS = {"bgr8": 0, "rgb8": 1, "nv12": 2, "yuyv": 3}
DTYPES = {"f32": 0, "f16": 1, "u8": 2, "i8": 3}
LAYOUTS = {"nchw": 0, "nhwc": 1}


class PpParams(ctypes.Structure):
    _fields_ = [
        ("src", ctypes.c_uint64),
        ("src_uv", ctypes.c_uint64),
        ("dst", ctypes.c_uint64),
        ("src_pitch", ctypes.c_int32),
        ("uv_pitch", ctypes.c_int32),
        ("crop_x", ctypes.c_int32),
        ("crop_y", ctypes.c_int32),
        ("crop_w", ctypes.c_int32),
        ("crop_h", ctypes.c_int32),
        ("out_w", ctypes.c_int32),
        ("out_h", ctypes.c_int32),
        ("pad_x", ctypes.c_int32),
        ("pad_y", ctypes.c_int32),
        ("content_w", ctypes.c_int32),
        ("content_h", ctypes.c_int32),
        ("ax", ctypes.c_float),
        ("bx", ctypes.c_float),
        ("ay", ctypes.c_float),
        ("by", ctypes.c_float),
        ("gain", ctypes.c_float * 3),
        ("offset", ctypes.c_float * 3),
        ("pad_value", ctypes.c_float),
        ("quant_scale", ctypes.c_float),
        ("channels", ctypes.c_int32),
        ("pick", ctypes.c_int32 * 3),
        ("yuv", ctypes.c_int32 * 6),  # YUV sources: luma offset and Q20 coefficients (sdk/pixels.py: YuvColour)
    ]


def field_offsets() -> list[int]:
    """sizeof, then every field's offset in declaration order (what pp_params_layout() returns in C)."""
    return [ctypes.sizeof(PpParams)] + [getattr(PpParams, name).offset for name, _ in PpParams._fields_]


def kernel_arguments(params: PpParams) -> tuple[ctypes.Array, int]:
    """cuLaunchKernel's `kernelParams`: an array of one pointer, to the parameter block.

    Returns the array (keep it alive until the launch returns) and its address.
    """
    pointers = (ctypes.c_void_p * 1)(ctypes.addressof(params))
    return pointers, ctypes.addressof(pointers)
