// ReferenceExecutor: owns the buffers and the caller's input marks, runs the static checks
// and the simulation, and gathers the result.
#include <string>
#include <utility>

#include "errors.hpp"
#include "memory.hpp"
#include "scheduler.hpp"
#include "static_checks.hpp"
#include "tide/core/error.hpp"
#include "tide/exec/reference_executor.hpp"

namespace tide::exec {

std::string_view error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kUnorderedRead:
      return "unordered-read";
    case ErrorKind::kUnwrittenRead:
      return "unwritten-read";
    case ErrorKind::kReleasedRead:
      return "released-read";
    case ErrorKind::kConsumedRead:
      return "consumed-read";
    case ErrorKind::kUnorderedWrite:
      return "unordered-write";
    case ErrorKind::kDeadlock:
      return "deadlock";
    case ErrorKind::kUnsatisfiableWait:
      return "unsatisfiable-wait";
    case ErrorKind::kInvalidOp:
      return "invalid-op";
    case ErrorKind::kCallOrderMismatch:
      return "call-order-mismatch";
  }
  return "?";
}

struct ReferenceExecutor::State {
  State(const program::Program& p, ExecutorOptions o) : program(p), options(o), table(p) {
    if (!options.timing_only) memory = std::make_unique<detail::Memory>(table);
  }
  const program::Program& program;
  ExecutorOptions options;
  detail::BufferTable table;
  std::unique_ptr<detail::Memory> memory;
  std::vector<detail::InputRange> inputs;
  bool ran = false;

  int index_or_throw(const program::Buffer& buffer) const {
    if (!memory) throw InvalidArgument("reference executor: no memory in timing-only mode");
    const int index = table.index(buffer);
    if (index < 0)
      throw InvalidArgument("reference executor: no buffer " +
                            detail::describe_bytes(buffer, 0, 0) + " in the program");
    return index;
  }
};

ReferenceExecutor::ReferenceExecutor(const program::Program& program, ExecutorOptions options)
    : state_(std::make_unique<State>(program, options)) {
  if (program.ranks < 0) throw InvalidArgument("reference executor: negative rank count");
}

ReferenceExecutor::~ReferenceExecutor() = default;

const program::Program& ReferenceExecutor::program() const {
  return state_->program;
}

std::span<std::byte> ReferenceExecutor::memory(const program::Buffer& buffer) {
  return state_->memory->bytes(state_->index_or_throw(buffer));
}

std::span<std::byte> ReferenceExecutor::input(const program::Buffer& buffer, std::int64_t offset,
                                              std::int64_t bytes) {
  const int index = state_->index_or_throw(buffer);
  const std::int64_t size = state_->table.size(index);
  if (bytes < 0) bytes = size - offset;
  if (offset < 0 || bytes < 0 || offset + bytes > size)
    throw InvalidArgument("reference executor: input " +
                          detail::describe_bytes(buffer, offset, offset + bytes) +
                          " lies outside the buffer of " + std::to_string(size) + " bytes");
  if (state_->ran) throw InvalidArgument("reference executor: input() after run()");
  state_->inputs.push_back(detail::InputRange{index, offset, offset + bytes});
  return state_->memory->bytes(index).subspan(static_cast<std::size_t>(offset),
                                              static_cast<std::size_t>(bytes));
}

RunResult ReferenceExecutor::run(const RunOptions& options) {
  if (state_->memory && state_->ran)
    throw InvalidArgument("reference executor: a run with data happens once per executor");
  if (!(options.jitter >= 0 && options.jitter < 1))
    throw InvalidArgument("reference executor: jitter = " + std::to_string(options.jitter) +
                          " is outside [0, 1)");
  state_->ran = true;
  RunResult result;
  detail::ErrorSink sink(options.max_errors);
  const detail::StaticFacts facts = detail::check_program(state_->program, state_->table, sink);
  detail::simulate(state_->program, state_->table, facts, state_->memory.get(), state_->inputs,
                   options, sink, result);
  result.errors = sink.take();
  result.error_count = sink.count();
  result.error_counts = sink.counts();
  return result;
}

}  // namespace tide::exec
