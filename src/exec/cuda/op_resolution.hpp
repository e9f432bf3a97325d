// What an op's payload becomes on CUDA: the per-kind resolution of the one CUDA executor.
//
// NOTE [CUDA op resolution]
// The sequence runner (SeqOp, sequence_runner.cpp) resolves every op once, at construction,
// with the functions below, for a group's call templates and for one-shot programs alike
// (NOTE [one-shot programs]). A Resolver says how a Region becomes a device address:
//   address(region)  the target's address type (a Ptr: a fixed arena pointer, or a slot bound
//                    per call: a tensor, the output; one-shot programs bind every slot now)
//   fixed(region)    a fixed pointer (landing partials: the kernel takes them by value)
//   gradient(param)  records the kernel gradient slot of kTensor `param` (an arena slot,
//                    -1 in gradient_slots, is a fixed pointer in fixed_gradients)
//   upload_stream()  optional: the stream that uploads Level 1 segment tables (without it the
//                    upload is synchronous)
// resolve_payload() fills the per-kind fields: copies, out, in, elems, ctas, zero_width /
// zero_rows / zero_pitch, sum, table, tuning, land, empty. What is bound per call (alpha,
// accumulate, tensor and output pointers), counters, events, messages and copy pools the
// runner adds itself.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "program_checks.hpp"
#include "tide/core/dtype.hpp"
#include "tide/core/error.hpp"
#include "tide/cuda/check.hpp"
#include "tide/kernels/landing.hpp"
#include "tide/kernels/level1_sum.hpp"
#include "tide/program/program.hpp"

