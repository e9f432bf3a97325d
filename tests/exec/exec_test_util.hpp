// Helpers for the reference executor tests: small hand-built programs and fresh random data.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "test_seed.hpp"
#include "tide/core/arithmetic.hpp"
#include "tide/exec/reference_executor.hpp"
#include "tide/program/program.hpp"

namespace tide::exec::testing {

using program::Buffer;
using program::Op;
using program::OpKind;
using program::Program;
using program::Region;
using program::Space;

inline Buffer arena(int rank) {
  return Buffer{rank, Space::kArena, 0};
}
inline Buffer tensor(int rank, int p) {
  return Buffer{rank, Space::kTensor, p};
}
inline Buffer output(int rank) {
  return Buffer{rank, Space::kOutput, 0};
}
inline Region bytes(Buffer b, std::int64_t offset, std::int64_t n) {
  return Region{b, offset, n, n, 1};
}

// `ranks` ranks, each with the same buffer sizes and the named streams.
inline Program make_program(int ranks, std::int64_t arena_bytes,
                            std::vector<std::int64_t> tensor_bytes = {},
                            std::int64_t output_bytes = 0,
                            std::vector<std::string> streams = {"main"}) {
  Program p;
  p.ranks = ranks;
  p.stream_names = std::move(streams);
  p.buffers.assign(static_cast<std::size_t>(ranks),
                   program::BufferSizes{arena_bytes, std::move(tensor_bytes), {output_bytes}});
  return p;
}

inline int add(Program& p, Op op) {
  p.ops.push_back(std::move(op));
  return static_cast<int>(p.ops.size()) - 1;
}

inline Op copy_op(int rank, int stream, std::string label, Region src, Region dst) {
  return program::make_op(rank, stream, std::move(label),
                          program::CopyOp{{program::CopyDescriptor{src, dst}}});
}

// A kSignal, kWait, kRailPut (with no copies), kEventRecord or kEventWait; the counter fields
// apply to the first three, the event to the last two.
inline Op sync_op(OpKind kind, int rank, int stream, std::string label, int counter_rank = 0,
                  int counter_id = 0, std::int64_t value = 0, int event = 0) {
  const program::Counter counter{counter_rank, counter_id};
  program::OpPayload payload;
  switch (kind) {
    case OpKind::kSignal:
      payload = program::SignalOp{counter, value};
      break;
    case OpKind::kWait:
      payload = program::WaitOp{counter, value};
      break;
    case OpKind::kRailPut:
      payload = program::RailPutOp{{}, counter, value};
      break;
    case OpKind::kEventRecord:
      payload = program::EventRecordOp{event};
      break;
    case OpKind::kEventWait:
      payload = program::EventWaitOp{event};
      break;
    default:
      throw std::invalid_argument("sync_op: not a synchronisation kind");
  }
  return program::make_op(rank, stream, std::move(label), std::move(payload));
}

// Fills `out` with random bytes; never all zero.
inline void fill_random(std::span<std::byte> out, std::mt19937_64& rng) {
  for (std::byte& b : out)
    b = static_cast<std::byte>(rng() & 0xFF);
  if (!out.empty()) out[0] = std::byte{0x5A};
}

// Standard-normal values stored as bf16 words or fp32, `n` elements into `out`.
inline std::vector<float> fill_normal(std::span<std::byte> out, DType dtype, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::size_t n = out.size() / static_cast<std::size_t>(item_bytes(dtype));
  std::vector<float> values(n);
  for (std::size_t i = 0; i < n; ++i) {
    const float v = normal(rng);
    if (dtype == DType::kBf16) {
      const std::uint16_t w = arith::float_to_bf16(v);
      std::memcpy(out.data() + 2 * i, &w, 2);
      values[i] = arith::bf16_to_float(w);
    } else {
      std::memcpy(out.data() + 4 * i, &v, 4);
      values[i] = v;
    }
  }
  return values;
}

inline std::vector<float> read_fp32(std::span<const std::byte> in) {
  std::vector<float> v(in.size() / 4);
  std::memcpy(v.data(), in.data(), v.size() * 4);
  return v;
}

inline std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline RunOptions seeded(std::uint64_t seed, double jitter = 0.0, int max_errors = 64,
                         const CostModel& cost = {}) {
  RunOptions o;
  o.seed = seed;
  o.jitter = jitter;
  o.max_errors = max_errors;
  o.cost = cost;
  return o;
}

inline ExecutorOptions timing_only() {
  ExecutorOptions o;
  o.timing_only = true;
  return o;
}

inline std::string error_list(const RunResult& r) {
  std::string s;
  for (const ExecError& e : r.errors)
    s += std::string(error_kind_name(e.kind)) + ": " + e.message + "\n";
  return s;
}

}  // namespace tide::exec::testing
