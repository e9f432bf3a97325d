// Communicator::create() and the backend names (NOTE [runtime]).
#include "tide/runtime/communicator.hpp"

#include "backends.hpp"
#include "tide/core/error.hpp"

namespace tide::runtime {

BackendKind parse_backend(std::string_view text) {
  if (text == "host") return BackendKind::kHost;
  if (text == "nccl") return BackendKind::kNccl;
  if (text == "ipc") return BackendKind::kIpc;
  throw InvalidArgument("backend '" + std::string(text) + "' is not one of: host, nccl, ipc");
}

std::string_view backend_name(BackendKind backend) {
  switch (backend) {
    case BackendKind::kHost:
      return "host";
    case BackendKind::kNccl:
      return "nccl";
    case BackendKind::kIpc:
      return "ipc";
  }
  return "unknown";
}

bool backend_built(BackendKind backend) {
  switch (backend) {
    case BackendKind::kHost:
      return true;
#ifdef TIDE_RUNTIME_NCCL
    case BackendKind::kNccl:
      return true;
#else
    case BackendKind::kNccl:
      return false;
#endif
#ifdef TIDE_RUNTIME_CUDA
    case BackendKind::kIpc:
      return true;
#else
    case BackendKind::kIpc:
      return false;
#endif
  }
  return false;
}

std::unique_ptr<Communicator> Communicator::create(const CommunicatorOptions& options) {
  if (options.world < 1 || options.rank < 0 || options.rank >= options.world) {
    throw InvalidArgument("rank " + std::to_string(options.rank) + " outside a world of " +
                          std::to_string(options.world));
  }
  if (options.gpus_per_node < 1 || options.world % options.gpus_per_node != 0) {
    throw InvalidArgument("world " + std::to_string(options.world) +
                          " is not a multiple of gpus_per_node " +
                          std::to_string(options.gpus_per_node) + " (TIDE needs M x L ranks)");
  }
  if (!options.store) throw InvalidArgument("a communicator needs a bootstrap store");
  if (options.timeout.count() <= 0) throw InvalidArgument("the timeout must be positive");
  if (!backend_built(options.backend)) {
    throw Unsupported(options.backend == BackendKind::kNccl
                          ? "this TIDE was built without CUDA and NCCL, so its runtime has no "
                            "nccl backend; rebuild where nvcc and NCCL are found, or use the "
                            "host backend"
                          : "this TIDE was built without CUDA, so its runtime has no ipc "
                            "backend; rebuild where nvcc is found, or use the host backend");
  }
  switch (options.backend) {
    case BackendKind::kHost:
      return detail::make_host_communicator(options);
#ifdef TIDE_RUNTIME_NCCL
    case BackendKind::kNccl:
      return detail::make_nccl_communicator(options);
#endif
#ifdef TIDE_RUNTIME_CUDA
    case BackendKind::kIpc:
      return detail::make_ipc_communicator(options);
#endif
    default:
      break;
  }
  throw InternalError("unreachable: backend " + std::string(backend_name(options.backend)) +
                      " not built");
}

}  // namespace tide::runtime
