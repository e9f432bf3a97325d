# CUDA and NCCL are optional: the planning layer, the CLI and the CPU reference always
# build; GPU code builds where nvcc is found (it compiles on CPU-only machines too).
set(TIDE_HAVE_CUDA OFF)
set(TIDE_HAVE_NCCL OFF)
if(TIDE_CUDA STREQUAL "IF_GPU")
  # What the machine can run: CUDA parts only where a GPU is visible (the package's default).
  execute_process(COMMAND nvidia-smi -L RESULT_VARIABLE _tide_smi_rc OUTPUT_VARIABLE _tide_smi
                  ERROR_QUIET)
  if(NOT _tide_smi_rc EQUAL 0 OR NOT _tide_smi MATCHES "GPU")
    set(TIDE_CUDA "OFF")
    message(STATUS "TIDE: no GPU visible, building without CUDA (TIDE_CUDA=ON builds it)")
  endif()
endif()
if(NOT TIDE_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # Hopper with its architecture-specific features (TMA, mbarrier transactions).
      set(CMAKE_CUDA_ARCHITECTURES 90a)
    endif()
    enable_language(CUDA)
    # CMake < 3.27 does not know nvcc's C++20 flag ("requires the language dialect CUDA20").
    if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    endif()
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(TIDE_HAVE_CUDA ON)
    # NCCL: TIDE_NCCL_ROOT (cache variable or environment) first. The Python module then
    # takes the nvidia-nccl wheel that PyTorch loads, ahead of any system copy, so that the
    # process holds one libnccl.so.2 (both resolve to the SONAME torch loaded first; the
    # wheel keeps the headers and the library of one version). Other builds search the CUDA
    # toolkit and the system, then the wheel (the GPU machines have NCCL only there, as
    # lib/libnccl.so.2 with no unversioned link).
    set(TIDE_NCCL_ROOT "$ENV{TIDE_NCCL_ROOT}" CACHE PATH "NCCL install prefix (include/, lib/)")
    set(_tide_nccl_wheel "")
    find_package(Python3 COMPONENTS Interpreter QUIET)
    if(Python3_Interpreter_FOUND)
      execute_process(
        COMMAND ${Python3_EXECUTABLE} -c
                "import nvidia.nccl as n; print(list(n.__path__)[0])"
        OUTPUT_VARIABLE _tide_nccl_wheel OUTPUT_STRIP_TRAILING_WHITESPACE
        RESULT_VARIABLE _tide_nccl_wheel_rc ERROR_QUIET)
      if(NOT _tide_nccl_wheel_rc EQUAL 0)
        set(_tide_nccl_wheel "")
      endif()
    endif()
    if(TIDE_PYTHON AND _tide_nccl_wheel AND NOT TIDE_NCCL_ROOT)
      find_path(TIDE_NCCL_INCLUDE nccl.h PATHS ${_tide_nccl_wheel} PATH_SUFFIXES include
                NO_DEFAULT_PATH)
      find_library(TIDE_NCCL_LIBRARY NAMES nccl libnccl.so.2 PATHS ${_tide_nccl_wheel}
                   PATH_SUFFIXES lib lib64 NO_DEFAULT_PATH)
    endif()
    set(_tide_nccl_hints ${TIDE_NCCL_ROOT} ${CUDAToolkit_LIBRARY_ROOT} ${_tide_nccl_wheel})
    find_path(TIDE_NCCL_INCLUDE nccl.h
              HINTS ${CUDAToolkit_INCLUDE_DIRS} PATHS ${_tide_nccl_hints} PATH_SUFFIXES include)
    find_library(TIDE_NCCL_LIBRARY NAMES nccl libnccl.so.2
                 HINTS ${CUDAToolkit_LIBRARY_DIR} PATHS ${_tide_nccl_hints}
                 PATH_SUFFIXES lib lib64)
    if(TIDE_NCCL_INCLUDE AND TIDE_NCCL_LIBRARY)
      set(TIDE_HAVE_NCCL ON)
      message(STATUS "TIDE: NCCL ${TIDE_NCCL_LIBRARY} (headers ${TIDE_NCCL_INCLUDE})")
    endif()
  elseif(TIDE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "TIDE_CUDA=ON but no CUDA compiler was found; install the CUDA "
                        "toolkit or configure with -DTIDE_CUDA=OFF")
  endif()
endif()
