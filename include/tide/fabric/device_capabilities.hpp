// What this process's GPU, CUDA and NCCL can do, for the capability agreement (Sec. 6.3;
// NOTE [capability agreement]). Built with CUDA; NCCL's fields are 0 in a build without NCCL.
#pragma once

#include "tide/core/capability.hpp"

namespace tide::fabric {

RankCapabilities device_capabilities(int device);

}  // namespace tide::fabric
