// ErrorSink and op descriptions for the reference executor's error messages.
#include "errors.hpp"

#include <utility>

namespace tide::exec::detail {

void ErrorSink::add(ExecError error) {
  ++count_;
  ++counts_[static_cast<std::size_t>(error.kind)];
  if (static_cast<std::int64_t>(errors_.size()) < max_errors_) errors_.push_back(std::move(error));
}

std::string describe_op(const program::Program& program, int op) {
  if (op < 0 || op >= static_cast<int>(program.ops.size())) return "the caller's input";
  const program::Op& o = program.ops[static_cast<std::size_t>(op)];
  std::string stream = std::to_string(o.stream);
  if (o.stream >= 0 && o.stream < static_cast<int>(program.stream_names.size()))
    stream = "'" + program.stream_names[static_cast<std::size_t>(o.stream)] + "'";
  return "'" + o.label + "' (" + std::string(program::op_kind_name(o.kind)) + ", rank " +
         std::to_string(o.rank) + ", stream " + stream + ", op #" + std::to_string(op) + ")";
}

}  // namespace tide::exec::detail
