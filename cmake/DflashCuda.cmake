# CUDA is enabled automatically when nvcc is found. The code is compiled and linked on machines
# without a GPU (CI); it only runs where a GPU is present.
option(DFLASH_ENABLE_CUDA "Build the CUDA implementation when nvcc is found" ON)
set(DFLASH_HAVE_CUDA OFF)
if(DFLASH_ENABLE_CUDA)
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)   # Hopper (H100/H200): the production target
    endif()
    enable_language(CUDA)
    # CMAKE_CXX_STANDARD 20 applies to CUDA sources too, and CMake 3.25 knows no nvcc flag for it:
    # without these every CUDA target fails to generate ("requires the language dialect CUDA20").
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    find_package(CUDAToolkit REQUIRED)
    set(DFLASH_HAVE_CUDA ON)
  endif()
endif()
message(STATUS "dflash: CUDA ${DFLASH_HAVE_CUDA} (archs: ${CMAKE_CUDA_ARCHITECTURES})")

# (-std=c++20 reaches nvcc through CMAKE_CUDA20_STANDARD_COMPILE_OPTION above.)
function(dflash_cuda_target target)
  dflash_project_target(${target})
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr>)
  set_target_properties(${target} PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)
endfunction()
