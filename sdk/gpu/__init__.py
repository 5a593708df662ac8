"""The CUDA preprocessing path: plans in plain Python (tested anywhere), a thin cuda-python adapter (device only).

plan.py      kernel choice, parameter block, launch geometry and buffer sizes for one source size
params.py    the kernels' parameter block (ctypes, the layout of plugins_cuda/include/pp_params.h)
binaries.py  which image to load for a compute capability and driver: cubin, PTX, or NVRTC from source
decode.py    the SSD decode kernel's plan: parameter block, anchors in centre form, launch geometry
nvrtc.py     NVRTC compilation of the same source (runs without a GPU), ptxas resource report
driver.py    the adapter: CudaModule (context, module, stream, events), CudaPreprocessor, CudaSsdDecoder;
             imports cuda-python lazily
"""

from sdk.lazy import lazy_attributes

# Loaded at first use, not with the package: every start that chooses `preprocess.device` imports sdk.gpu.session, and
# a start on the CPU path needs no kernel plan.
_LAZY = {
    "ImageChoice": "sdk.gpu.binaries",
    "KernelManifest": "sdk.gpu.binaries",
    "choose_image": "sdk.gpu.binaries",
    "PreprocessPlan": "sdk.gpu.plan",
    "launch_geometry": "sdk.gpu.plan",
}


__getattr__ = lazy_attributes(__name__, _LAZY)


__all__ = ["ImageChoice", "KernelManifest", "PreprocessPlan", "choose_image", "launch_geometry"]
