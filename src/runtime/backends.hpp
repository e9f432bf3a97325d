// The communicator of each backend; Communicator::create() picks one.
#pragma once

#include <memory>

#include "tide/runtime/communicator.hpp"

namespace tide::runtime::detail {

std::unique_ptr<Communicator> make_host_communicator(const CommunicatorOptions& options);
// Defined where the runtime is built with CUDA and NCCL (TIDE_RUNTIME_NCCL).
std::unique_ptr<Communicator> make_nccl_communicator(const CommunicatorOptions& options);
// Defined where the runtime is built with CUDA (TIDE_RUNTIME_CUDA).
std::unique_ptr<Communicator> make_ipc_communicator(const CommunicatorOptions& options);

}  // namespace tide::runtime::detail
