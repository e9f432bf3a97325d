// Puts and signals between ranks that cannot address each other, as two-sided messages
// (the rail path to other hosts; paper Sec. 6.1-6.2).
//
// NOTE [rail messages]
// A kRailPut or kSignal from rank s to rank d where Fabric::load_store(s, d) is false becomes:
//   sender s, in the op's place on its stream S:
//     record `ready` on S; the rank's rail stream R waits for it; for every non-empty copy
//     descriptor in order: a strided source is packed into a staging buffer on R
//     (cudaMemcpy2DAsync), then Fabric::send of its bytes to d on R; a signal, or a put with
//     no bytes, sends one 8-byte token instead; record `sent` on R and S waits for it (what
//     follows the put on S follows its transfer, as with a copy on S).
//   receiver d, at the same place of the global schedule, on its rail stream:
//     for every descriptor in the same order: Fabric::recv into the destination (or into a
//     staging buffer, then cudaMemcpy2DAsync into a strided destination); a token is received
//     into a scratch word; then the op's counter addition on d's own counter.
// Matching: every process enqueues its rail stream's sends and receives in the order of the
// one global schedule (NOTE [enqueue order]), so for each pair of ranks the sends of one and
// the receives of the other come in the same order, as NCCL's point-to-point matching needs.
// All of a rank's messages share its one rail stream, so no NCCL operation waits behind
// another stream's later one. Deadlock freedom follows from the schedule: the earliest
// incomplete message has every dependency earlier in the schedule, hence complete, and its
// partner sits at the same place of the partner's rail stream.
// A timeout cannot release a receive waiting for a message that never comes: the executor
// then reports the stuck streams and refuses further runs (fail-stop).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tide/fabric/fabric.hpp"
#include "tide/program/program.hpp"

namespace tide::exec::cuda_detail {

struct MessagePart {
  void* data = nullptr;  // the contiguous bytes sent or received (the region, or `staging`)
  std::size_t bytes = 0;
  // A strided region: packed into / unpacked from `staging` by cudaMemcpy2DAsync.
  bool strided = false;
  void* region = nullptr;
  std::size_t width = 0, rows = 0, pitch = 0;
};

struct Message {
  bool sender = true;
  int peer = -1;                     // the other rank
  std::vector<MessagePart> parts;    // empty: one 8-byte token
  std::uint64_t* counter = nullptr;  // receiver: its own counter word
  std::uint64_t value = 0;
  cudaEvent_t ready = nullptr;  // sender: the op's stream -> the rail stream
  cudaEvent_t sent = nullptr;   // sender: the rail stream -> the op's stream
  std::vector<void*> staging;   // device buffers this message owns
};

// Whether `op` travels as a message on `fabric` (a put or signal to an unreachable rank).
bool is_message(const program::Op& op, const fabric::Fabric& fabric);

// The sender's or the receiver's side of a message op (device pointers resolved, staging
// allocated, events created). Throws tide::Unsupported for a put whose destinations are not
// all on the counter's rank.
Message map_message(const program::Op& op, bool sender, const fabric::Fabric& fabric);

// Enqueues one side (NOTE [rail messages]); `token` is an 8-byte device word.
void enqueue_message(const Message& m, fabric::Fabric& fabric, cudaStream_t rail,
                     cudaStream_t op_stream, void* token);

// Frees staging and events; never throws.
void release_message(Message& m) noexcept;

}  // namespace tide::exec::cuda_detail
