# A compile-only check of the one-sided NCCL code (NOTE [one-sided messages]) under
# TIDE_HAS_NCCL_HOST_RMA = 1, against NCCL >= 2.29 headers that the machine's own NCCL may not
# have (the lent machines carry 2.28). Script mode; scripts/check-nccl-rma.sh fetches the
# headers and runs it:
#
#   cmake -DTIDE_SOURCE_DIR=<repo> -DTIDE_NCCL_RMA_INCLUDE=<dir with nccl.h>
#         -DTIDE_CUDA_INCLUDE=<dir with cuda_runtime.h> -DTIDE_CHECK_DIR=<scratch dir>
#         [-DTIDE_CXX=c++] -P cmake/TideNcclRmaCheck.cmake
#
# Steps: 1. a unit that static_asserts the gates (TIDE_HAS_NCCL_HOST_RMA, TIDE_HAS_NCCL_FABRIC)
# with these headers; 2. nccl_rma.cpp compiled to an object whose undefined symbols must name
# ncclPutSignal, ncclSignal and ncclWaitSignal (the code under the gate, not the fallback);
# 3. the files around it checked for syntax and warnings (the NCCL fabric, its window view,
# the one-sided transport), with TIDE's warning flags and -Werror. Fails on the first error.
cmake_minimum_required(VERSION 3.24)

foreach(_var TIDE_SOURCE_DIR TIDE_NCCL_RMA_INCLUDE TIDE_CUDA_INCLUDE TIDE_CHECK_DIR)
  if(NOT ${_var})
    message(FATAL_ERROR "TideNcclRmaCheck: -D${_var}=... is required")
  endif()
endforeach()
if(NOT TIDE_CXX)
  set(TIDE_CXX c++)
endif()
if(NOT EXISTS "${TIDE_NCCL_RMA_INCLUDE}/nccl.h")
  message(FATAL_ERROR "TideNcclRmaCheck: no nccl.h in ${TIDE_NCCL_RMA_INCLUDE}")
endif()
if(NOT EXISTS "${TIDE_CUDA_INCLUDE}/cuda_runtime.h")
  message(FATAL_ERROR "TideNcclRmaCheck: no cuda_runtime.h in ${TIDE_CUDA_INCLUDE}")
endif()
file(MAKE_DIRECTORY "${TIDE_CHECK_DIR}")

set(_flags -std=c++20 -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wcast-align
    -Wdouble-promotion -Wimplicit-fallthrough -Werror -Wno-restrict
    -I${TIDE_SOURCE_DIR}/include -I${TIDE_SOURCE_DIR}/src -I${TIDE_SOURCE_DIR}/src/exec -I${TIDE_SOURCE_DIR}/src/exec/cuda
    -I${TIDE_SOURCE_DIR}/src/transport
    -isystem ${TIDE_NCCL_RMA_INCLUDE} -isystem ${TIDE_CUDA_INCLUDE})

function(_tide_compile what)
  execute_process(COMMAND ${TIDE_CXX} ${_flags} ${ARGN}
                  RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "TideNcclRmaCheck: ${what} does not compile against "
                        "${TIDE_NCCL_RMA_INCLUDE}/nccl.h:\n${_out}${_err}")
  endif()
  message(STATUS "TideNcclRmaCheck: ${what}: ok")
endfunction()

# 1. The gates.
set(_gates "${TIDE_CHECK_DIR}/gates.cpp")
file(WRITE "${_gates}" [=[
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "tide/version_gates.hpp"

static_assert(TIDE_HAS_NCCL_HOST_RMA == 1, "these headers must enable TIDE_HAS_NCCL_HOST_RMA");
static_assert(TIDE_HAS_NCCL_FABRIC == 1, "these headers must enable TIDE_HAS_NCCL_FABRIC");
int main() { return 0; }
]=])
_tide_compile("the version gates" -fsyntax-only "${_gates}")

# 2. nccl_rma.cpp, and the NCCL calls its object needs.
set(_object "${TIDE_CHECK_DIR}/nccl_rma.o")
_tide_compile("src/fabric/nccl/nccl_rma.cpp" -c "${TIDE_SOURCE_DIR}/src/fabric/nccl/nccl_rma.cpp"
              -o "${_object}")
find_program(_nm NAMES nm REQUIRED)
execute_process(COMMAND ${_nm} -u "${_object}" OUTPUT_VARIABLE _symbols RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "TideNcclRmaCheck: nm -u ${_object} failed")
endif()
foreach(_symbol ncclPutSignal ncclSignal ncclWaitSignal ncclGetVersion)
  if(NOT _symbols MATCHES "[ \t]${_symbol}\n")
    message(FATAL_ERROR "TideNcclRmaCheck: nccl_rma.o does not call ${_symbol}: the code "
                        "under TIDE_HAS_NCCL_HOST_RMA was not compiled. Undefined symbols:\n"
                        "${_symbols}")
  endif()
endforeach()
message(STATUS "TideNcclRmaCheck: nccl_rma.o calls ncclPutSignal, ncclSignal, ncclWaitSignal")

# 3. The code around it.
foreach(_file src/fabric/nccl/nccl_fabric.cpp src/fabric/nccl/nccl_window_fabric.cpp
              src/transport/nccl_one_sided.cpp src/transport/one_sided.cpp)
  _tide_compile("${_file}" -fsyntax-only "${TIDE_SOURCE_DIR}/${_file}")
endforeach()
message(STATUS "TideNcclRmaCheck: passed")
