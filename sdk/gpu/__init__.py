"""The CUDA preprocessing path: plans in plain Python (tested anywhere), a thin cuda-python adapter (device only).

plan.py      kernel choice, parameter block, launch geometry and buffer sizes for one source size
params.py    the kernels' parameter block (ctypes, the layout of plugins_cuda/include/pp_params.h)
binaries.py  which image to load for a compute capability and driver: cubin, PTX, or NVRTC from source
decode.py    the SSD decode kernel's plan: parameter block, anchors in centre form, launch geometry
nvrtc.py     NVRTC compilation of the same source (runs without a GPU), ptxas resource report
driver.py    the adapter: CudaModule (context, module, stream, events), CudaPreprocessor, CudaSsdDecoder;
             imports cuda-python lazily
"""

from sdk.gpu.binaries import ImageChoice, KernelManifest, choose_image
from sdk.gpu.plan import PreprocessPlan, launch_geometry

__all__ = ["ImageChoice", "KernelManifest", "PreprocessPlan", "choose_image", "launch_geometry"]
