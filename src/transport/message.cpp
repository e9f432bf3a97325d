// Puts and signals as two-sided messages: NOTE [rail messages] in docs/executor.md.
#include "message.hpp"

#include <string>

#include "one_sided.hpp"
#include "tide/core/error.hpp"
#include "tide/cuda/check.hpp"
#include "tide/kernels/signal/counter_add.hpp"

namespace tide::transport {

using program::Region;

bool crosses_ranks(const program::Op& op, int& from, int& to) {
  const auto add = program::addition_of(op);  // a kRailPut or kSignal
  if (!add || add->counter.rank == op.rank) return false;
  from = op.rank;
  to = add->counter.rank;
  return true;
}

namespace {

// One side of a descriptor: `r` is the source (sender) or the destination (receiver).
MessagePart part_of(const Region& r, const MessageAddresses& at, Message& m, bool staging) {
  MessagePart p;
  p.bytes = static_cast<std::size_t>(r.bytes());
  std::byte* const first = at.region(r);
  if (first == nullptr) {
    throw Unsupported("a message " + std::string(m.sender ? "source" : "destination") +
                      " of rank " + std::to_string(r.buffer.rank) +
                      " is not addressable by this process");
  }
  if (contiguous(r)) {
    p.data = first;
    return p;
  }
  p.strided = true;
  p.region = first;
  p.width = static_cast<std::size_t>(r.width);
  p.rows = static_cast<std::size_t>(r.rows);
  p.pitch = static_cast<std::size_t>(r.pitch);
  if (!staging) return p;  // data stays nullptr: the region is read or written in place
  TIDE_CUDA_CHECK(cudaMalloc(&p.data, p.bytes));
  m.staging.push_back(p.data);
  return p;
}

}  // namespace

Message map_message(const program::Op& op, bool sender, const MessageAddresses& at, bool staging) {
  Message m;
  m.sender = sender;
  const program::CounterUse add = program::addition_of(op).value();
  m.self = sender ? op.rank : add.counter.rank;
  m.peer = sender ? add.counter.rank : op.rank;
  m.value = static_cast<std::uint64_t>(add.value);
  try {
    if (op.is<program::RailPutOp>()) {
      for (const program::CopyDescriptor& c : program::copies_of(op)) {
        if (c.src.bytes() == 0) continue;
        if (c.dst.buffer.rank != add.counter.rank) {
          throw Unsupported("a put whose destination (rank " + std::to_string(c.dst.buffer.rank) +
                            ") is not its counter's rank (" + std::to_string(add.counter.rank) +
                            ") cannot travel as a message");
        }
        m.parts.push_back(part_of(sender ? c.src : c.dst, at, m, staging));
      }
    }
    if (sender) {
      TIDE_CUDA_CHECK(cudaEventCreateWithFlags(&m.ready, cudaEventDisableTiming));
      TIDE_CUDA_CHECK(cudaEventCreateWithFlags(&m.sent, cudaEventDisableTiming));
    } else {
      m.counter = at.counter(add.counter);
      if (m.counter == nullptr) throw InternalError("a message receiver without its counters");
    }
  } catch (...) {
    release_message(m);
    throw;
  }
  return m;
}

void enqueue_message(const Message& m, MessageTransport& transport, cudaStream_t rail,
                     cudaStream_t op_stream, const MessageRelay& relay) {
  if (m.route.one_sided) {  // NOTE [one-sided messages]
    auto* one_sided = dynamic_cast<OneSidedTransport*>(&transport);
    if (one_sided == nullptr) throw InternalError("a one-sided message on a two-sided transport");
    enqueue_one_sided_message(m, *one_sided, rail, op_stream, relay);
    return;
  }
  constexpr std::size_t kToken = sizeof(std::uint64_t);
  if (m.sender) {
    TIDE_CUDA_CHECK(cudaEventRecord(m.ready, op_stream));
    TIDE_CUDA_CHECK(cudaStreamWaitEvent(rail, m.ready, 0));
    for (const MessagePart& p : m.parts) {
      if (p.strided) {
        TIDE_CUDA_CHECK(cudaMemcpy2DAsync(p.data, p.width, p.region, p.pitch, p.width, p.rows,
                                          cudaMemcpyDeviceToDevice, rail));
      }
      transport.send(m.self, m.peer, p.data, p.bytes, rail);
    }
    // NOTE [abort relay] 1: the verdict after the data's sends, then its own send.
    kernels::launch_abort_token(relay.verdict, relay.send_token, rail);
    transport.send(m.self, m.peer, relay.send_token, kToken, rail);
    TIDE_CUDA_CHECK(cudaEventRecord(m.sent, rail));
    TIDE_CUDA_CHECK(cudaStreamWaitEvent(op_stream, m.sent, 0));
    return;
  }
  for (const MessagePart& p : m.parts) {
    transport.recv(m.self, m.peer, p.data, p.bytes, rail);
    if (p.strided) {
      TIDE_CUDA_CHECK(cudaMemcpy2DAsync(p.region, p.pitch, p.data, p.width, p.width, p.rows,
                                        cudaMemcpyDeviceToDevice, rail));
    }
  }
  // NOTE [abort relay] 2: a token that never arrives reads as an abort.
  TIDE_CUDA_CHECK(cudaMemsetAsync(relay.recv_token, 0xff, kToken, rail));
  transport.recv(m.self, m.peer, relay.recv_token, kToken, rail);
  kernels::launch_relayed_counter_add(m.counter, m.value, relay.recv_token, relay.relay, rail,
                                      relay.own_abort);
}

void release_message(Message& m) noexcept {
  for (void* p : m.staging)
    (void)cudaFree(p);
  m.staging.clear();
  if (m.ready != nullptr) (void)cudaEventDestroy(m.ready);
  if (m.sent != nullptr) (void)cudaEventDestroy(m.sent);
  m.ready = m.sent = nullptr;
}

}  // namespace tide::transport
