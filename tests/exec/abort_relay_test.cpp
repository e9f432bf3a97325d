// NOTE [abort relay] (docs/executor.md): one message at a time through the
// rendezvous transport (NCCL's two-sided semantics on one GPU), its abort token and the
// receiver's gated addition. Every case sends fresh random bytes (printed seed) into a
// poisoned destination and a random counter value, and checks the counter, the relayed-abort
// word and the bytes against what the NOTE says: a zero verdict counts; a set word of the
// sender's verdict (its own, or a rank it loads) or a token that never arrives (the transport
// released, as ncclCommAbort ends NCCL's receives) counts nothing and sets the relayed-abort
// word; the receiver's own abort counts nothing and sets nothing.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/gpu_test_util.hpp"
#include "sequence_test_util.hpp"
#include "tide/cuda/check.hpp"
#include "tide/kernels/signal/abort_check.hpp"
#include "tide/kernels/signal/counter_add.hpp"
#include "tide/testing/rendezvous_transport.hpp"
#include "transport/message.hpp"

namespace tide {
namespace {

using sequence_testing::Dev;
using sequence_testing::Stream;
using tide::kernels::AbortCheck;
using tide::testing::RendezvousTransport;
using transport::Message;
using transport::MessagePart;
using transport::MessageRelay;

struct Case {
  const char* name;
  bool data = true;             // a put (bytes, then the token); false: a signal (the token)
  bool sender_aborted = false;  // the sender's own abort word
  bool peer_aborted = false;    // a word the sender loads directly (a released LSA peer)
  bool relayed = false;         // the sender's relayed-abort word (it heard of an abort)
  bool receiver_aborted = false;
  bool token_lost = false;  // the transport released before the token moved
};

std::uint64_t read_word(const Dev& d) {
  std::uint64_t v = 0;
  TIDE_CUDA_CHECK(cudaMemcpy(&v, d.get(), 8, cudaMemcpyDeviceToHost));
  return v;
}

void set_word(Dev& d, std::uint64_t v) {
  TIDE_CUDA_CHECK(cudaMemcpy(d.get(), &v, 8, cudaMemcpyHostToDevice));
}

TEST(AbortRelay, TheTokenDecidesWhetherTheReceiverCounts) {
  TIDE_REQUIRE_GPU();
  const std::uint64_t seed = sequence_testing::test_seed();
  SCOPED_TRACE(tide::testing::seed_trace(seed));
  std::printf("%s\n", tide::testing::seed_trace(seed).c_str());
  std::mt19937_64 rng(seed);
  int device = 0;
  TIDE_CUDA_CHECK(cudaGetDevice(&device));
  kernels::prepare_counter_adds();
  kernels::prepare_abort_check();
  RendezvousTransport(2, device).prepare();
  const std::vector<Case> cases{
      {"valid put"},
      {"valid signal", false},
      {"sender released", true, true},
      {"sender released, signal", false, true},
      {"a peer it loads released", true, false, true},
      {"it heard of an abort", true, false, false, true},
      {"receiver released", true, false, false, false, true},
      {"token lost", true, false, false, false, false, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::size_t bytes = 1 + rng() % 5000;
    const std::uint64_t value = 1 + rng() % 1000;
    std::vector<unsigned char> host(bytes);
    for (unsigned char& v : host)
      v = static_cast<unsigned char>(rng());
    Dev src(bytes), dst(bytes), counter(8), relay(8), own(8), peer(8), heard(8), rx_abort(8),
        tokens(16), table(3 * sizeof(void*));
    src.upload(host.data());
    dst.fill(0xA5);                              // poison
    const std::uint64_t start = rng() % 100000;  // the counter's earlier total, never 0
    set_word(counter, start);
    set_word(relay, 0);
    set_word(own, c.sender_aborted ? 1 : 0);
    set_word(peer, c.peer_aborted ? 7 : 0);
    set_word(heard, c.relayed ? 1 : 0);
    set_word(rx_abort, c.receiver_aborted ? 1 : 0);
    tokens.fill(0x3C);
    // The sender's verdict: the words it loads, its relayed-abort word, then its own.
    const void* words[3] = {peer.get(), heard.get(), own.get()};
    table.upload(words);
    AbortCheck verdict;
    verdict.watched = static_cast<const std::uint64_t* const*>(table.get());
    verdict.watched_count = 2;
    verdict.own = verdict.watched + 2;
    verdict.own_count = 1;

    RendezvousTransport t(2, device);
    Stream s_op, s_rail, r_rail;
    Message send, recv;
    send.sender = true;
    send.self = 0;
    send.peer = 1;
    recv.sender = false;
    recv.self = 1;
    recv.peer = 0;
    recv.counter = static_cast<std::uint64_t*>(counter.get());
    recv.value = value;
    if (c.data) {
      send.parts.push_back(MessagePart{src.get(), bytes});
      recv.parts.push_back(MessagePart{dst.get(), bytes});
    }
    TIDE_CUDA_CHECK(cudaEventCreateWithFlags(&send.ready, cudaEventDisableTiming));
    TIDE_CUDA_CHECK(cudaEventCreateWithFlags(&send.sent, cudaEventDisableTiming));
    auto* token_words = static_cast<std::uint64_t*>(tokens.get());
    MessageRelay sender_side;
    sender_side.verdict = verdict;
    sender_side.send_token = token_words;
    MessageRelay receiver_side;
    receiver_side.recv_token = token_words + 1;
    receiver_side.own_abort = static_cast<const std::uint64_t*>(rx_abort.get());
    receiver_side.relay = static_cast<std::uint64_t*>(relay.get());
    if (c.token_lost) {
      // The receiver's side alone: its receives wait for sends that never come, until the
      // release ends them (moving nothing), as ncclCommAbort ends a pending ncclRecv.
      transport::enqueue_message(recv, t, r_rail.get(), r_rail.get(), receiver_side);
      t.release();
    } else {
      transport::enqueue_message(send, t, s_rail.get(), s_op.get(), sender_side);
      transport::enqueue_message(recv, t, r_rail.get(), r_rail.get(), receiver_side);
    }
    TIDE_CUDA_CHECK(cudaStreamSynchronize(r_rail.get()));
    TIDE_CUDA_CHECK(cudaStreamSynchronize(s_op.get()));
    TIDE_CUDA_CHECK(cudaStreamSynchronize(s_rail.get()));
    const bool valid =
        !c.sender_aborted && !c.peer_aborted && !c.relayed && !c.receiver_aborted && !c.token_lost;
    EXPECT_EQ(read_word(counter), valid ? start + value : start);
    // The relayed-abort word: set where the token said abort (or never came), unless the
    // receiver had released itself first.
    EXPECT_EQ(read_word(relay), (!valid && !c.receiver_aborted) ? 1u : 0u);
    if (c.data && !c.token_lost) {
      // Sends cannot be made conditional: the bytes arrive either way (void where not valid).
      const auto got = dst.download();
      EXPECT_EQ(std::memcmp(got.data(), host.data(), bytes), 0);
    }
    if (c.token_lost) {
      for (const std::byte b : dst.download())
        ASSERT_EQ(b, std::byte{0xA5}) << "a released receive moved bytes";
    }
    transport::release_message(send);
  }
}

}  // namespace
}  // namespace tide
