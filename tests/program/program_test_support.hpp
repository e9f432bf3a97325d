// Helpers the program-level tests share (fault_injection_test.cpp, ep_lane_test.cpp,
// ep_lane_sequence_test.cpp, call_sequence_test.cpp): writing a program's inputs, naming a
// run's first errors, the catalog's faults of one collective, random shapes and shards, and a
// jittered schedule.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "tide/core/arithmetic.hpp"
#include "tide/core/collective_reference.hpp"
#include "tide/core/layout.hpp"
#include "tide/exec/reference_executor.hpp"
#include "tide/program/faults.hpp"

// In namespace tide itself: the tests, in tide's anonymous namespace, call them unqualified.
namespace tide {

// Writes `bytes` into `buffer` at `offset` as an input of the run.
inline void put(exec::ReferenceExecutor& ex, const program::Buffer& buffer, std::int64_t offset,
                const std::vector<std::byte>& bytes) {
  auto span = ex.input(buffer, offset, static_cast<std::int64_t>(bytes.size()));
  std::memcpy(span.data(), bytes.data(), bytes.size());
}

// The run's first three errors, one per indented line, for a failure message.
inline std::string first_errors(const exec::RunResult& r) {
  std::string text;
  for (std::size_t i = 0; i < r.errors.size() && i < 3; ++i)
    text += "\n  " + r.errors[i].message;
  return text;
}

// The catalog's faults of `collective` (FaultInfo::collective), in catalog order.
inline std::vector<program::Fault> faults_of(std::string_view collective) {
  std::vector<program::Fault> faults;
  for (const program::FaultInfo& info : program::fault_catalog()) {
    if (info.collective == collective) faults.push_back(info.fault);
  }
  return faults;
}

// A uniform integer in [lo, hi].
inline int pick(std::mt19937_64& rng, int lo, int hi) {
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

// 1-4 parameters of 1-40 rows (padding rows included for most world sizes) and 1-12 columns.
inline std::vector<ParamShape> random_shapes(std::mt19937_64& rng) {
  std::vector<ParamShape> shapes;
  const int params = pick(rng, 1, 4);
  for (int p = 0; p < params; ++p)
    shapes.push_back({"p" + std::to_string(p), pick(rng, 1, 40), pick(rng, 1, 12)});
  return shapes;
}

// A reference-executor schedule of `seed` with jitter.
inline exec::RunOptions schedule(std::uint64_t seed) {
  exec::RunOptions o;
  o.seed = seed;
  o.jitter = 0.5;
  return o;
}

// Random values of `dtype` for parameter p's shard (fp32 masters), written rounded to bf16
// into its place in `shard` (a rank's packed bf16 shard); returns the values.
inline std::vector<float> random_masters(std::mt19937_64& rng, const GroupLayout& layout, int p,
                                         DType dtype, std::vector<std::uint16_t>& shard) {
  const ParamLayout& pl = layout.param(p);
  std::vector<float> master(static_cast<std::size_t>(pl.shard_elems()));
  for (std::size_t i = 0; i < master.size(); ++i) {
    master[i] = random_value(rng, dtype);
    shard[static_cast<std::size_t>(pl.offset / 2) + i] = arith::float_to_bf16(master[i]);
  }
  return master;
}

}  // namespace tide
