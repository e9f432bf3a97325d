// Collects a run's errors up to a cap, and names ops in their messages.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "tide/exec/reference_executor.hpp"
#include "tide/program/validate.hpp"

namespace tide::exec::detail {

class ErrorSink {
 public:
  explicit ErrorSink(int max_errors) : max_errors_(max_errors) {}
  void add(ExecError error);
  std::vector<ExecError> take() { return std::move(errors_); }
  std::int64_t count() const { return count_; }
  const std::array<std::int64_t, kErrorKinds>& counts() const { return counts_; }

 private:
  int max_errors_ = 0;
  std::int64_t count_ = 0;
  std::array<std::int64_t, kErrorKinds> counts_{};
  std::vector<ExecError> errors_;
};

// "'label' (kind, rank 1, stream 'comm', op #12)"
using program::describe_op;

}  // namespace tide::exec::detail
