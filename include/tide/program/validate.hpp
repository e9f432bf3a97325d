// Program well-formedness, checked once for every executor (NOTE [program validity]).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tide/program/program.hpp"

namespace tide::program {

// NOTE [program validity]
// A program is well formed when every op:
//   - names a rank in [0, ranks) and a stream of stream_names;
//   - touches only regions inside buffers the program sizes (offset >= 0, width >= 0,
//     rows >= 1, pitch >= width when rows > 1; kOutput 0 exists on every rank, possibly
//     empty), with copy sources and destinations of one shape;
//   - kSum: fp32 dst rows; staged inputs with dst's rows and elements in in_dtype; segments
//     inside dst and inside their gradient tensor; kLand: at least one source, each an fp32
//     range of dst's length; kCast: one fp32 source of twice the bytes of its bf16 dst;
//   - signals and rail puts name a counter in range with a non-negative addition; a wait
//     names a counter of its own rank; event ids are in range; each (rank, event) is recorded
//     at most once;
// and, for a whole program (ValidateOptions::whole_program), every wait can be satisfied:
// its threshold is at most what the program adds to its counter, and its event is recorded
// on its rank. A call template (NOTE [call sequences]) waits on what earlier calls add and
// record, so it is validated without that last check.
// Executors add only their own mapping limits (the CUDA executor: kernel row and wave
// limits, uniform staged strides, contiguous landing ranges, no overlapping copies).
enum class DefectKind : std::uint8_t { kMalformed, kUnsatisfiableWait };

struct Defect {
  DefectKind kind = DefectKind::kMalformed;
  int op = -1;       // index into Program::ops; -1 for the program as a whole
  std::string what;  // one line, without the op's name
};

struct ValidateOptions {
  bool whole_program = true;  // check that every counter and event wait can be satisfied
  // With whole_program off: still check that every event wait has its record (a counter
  // wait may then wait on what earlier calls added).
  bool event_records = false;
};

std::vector<Defect> validate(const Program& program, const ValidateOptions& options = {});

// The size a program gives a buffer, or -1 when the program has no such buffer.
std::int64_t buffer_size(const Program& program, const Buffer& buffer);

// "op 12 'AG r1 put round 0' (rank 1, stream 'caller')", for messages.
std::string describe_op(const Program& program, int op);

}  // namespace tide::program
