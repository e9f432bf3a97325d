// ErrorSink and op descriptions for the reference executor's error messages.
#include "errors.hpp"

#include <utility>

namespace tide::exec::detail {

void ErrorSink::add(ExecError error) {
  ++count_;
  ++counts_[static_cast<std::size_t>(error.kind)];
  if (static_cast<std::int64_t>(errors_.size()) < max_errors_) errors_.push_back(std::move(error));
}

}  // namespace tide::exec::detail
