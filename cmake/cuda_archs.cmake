# CUDA architectures of the vehicle computers: SASS for each, plus PTX of the lowest so a newer
# GPU (or a driver's JIT) can still run the kernels. The build writes what it chose into
# preprocess.json, which sdk/gpu/binaries.py reads.
#
# The SASS list depends on the nvcc that builds it (never a default the installed nvcc refuses):
#   - sm_87 (Jetson AGX Orin / Orin NX / DRIVE Orin) exists from CUDA 11.4;
#   - Thor is sm_101 in CUDA 12.8 and 12.9 (CUDA 12.8 release notes: SM_100, SM_101, SM_120 added) and
#     sm_110 from CUDA 13.0 ("Thor SM renaming from sm_101 to sm_110 starting from CUDA 13.0; for CUDA
#     12.9 and older releases Thor stays labeled as sm_101", NVIDIA MathDx / nvCOMPDx release notes for
#     CUDA 13.0); CUDA 12.6 (JetPack 6) knows neither, and CUDA 13 no longer accepts sm_101.
# -DPLUGINS_CUDA_ARCHS="..." overrides the default; it is still checked against `nvcc --list-gpu-code`.
set(PLUGINS_CUDA_PTX_ARCH 87 CACHE STRING "virtual architecture of the PTX that is carried for forward compatibility")

# plugins_cuda_default_archs(<nvcc release, e.g. 12.6> <out variable>): the SASS architectures for Orin
# and Thor that this nvcc release can build; empty when it is older than CUDA 11.4 (no sm_87).
function(plugins_cuda_default_archs release out)
  if(release VERSION_LESS 11.4)
    set(archs "")
  elseif(release VERSION_LESS 12.8)
    set(archs 87)
  elseif(release VERSION_LESS 13.0)
    set(archs 87 101)
  else()
    set(archs 87 110)
  endif()
  set(${out} "${archs}" PARENT_SCOPE)
endfunction()

# plugins_cuda_refused_archs(<nvcc> <archs> <out variable>): the architectures of <archs> that are not
# in `nvcc --list-gpu-code` (CUDA 11.0 and later); empty when nvcc cannot list them.
function(plugins_cuda_refused_archs nvcc archs out)
  execute_process(COMMAND ${nvcc} --list-gpu-code OUTPUT_VARIABLE listed RESULT_VARIABLE failed ERROR_QUIET)
  set(refused "")
  if(NOT failed AND listed MATCHES "sm_")
    string(REGEX MATCHALL "sm_[0-9]+[a-z]?" known "${listed}")
    foreach(arch IN LISTS archs)
      if(NOT "sm_${arch}" IN_LIST known)
        list(APPEND refused ${arch})
      endif()
    endforeach()
  endif()
  set(${out} "${refused}" PARENT_SCOPE)
endfunction()
