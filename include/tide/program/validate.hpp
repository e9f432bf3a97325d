// Program well-formedness, checked once for every executor (NOTE [program validity]).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tide/program/program.hpp"

namespace tide::program {

// NOTE [program validity]
// A program is well formed when every op names a valid rank and stream; touches only regions
// inside the buffers the program sizes (offset, width >= 0, rows >= 1, pitch >= width for
// rows > 1), copies of one shape; kSum has fp32 dst rows, staged inputs of dst's geometry in
// in_dtype and segments inside dst and their tensor; kLand has fp32 sources of dst's length;
// kCast one fp32 source of twice its bf16 dst's bytes; counters and events are in range,
// additions >= 0, waits on own-rank counters, each (rank, event) recorded at most once. A
// whole program (whole_program) also has every wait satisfiable: a call template, which waits
// on earlier calls, is validated without that. Executors add only their mapping limits.
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
