// TIDE's environment variables, declared once.
// NOTE [environment knobs]
// Every TIDE_* variable is one line of kEnvKnobs: name, default (when unset or empty), meaning
// (as NCCL_PARAM). Code reads them only through env::value() / flag() / positive_seconds(),
// which refuse undeclared names (shell scripts read only declared ones). `tide --help-env`
// prints the table; docs/environment.md is generated from it; scripts/check_source.py checks.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "tide/core/error.hpp"

namespace tide::env {

struct EnvKnob {
  std::string_view name;
  std::string_view default_value;
  std::string_view meaning;
};

// clang-format off
inline constexpr EnvKnob kEnvKnobs[] = {
  {"TIDE_RANK", "unset", "this process's rank, set by `tide-nccl --spawn` (else torchrun's or MPI's variables are read; NOTE [launch])"},
  {"TIDE_WORLD", "unset", "the number of ranks, set by `tide-nccl --spawn`"},
  {"TIDE_LOCAL_RANK", "TIDE_RANK", "this process's rank on its host (its GPU), set by `tide-nccl --spawn`"},
  {"TIDE_RENDEZVOUS", "a fresh /tmp directory (--spawn); under torchrun /tmp/tide-rendezvous-<job>", "the directory where rank 0 publishes the NCCL unique id for the other ranks"},
  {"TIDE_FABRIC_TIMEOUT_S", "NcclFabricOptions::timeout (tide-nccl --fabric-timeout)", "seconds (> 0) any wait of the NCCL fabric may take; overrides the option"},
  {"TIDE_NCCL_HOST_RMA", "0", "1 asks the NCCL fabric for one-sided rail messages (ncclPutSignal / ncclWaitSignal, NCCL >= 2.29; NcclFabricOptions::host_rma): on only where every rank asks and can, else two-sided with the reason (NOTE [one-sided messages])"},
  {"TIDE_BACKEND", "auto", "host, nccl or ipc forces the runtime backend tide.fsdp.enable picks (auto: host for CPU, nccl where every rank has its own GPU and NCCL windows, else ipc); a forced backend that cannot serve falls back to stock with the reason"},
  {"TIDE_IPC_HANDLES", "auto", "fd or cuda-ipc: how the ipc backend shares arenas between processes (auto: cuMem POSIX file descriptors through pidfd_getfd where the device and the kernel allow it, else cudaIpc handles; NOTE [ipc fabric])"},
  {"TIDE_EMULATE_HOSTS", "0", "1 (tests): tide.fsdp.enable on the host backend makes each node of LOCAL_WORLD_SIZE ranks a host of its own, whose ranks reach the other hosts' by rail messages only (NOTE [runtime] 9)"},
  {"TIDE_NO_GRAPH_REPLAY", "0", "1 runs every runtime call on GPUs through the stream path, never as a replayed CUDA graph (NOTE [CUDA call sequences] 3)"},
  {"TIDE_LEND_ARENA", "1", "0 keeps tide.fsdp's arena out of optimizer steps; else a step on a GPU borrows the arena's idle data bytes through torch's allocator between two fences (NOTE [arena lending]); set alike on every rank"},
  {"TIDE_ONE_NODE", "1", "0 keeps the multi-node TIDE-RS layout at M = 1 on every runtime backend (for comparison); else the one-node layout runs there (NOTE [one-node TIDE-RS])"},
  {"TIDE_ENABLE_MULTIMEM", "0", "1 allows the multimem (NVSwitch reduction) landing where the caller also opts in; never on machines where NVLink multicast is off limits"},
  {"TIDE_KERNEL_TEST_QUICK", "0", "1 keeps the GPU kernel tests to their small cases (compute-sanitizer runs)"},
  {"TIDE_BENCH_TRACE", "unset", "set: tide_runtime_enqueue_bench prints each call's enqueue and completion time to stderr"},
  {"TIDE_TEST_SEED", "a fresh random seed, printed", "the seed of the randomised tests that print theirs (call sequences, the host runtime, the FSDP2 parity run)"},
  {"TIDE_FUZZ_RUNS", "200", "random argument sets tests/cli/test_cli_fuzz.py runs"},
  {"TIDE_PARITY_CASES", "abcdefghijklmno", "the FSDP2 parity cases fsdp_parity_worker.py runs, one letter each"},
  {"TIDE_IPC_RESULTS", "unset", "a directory: tests/python/test_fsdp_ipc_gpu.py writes one JSON row per parity run there (scripts/device/ipc.sh sets it)"},
  {"TIDE_MEMORY_TIMELINE", "unset", "a path prefix: bench/memory/worker.py writes each rank's memory samples (seconds, label, anonymous, file, shared bytes) to PREFIX.rank<r>, to see where the peak is"},
  {"TIDE_PARITY_MODE", "in-place", "the TIDE mode (in-place or slot-reuse) fsdp_parity_worker.py enables"},
  {"TIDE_PARITY_REFERENCE", "0", "1 (diagnosis): fsdp_parity_worker.py also checks every unshard of both models against a CPU all-gather of the shards, so that a mismatch says which side is wrong"},
  {"TIDE_PARITY_DEVICE", "cpu", "cuda runs the FSDP2 parity run on GPUs (NCCL) instead of the CPU (gloo); cuda-shared puts every rank on GPU 0 (gloo with CUDA tensors for stock, the ipc backend for TIDE)"},
  {"TIDE_LOOP_DEVICE", "cpu", "cuda-shared runs the torchtitan-style loop test (fsdp_titan_worker.py) with every rank on GPU 0 (gloo with CUDA tensors for stock, the ipc backend for TIDE)"},
  {"TIDE_LOOP_COMPILE", "1", "0 leaves torch.compile out of the torchtitan-style loop test (fsdp_titan_worker.py)"},
  {"TIDE_TORCHTITAN_OUT", "unset", "a directory: tests/python/test_torchtitan.py keeps its runs' JSONs there (<variant>/{stock,tide}/rank<r>.json) and writes table.md (bench/torchtitan/table.py)"},
  {"TIDE_TITAN_RECORD", "unset", "a directory: tests/python/torchtitan_cpu/train.py writes each rank's losses, step times and report() rows there (the test and multigpu.sh step titan set it)"},
  {"TIDE_TITAN_DEVICE", "cpu", "tests/python/torchtitan_cpu/train.py: cuda leaves the CPU shim out (torchtitan on GPUs: multigpu.sh step titan)"},
  {"TIDE_UPSTREAM_MODE", "stock", "bench/fsdp2_upstream: stock, tide or tide-noring (enable() injected on every FSDP2 root, ring=False for one-iteration tests)"},
  {"TIDE_UPSTREAM_OUT", "unset", "bench/fsdp2_upstream: the directory each rank writes its report() rows to"},
  {"TIDE_UPSTREAM_CPU_SHIM", "1", "bench/fsdp2_upstream: 0 keeps torch's test base skipping every multi-process test where no accelerator is present"},
  {"TIDE_UPSTREAM_FORCE_CPU", "0", "bench/fsdp2_upstream: N runs accelerator-marked tests on CPU with N processes, alike for stock and TIDE"},
  {"TIDE_UPSTREAM_TESTS", "unset", "bench/fsdp2_upstream: the directory holding PyTorch's FSDP2 test files"},
  {"TIDE_BUILD_DIR", "build", "scripts/build.sh, scripts/test.sh: the CMake build directory"},
  {"TIDE_BUILD_TYPE", "RelWithDebInfo", "scripts/build.sh: the CMake build type"},
};
// clang-format on

// The declaration of `name`, or nullptr when kEnvKnobs has none.
inline const EnvKnob* find_knob(std::string_view name) {
  for (const EnvKnob& k : kEnvKnobs) {
    if (k.name == name) return &k;
  }
  return nullptr;
}

// The variable's value, or nullopt when it is unset or empty. A TIDE_* name must be declared
// in kEnvKnobs (InternalError otherwise); other names (the launchers' RANK, WORLD_SIZE, ...)
// are read as they are.
inline std::optional<std::string> value(std::string_view name) {
  if (name.starts_with("TIDE_") && find_knob(name) == nullptr) {
    throw InternalError("the environment variable " + std::string(name) +
                        " is not declared in kEnvKnobs (include/tide/core/env.hpp)");
  }
  const char* v = std::getenv(std::string(name).c_str());
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

// True when the declared knob is exactly "1".
inline bool flag(std::string_view name) {
  return value(name) == std::optional<std::string>("1");
}

// The knob as a positive number of seconds (at most 1e7), or nullopt when unset. Throws
// InvalidArgument naming the variable for anything else.
inline std::optional<double> positive_seconds(std::string_view name) {
  const std::optional<std::string> text = value(name);
  if (!text) return std::nullopt;
  char* end = nullptr;
  const double seconds = std::strtod(text->c_str(), &end);
  if (end == text->c_str() || *end != '\0' || !(seconds > 0.0) || seconds > 1e7) {
    throw InvalidArgument(std::string(name) + "='" + *text +
                          "' is not a positive number of seconds");
  }
  return seconds;
}

}  // namespace tide::env
