# Post-build check of tide._C: the module must link the C++ runtime as a shared library.
#   cmake -DMODULE=<module file> -DOBJDUMP=<objdump> -P CheckSharedCxxRuntime.cmake
# torch loads the system's shared libstdc++. A module with a static copy of its own (a
# toolchain whose g++ links libstdc++ statically, such as a relocatable GCC build) puts two
# libstdc++ in one process, and iostreams then crash: measured on the H200 image, whose
# /opt/gcc does that (bench/results/ipc/STATUS.md). The module is removed so that the next
# build checks again.
execute_process(COMMAND "${OBJDUMP}" -p "${MODULE}" OUTPUT_VARIABLE dump RESULT_VARIABLE rc
                ERROR_QUIET)
if(NOT rc EQUAL 0)
  message(WARNING "tide._C: '${OBJDUMP} -p' failed; the C++ runtime's linkage is unchecked")
  return()
endif()
if(NOT dump MATCHES "NEEDED +(libstdc\\+\\+|libc\\+\\+)\\.so")
  file(REMOVE "${MODULE}")
  message(FATAL_ERROR
    "tide._C links the C++ runtime statically (no libstdc++.so among its NEEDED libraries), "
    "so it would carry a second libstdc++ into torch's process, where iostreams crash. Build "
    "it with a compiler that links libstdc++ as a shared library, as torch does, e.g. "
    "CXX=/usr/bin/g++ CC=/usr/bin/gcc CUDAHOSTCXX=/usr/bin/g++ (then delete the build "
    "directory, or pip's build cache, so that CMake picks the compiler again).")
endif()