namespace tide::exec::cuda_detail {

// The copy calls of a kCopy / kRailPut: one per non-empty descriptor, in order.
template <class Target, class Resolver>
void resolve_copies(const program::Op& op, Resolver& resolver, Target& m) {
  for (const program::CopyDescriptor& c : program::copies_of(op)) {
    if (c.src.bytes() == 0) continue;
    typename decltype(m.copies)::value_type call;
    call.dst = resolver.address(c.dst);
    call.src = resolver.address(c.src);
    call.width = static_cast<std::size_t>(c.src.width);
    call.rows = static_cast<std::size_t>(c.src.rows);
    call.dpitch = static_cast<std::size_t>(c.dst.pitch);
    call.spitch = static_cast<std::size_t>(c.src.pitch);
    call.flat = contiguous(c.src) && contiguous(c.dst);
    m.copies.push_back(call);
  }
  m.empty = m.copies.empty();
}

// A kSum's Level 1 launch less its per-call parts: out = address(dst), in = address(staged[0]),
// the segment table (gradient slots compacted per op: the kernel takes at most 256), the
// staged geometry, the CTA budget and its tuning. Alpha and accumulate stay at their defaults.
template <class Target, class Resolver>
void resolve_sum(const program::SumOp& op, int rank, Resolver& resolver, Target& m) {
  const std::int64_t width = op.dst.width / 4;
  if (width == 0 || op.dst.rows == 0) {
    m.empty = true;
    return;
  }
  const std::int64_t item = item_bytes(op.in_dtype);
  // Kernel gradient slots: kTensor `param` under key param (>= 0); the rank's arena (one-node
  // Slot-Reuse pull: the own contribution in the gradient area, NOTE [one-node TIDE-RS]) under
  // key -1, a fixed pointer to the arena's start (src_elem counts items from there).
  constexpr int kArenaKey = -1;
  auto key_of = [](const program::SumSegment& s) {
    if (s.space == program::Space::kTensor) return s.param;
    if (s.space == program::Space::kArena) return kArenaKey;
    throw Unsupported("a Level 1 sum reads own contributions from tensors or the arena only");
  };
  std::map<int, int> compact;  // key -> kernel gradient slot
  for (const program::SumSegment& s : op.segments)
    compact.emplace(key_of(s), 0);
  int slots = 0;
  for (auto& [key, index] : compact) {
    index = slots++;
    if (key != kArenaKey) {
      resolver.gradient(key);
      continue;
    }
    // Slot -1, its pointer fixed now (aligned with the slots: entries of kTensor slots stay
    // null where the resolver binds tensors per call).
    const program::Region arena{program::Buffer{rank, program::Space::kArena, 0}, 0, item, item, 1};
    m.gradient_slots.push_back(-1);
    m.fixed_gradients.resize(m.gradient_slots.size(), nullptr);
    m.fixed_gradients.back() = resolver.fixed(arena);
  }
  std::vector<kernels::Level1RunSpec> runs;
  runs.reserve(op.segments.size());
  for (const program::SumSegment& s : op.segments)
    runs.push_back({s.row, s.out_elem, s.elems, compact.at(key_of(s)), s.src_elem});
  // A resolver with upload_stream() uploads the table on that stream (the sequence runner's
  // setup stream, NOTE [CUDA call sequences] 1); else synchronously.
  std::optional<cudaStream_t> upload;
  if constexpr (requires { resolver.upload_stream(); }) upload = resolver.upload_stream();
  m.table = std::make_unique<kernels::Level1SegmentTable>(static_cast<int>(op.dst.rows), width,
                                                          runs, upload);
  m.out = resolver.address(op.dst);
  kernels::Level1SumArgs& a = m.sum;
  a.out_pitch = op.dst.rows > 1 ? op.dst.pitch / 4 : width;
  a.dtype = op.in_dtype;
  a.num_staged = static_cast<int>(op.staged.size());
  if (!op.staged.empty()) {
    m.in = resolver.address(op.staged[0]);
    a.staged_stride = staged_stride(op) / item;
    a.staged_pitch = op.dst.rows > 1 ? op.staged[0].pitch / item : width;
  }
  a.num_gradients = slots;
  // A sum into the output (NOTE [one-node TIDE-RS]) folds into it: the program's accumulate
  // here, the call's in a call sequence (sum_into_output).
  a.accumulate = op.accumulate;
  m.sum_into_output = op.dst.buffer.space == program::Space::kOutput;
  a.table = m.table->view();
  a.ctas = std::max(1, op.ctas);
  m.tuning = kernels::recommended_level1_tuning(a.ctas);
}

// A kLand's landing less its per-call parts: out = address(dst), the partials (fixed), the
// wave index and CTA budget. Accumulate stays false.
template <class Target, class Resolver>
void resolve_land(const program::LandOp& op, Resolver& resolver, Target& m) {
  m.out = resolver.address(op.dst);
  m.land.n = op.dst.bytes() / 4;
  m.land.num_partials = static_cast<int>(op.sources.size());
  for (std::size_t k = 0; k < op.sources.size(); ++k)
    m.land.partials[k] = reinterpret_cast<const float*>(resolver.fixed(op.sources[k]));
  m.land.wave_index = op.wave_index;
  m.land.ctas = std::max(1, op.ctas);
  m.empty = m.land.n == 0;
}

// The per-kind fields of NOTE [CUDA op resolution] for every kind but the counter and event
// ones (kSignal, kWait, kEventRecord, kEventWait), which each target maps itself; kRailPut
// gets its copies here.
template <class Target, class Resolver>
void resolve_payload(const program::Op& op, Resolver& resolver, Target& m) {
  if (op.is<program::CopyOp>() || op.is<program::RailPutOp>()) {
    resolve_copies(op, resolver, m);
  } else if (const auto* sum = op.get_if<program::SumOp>()) {
    resolve_sum(*sum, op.rank, resolver, m);
  } else if (const auto* land = op.get_if<program::LandOp>()) {
    resolve_land(*land, resolver, m);
  } else if (const auto* cast = op.get_if<program::CastOp>()) {
    m.out = resolver.address(cast->dst);
    m.in = resolver.address(cast->src);
    m.elems = cast->dst.bytes() / 2;
    m.ctas = cast->ctas;
    m.empty = m.elems == 0;
  } else if (const auto* zero = op.get_if<program::ZeroOp>()) {
    m.out = resolver.address(zero->dst);
    m.zero_width = static_cast<std::size_t>(zero->dst.width);
    m.zero_rows = static_cast<std::size_t>(zero->dst.rows);
    m.zero_pitch = static_cast<std::size_t>(zero->dst.pitch);
    m.empty = zero->dst.bytes() == 0;
  } else if (op.is<program::ReleaseOp>()) {
    m.empty = true;
  }
}

// How a resolved copy goes onto a stream: one cudaMemcpyAsync where both
// sides are contiguous, else one cudaMemcpy2DAsync (copy engines either way).
template <class Copy>
void enqueue_copy(const Copy& c, void* dst, const void* src, cudaStream_t s) {
  if (c.flat) {
    TIDE_CUDA_CHECK(cudaMemcpyAsync(dst, src, c.width * c.rows, cudaMemcpyDeviceToDevice, s));
  } else {
    TIDE_CUDA_CHECK(cudaMemcpy2DAsync(dst, c.dpitch, src, c.spitch, c.width, c.rows,
                                      cudaMemcpyDeviceToDevice, s));
  }
}

// How a resolved kZero goes onto a stream.
template <class Target>
void enqueue_zero(const Target& m, void* out, cudaStream_t s) {
  if (m.zero_rows <= 1 || m.zero_pitch == m.zero_width) {
    TIDE_CUDA_CHECK(cudaMemsetAsync(out, 0, m.zero_width * m.zero_rows, s));
  } else {
    TIDE_CUDA_CHECK(cudaMemset2DAsync(out, m.zero_pitch, 0, m.zero_width, m.zero_rows, s));
  }
}

}  // namespace tide::exec::cuda_detail
