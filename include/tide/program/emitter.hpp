// Appends ops to a Program: the small vocabulary every protocol builder speaks.
#pragma once

#include <cstdint>
#include <string>

#include "tide/program/program.hpp"

namespace tide::program {

struct Emitter {
  Program program;

  // Appends an op with payload `payload` and returns that payload, to fill in.
  template <class Payload>
  Payload& add(int rank, int stream, std::string label, Payload payload = {}) {
    program.ops.push_back(make_op(rank, stream, std::move(label), std::move(payload)));
    return program.ops.back().as<Payload>();
  }
  // +1 on `counter` of rank `target`, after every earlier op of the stream.
  void signal(int rank, int stream, int target, int counter, std::string label) {
    add(rank, stream, std::move(label), SignalOp{Counter{target, counter}, 1});
  }
  // Blocks the stream until the rank's `counter` reaches `value`; nothing (nullptr) for value <= 0.
  WaitOp* wait(int rank, int stream, int counter, std::int64_t value, std::string label) {
    if (value <= 0) return nullptr;
    return &add(rank, stream, std::move(label), WaitOp{Counter{rank, counter}, value});
  }
  // Records event `id` of the rank.
  void record_event(int rank, int stream, int id, std::string label) {
    add(rank, stream, std::move(label), EventRecordOp{id});
  }
  // Blocks the stream until event `id` of the rank is recorded.
  EventWaitOp& wait_event(int rank, int stream, int id, std::string label) {
    return add(rank, stream, std::move(label), EventWaitOp{id});
  }
};

}  // namespace tide::program
