# Host dependencies, all from Debian's packages (scripts/install-deps.sh installs them).
# The GPU machine has no package registry: scripts/stage-deps.sh copies the same headers and
# GoogleTest's sources into .deps/ here, the device call carries that folder, and the
# fallbacks below find them there.
set(TIDE_DEPS_DIR "${CMAKE_CURRENT_SOURCE_DIR}/.deps" CACHE PATH "Staged dependencies")

find_package(nlohmann_json 3.10 QUIET CONFIG)
if(NOT nlohmann_json_FOUND)
  find_path(TIDE_JSON_INCLUDE nlohmann/json.hpp HINTS "${TIDE_DEPS_DIR}/include" REQUIRED)
  add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
  target_include_directories(nlohmann_json::nlohmann_json INTERFACE "${TIDE_JSON_INCLUDE}")
endif()

find_package(CLI11 2.1 QUIET CONFIG)
if(NOT CLI11_FOUND)
  find_path(TIDE_CLI11_INCLUDE CLI/CLI.hpp HINTS "${TIDE_DEPS_DIR}/include" REQUIRED)
  add_library(CLI11::CLI11 INTERFACE IMPORTED)
  target_include_directories(CLI11::CLI11 INTERFACE "${TIDE_CLI11_INCLUDE}")
endif()

find_package(fmt 9 QUIET CONFIG)
if(NOT fmt_FOUND)
  find_path(TIDE_FMT_INCLUDE fmt/format.h HINTS "${TIDE_DEPS_DIR}/include" REQUIRED)
  add_library(fmt::fmt-header-only INTERFACE IMPORTED)
  target_include_directories(fmt::fmt-header-only INTERFACE "${TIDE_FMT_INCLUDE}")
  target_compile_definitions(fmt::fmt-header-only INTERFACE FMT_HEADER_ONLY=1)
endif()

if(TIDE_BUILD_TESTS)
  find_package(GTest QUIET)
  if(NOT GTest_FOUND)
    if(NOT EXISTS "${TIDE_DEPS_DIR}/googletest/CMakeLists.txt")
      message(FATAL_ERROR "GoogleTest not found: run scripts/install-deps.sh (Debian) or "
                          "scripts/stage-deps.sh (to carry it to a machine without packages)")
    endif()
    set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
    add_subdirectory("${TIDE_DEPS_DIR}/googletest" "${CMAKE_BINARY_DIR}/googletest" EXCLUDE_FROM_ALL)
    add_library(GTest::gtest ALIAS gtest)
    add_library(GTest::gtest_main ALIAS gtest_main)
  endif()
endif()
