# Warning and code-generation flags shared by every TIDE target (host C++ and, through
# -Xcompiler, the host side of CUDA units).
add_library(tide_warnings INTERFACE)
set(_tide_host_warnings -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wcast-align
    -Wdouble-promotion -Wimplicit-fallthrough)
if(TIDE_WERROR)
  list(APPEND _tide_host_warnings -Werror)
endif()
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  # GCC 12 reports impossible overlaps in std::string concatenation at -O3 (GCC bug 105329).
  list(APPEND _tide_host_warnings -Wno-restrict)
endif()
target_compile_options(tide_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:${_tide_host_warnings}>
  # The reference arithmetic (NOTE [arithmetic order]) must not be contracted into FMAs.
  $<$<COMPILE_LANGUAGE:CXX>:-ffp-contract=off>)

if(TIDE_SANITIZE)
  string(REPLACE "," ";" _tide_sanitizers "${TIDE_SANITIZE}")
  foreach(_s IN LISTS _tide_sanitizers)
    add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${_s}>)
    add_link_options(-fsanitize=${_s})
  endforeach()
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-recover=all>)
endif()
