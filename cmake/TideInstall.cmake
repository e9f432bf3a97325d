# `cmake --install`: the libraries, their headers, the CLI and a CMake package config, so that
# a C++ user can find_package(tide) and link tide::tide_core (and the others listed below).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(_tide_exported)
foreach(_target tide_warnings tide_core tide_program tide_fabric_host tide_transport_host tide_exec_data tide_transport_plan
                tide_exec_host tide_runtime tide_cuda_driver tide_ptx tide_kernels tide_fabric_virtual
                tide_fabric_caps tide_fabric_ipc tide_fabric_nccl tide_transport tide_transport_nccl
                tide_exec_cuda)
  if(TARGET ${_target})
    list(APPEND _tide_exported ${_target})
  endif()
endforeach()
install(TARGETS ${_tide_exported} EXPORT tideTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS tide RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/tide DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

set(_tide_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/tide)
install(EXPORT tideTargets NAMESPACE tide:: DESTINATION ${_tide_cmake_dir})
configure_package_config_file(cmake/tideConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/tideConfig.cmake
                              INSTALL_DESTINATION ${_tide_cmake_dir})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/tideConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/tideConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/tideConfigVersion.cmake
        DESTINATION ${_tide_cmake_dir})
