// The rules that both the C++ runtime and the Python package (tide._runtime, tide._fsdp_group)
// apply, written once here; the binding (tide._C) exports them to Python:
//   kMaxParamsPerGroup (tide/core/layout.hpp)  tide._C.MAX_PARAMS_PER_GROUP
//   kNcclFabricMinVersion                     tide._C.NCCL_FABRIC_MIN_VERSION
//   nccl_environment_refusal                  tide._C.nccl_environment_refusal
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "tide/core/layout.hpp"
#include "tide/version_gates.hpp"

namespace tide {

// The NCCL whose symmetric windows and device API the nccl backend uses (major, minor):
// TIDE_HAS_NCCL_FABRIC in tide/version_gates.hpp.
inline constexpr std::array<int, 2> kNcclFabricMinVersion = {TIDE_NCCL_FABRIC_MIN_MAJOR,
                                                             TIDE_NCCL_FABRIC_MIN_MINOR};

// Whether NCCL_NVLS_ENABLE (nullptr: unset) would let NCCL use NVLink multicast, which TIDE
// keeps off (architecture: hardware rules): any value set but "0".
inline bool nccl_multicast_requested(const char* nvls_enable) {
  return nvls_enable != nullptr && std::string_view(nvls_enable) != "0";
}

// Why NCCL's environment cannot give the nccl backend its symmetric windows; "" when it can.
// `nvls_enable`, `cumem_enable`: NCCL_NVLS_ENABLE and NCCL_CUMEM_ENABLE (nullptr: unset).
inline std::string nccl_environment_refusal(const char* nvls_enable, const char* cumem_enable) {
  if (nccl_multicast_requested(nvls_enable)) {
    return "NCCL_NVLS_ENABLE=" + std::string(nvls_enable) +
           " lets NCCL use NVLink multicast, which TIDE keeps off (unset it or set it to 0 for "
           "the nccl backend)";
  }
  if (cumem_enable != nullptr && std::string_view(cumem_enable) == "0") {
    return "NCCL_CUMEM_ENABLE=0 turns off the cuMem allocator that NCCL's symmetric windows need "
           "(unset it for the nccl backend)";
  }
  return "";
}

}  // namespace tide
