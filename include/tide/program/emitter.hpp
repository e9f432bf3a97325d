// Appends ops to a Program: the small vocabulary every protocol builder speaks.
#pragma once

#include <cstdint>
#include <string>

#include "tide/program/program.hpp"

namespace tide::program {

struct Emitter {
  Program program;

  Op& add(OpKind kind, int rank, int stream, std::string label) {
    Op op;
    op.kind = kind;
    op.rank = rank;
    op.stream = stream;
    op.label = std::move(label);
    program.ops.push_back(std::move(op));
    return program.ops.back();
  }
  // +1 on `counter` of rank `target`, after every earlier op of the stream.
  void signal(int rank, int stream, int target, int counter, std::string label) {
    Op& op = add(OpKind::kSignal, rank, stream, std::move(label));
    op.counter = Counter{target, counter};
    op.value = 1;
  }
  // Blocks the stream until the rank's `counter` reaches `value`; nothing for value <= 0.
  void wait(int rank, int stream, int counter, std::int64_t value, std::string label) {
    if (value <= 0) return;
    Op& op = add(OpKind::kWait, rank, stream, std::move(label));
    op.counter = Counter{rank, counter};
    op.value = value;
  }
  // kEventRecord or kEventWait of event `id` on the rank.
  void event(OpKind kind, int rank, int stream, int id, std::string label) {
    add(kind, rank, stream, std::move(label)).event = id;
  }
};

}  // namespace tide::program
