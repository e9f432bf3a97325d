// Rail messages as one-sided puts: one_sided.hpp states the contract, NOTE [one-sided
// messages] in docs/executor.md the design.
#include "one_sided.hpp"

#include <algorithm>
#include <string>

#include "tide/core/error.hpp"
#include "tide/cuda/check.hpp"
#include "tide/kernels/signal/abort_check.hpp"
#include "tide/kernels/signal/counter_add.hpp"

namespace tide::transport {

using program::Region;

namespace {

// A descriptor's bytes in order as runs contiguous in both its source and its destination:
// fn(source byte from the source region's first, destination byte from the destination's
// first, bytes). One run where both are contiguous, else one per row (or part of a row where
// the two differ in width). Needs src.bytes() == dst.bytes() > 0.
template <typename Fn>
void for_each_run(const program::CopyDescriptor& c, Fn&& fn) {
  const auto row = [](const Region& r) { return contiguous(r) ? r.bytes() : r.width; };
  const auto pitch = [](const Region& r) { return contiguous(r) ? r.bytes() : r.pitch; };
  const std::int64_t ws = row(c.src), wd = row(c.dst), ps = pitch(c.src), pd = pitch(c.dst);
  for (std::int64_t at = 0, n = 0; at < c.src.bytes(); at += n) {
    const std::int64_t s = at % ws, d = at % wd;
    n = std::min(ws - s, wd - d);
    fn(at / ws * ps + s, at / wd * pd + d, n);
  }
}

}  // namespace

std::vector<OneSidedMessage> one_sided_input(const program::Program& p, std::span<const int> ops,
                                             std::int64_t region_offset, int lane) {
  std::vector<OneSidedMessage> out;
  for (const int i : ops) {
    const program::Op& op = p.ops[static_cast<std::size_t>(i)];
    int from = 0, to = 0;
    if (!crosses_ranks(op, from, to)) continue;
    OneSidedMessage m{from, to, lane, {}};
    if (op.is<program::RailPutOp>()) {
      for (const program::CopyDescriptor& c : program::copies_of(op)) {
        if (c.src.bytes() == 0) continue;
        const bool dst_window = c.dst.buffer.space == program::Space::kArena;
        const bool src_window =
            c.src.buffer.space == program::Space::kArena && c.src.buffer.rank == from;
        if (!dst_window || !src_window) {  // the plan refuses it (two-sided)
          m.pieces.push_back({c.src.bytes(), c.dst.bytes(),
                              dst_window ? region_offset + c.dst.offset : kNotInWindow,
                              src_window ? region_offset + c.src.offset : kNotInWindow});
          continue;
        }
        if (c.src.bytes() != c.dst.bytes()) {
          throw InvalidArgument("one-sided messages: op " + std::to_string(i) + " copies " +
                                std::to_string(c.src.bytes()) + " bytes into a destination of " +
                                std::to_string(c.dst.bytes()) +
                                "; a descriptor's source and destination must hold the same bytes");
        }
        for_each_run(c, [&](std::int64_t src, std::int64_t dst, std::int64_t bytes) {
          m.pieces.push_back({bytes, bytes, region_offset + c.dst.offset + dst,
                              region_offset + c.src.offset + src});
        });
      }
    }
    out.push_back(std::move(m));
  }
  return out;
}

void route_one_sided(const program::Op& op, std::int64_t region_offset, Message& m) {
  OneSidedRoute route;
  route.one_sided = true;
  if (op.is<program::RailPutOp>()) {
    std::size_t part = 0;
    for (const program::CopyDescriptor& c : program::copies_of(op)) {
      if (c.src.bytes() == 0) continue;
      if (c.dst.buffer.space != program::Space::kArena ||
          c.src.buffer.space != program::Space::kArena) {
        throw InternalError(
            "route_one_sided: a source or destination outside the window was "
            "planned");
      }
      for_each_run(c, [&](std::int64_t src, std::int64_t dst, std::int64_t bytes) {
        route.puts.push_back({part, static_cast<std::size_t>(src), static_cast<std::size_t>(bytes),
                              region_offset + c.dst.offset + dst});
      });
      ++part;
    }
    if (part != m.parts.size()) throw InternalError("route_one_sided: parts and descriptors");
  }
  route.signals = static_cast<int>(route.puts.size()) + 1;  // and the token
  m.route = std::move(route);
}

void enqueue_one_sided_message(const Message& m, OneSidedTransport& t, cudaStream_t rail,
                               cudaStream_t op_stream, const MessageRelay& relay) {
  const std::uint64_t number = t.next_token_number(m.self, m.peer, m.sender);
  if (m.sender) {
    // 1.
    TIDE_CUDA_CHECK(cudaEventRecord(m.ready, op_stream));
    TIDE_CUDA_CHECK(cudaStreamWaitEvent(rail, m.ready, 0));
    // 2. Straight from the source region (in the window), never from staging.
    for (const OneSidedPut& put : m.route.puts) {
      const MessagePart& p = m.parts[put.part];
      const auto* region = static_cast<const std::byte*>(p.strided ? p.region : p.data);
      t.put_signal(m.self, m.peer, region + put.first, put.bytes, put.window_offset, rail);
    }
    // 3. NOTE [abort relay] 1, numbered, written where the transport puts it from.
    std::uint64_t* const token = t.token_source(m.self, m.peer, number);
    kernels::launch_abort_token(relay.verdict, token, rail, number << 1);
    t.put_token(m.self, m.peer, token, number, rail);
    // 4.
    TIDE_CUDA_CHECK(cudaEventRecord(m.sent, rail));
    TIDE_CUDA_CHECK(cudaStreamWaitEvent(op_stream, m.sent, 0));
    return;
  }
  // 5.
  t.wait_signals(m.self, m.peer, m.route.signals, rail);
  // 6. NOTE [abort relay] 2, numbered.
  kernels::launch_relayed_counter_add(m.counter, m.value, t.token_slot(m.self, m.peer, number),
                                      relay.relay, rail, relay.own_abort, number << 1);
}

}  // namespace tide::transport
