// What this process's GPU, CUDA and NCCL can do, for the capability agreement (Sec. 6.3;
// NOTE [capability agreement]). Built only with CUDA and NCCL.
#pragma once

#include "tide/core/capability.hpp"

namespace tide::fabric {

RankCapabilities device_capabilities(int device);

}  // namespace tide::fabric
