// Helpers the program-level tests share (fault_injection_test.cpp, ep_lane_test.cpp): writing a
// program's inputs, naming a run's first errors, and the catalog's faults of one collective.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

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

}  // namespace tide
