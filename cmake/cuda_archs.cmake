# CUDA architectures of the vehicle computers: SASS for each, plus PTX of the lowest so a newer
# GPU (or a driver's JIT) can still run the kernels. sdk/gpu/binaries.py reads the same list.
set(PLUGINS_CUDA_ARCHS 87 110 CACHE STRING "SASS architectures: 87 = Jetson AGX Orin / Orin NX / DRIVE Orin, 110 = Thor")
set(PLUGINS_CUDA_PTX_ARCH 87 CACHE STRING "virtual architecture of the PTX that is carried for forward compatibility")
