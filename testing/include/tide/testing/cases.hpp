// Runnable collectives with data: a program, the inputs every rank starts from, and the
// regions whose bytes must come out equal on every executor (invariant 1 of the architecture
// note). Shared by the program and executor tests (the reference; one process on the virtual
// fabric) and `tide-nccl check` (one process per GPU, the NCCL fabric), so all check the same
// cases. Not part of TIDE's public headers: the tide_testing library (testing/).
//
// Every builder draws fresh random inputs from its seed (never zeros; NaN-free finite values
// of the input dtype) and poisons nothing itself: executors start from poisoned buffers
// (kPoison) before uploading the inputs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "tide/core/dtype.hpp"
#include "tide/core/layout.hpp"
#include "tide/core/rs_plan.hpp"
#include "tide/exec/data_effects.hpp"  // kPoison: the byte every buffer holds before a run
#include "tide/program/program.hpp"
#include "tide/testing/random.hpp"

namespace tide::testing {

using exec::kPoison;

// Bytes written into a buffer at an offset before the run.
struct CaseInput {
  program::Buffer buffer;
  std::int64_t offset = 0;
  std::vector<std::byte> bytes;
};

// A region compared after the run (the whole buffer when bytes < 0).
struct CaseCheck {
  program::Buffer buffer;
  std::int64_t offset = 0;
  std::int64_t bytes = -1;
};

struct CollectiveCase {
  std::string name;
  program::Program program;
  std::vector<CaseInput> inputs;
  std::vector<CaseCheck> checks;
};

// TIDE-AG over M x L: random shards (or, with `cast`, random fp32 masters; with `staged`,
// per-parameter shards of the all-gather dtype arriving per call); checks every rank's
// landing zone. Random shapes when `shapes` is empty. head_bytes = 64 unless given.
struct AgCaseOptions {
  bool cast = false;
  bool staged = false;  // AgOptions::staged_shards (at M = 1: NOTE [one-node TIDE-AG])
  DType dtype = DType::kBf16;
  std::vector<ParamShape> shapes;
  std::string what;  // appended to the name
  std::int64_t head_bytes = 64;
};
CollectiveCase ag_case(int m, int l, std::uint64_t seed, const AgCaseOptions& options = {});

// TIDE-RS over M x L: random gradients (and, with accumulate, random initial outputs); checks
// every rank's fp32 output shard. Round width, sum and landing CTAs drawn from the seed
// unless given (> 0). alpha = 1 / N unless given (!= 0).
struct RsCaseOptions {
  RsMode mode = RsMode::kInPlace;
  DType grad = DType::kBf16;
  bool accumulate = false;
  std::vector<ParamShape> shapes;
  std::string what;
  float alpha = 0.0f;
  int round_width = 0;
  int rounds_in_flight = 1;  // RsOptions::rounds_in_flight
  int sum_ctas = 0;
  int landing_ctas = 0;
  bool one_node = false;      // RsOptions::one_node (NOTE [one-node TIDE-RS])
  bool one_node_pull = true;  // RsOptions::one_node_pull (Slot-Reuse: pull, or push as In-Place)
};
CollectiveCase rs_case(int m, int l, std::uint64_t seed, const RsCaseOptions& options = {});

// A training step (program/training_step.hpp: the runtime's multi-call programs) over M x L:
// three distinct random groups, forward all-gathers then backward all-gathers and
// reduce-scatters in FSDP2 order; every call's output on every rank checked.
struct StepCaseOptions {
  RsMode mode = RsMode::kInPlace;
  DType grad = DType::kBf16;
  bool accumulate = false;
};
CollectiveCase step_case(int m, int l, std::uint64_t seed, const StepCaseOptions& options = {});

// The checked regions after running `c` on the CPU reference executor (schedule seed 3).
// Throws tide::InternalError naming the first errors when the run is not clean.
std::vector<std::vector<std::byte>> reference_outputs(const CollectiveCase& c);

}  // namespace tide::testing
