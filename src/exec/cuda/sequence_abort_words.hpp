// The sequence runner's abort words (step 5 of NOTE [CUDA call sequences] and NOTE [abort
// relay], docs/executor.md): what keeps a released rank's later signals from counting, the
// end-of-call check, and the words each message side carries. Set up at construction by
// set_up() (sequence_abort_words.cpp); the watch's release stores into them, the enqueue reads
// them (the end-of-call check, relay_of()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "sequence_devices.hpp"
#include "tide/kernels/signal/abort_check.hpp"
#include "transport/message.hpp"

namespace tide::exec::sequence_detail {

struct AbortWords {
  // Per rank its abort word: local ranks the published word or a private word of its device;
  // other ranks the published word through the peer mapping where it is load/store reachable,
  // else null (their state is relayed by their messages).
  std::vector<std::uint64_t*> words;
  std::map<int, std::uint64_t*> private_words;         // per device
  const std::uint64_t** check_tables = nullptr;        // device: watched words, then own words
  std::vector<const std::uint64_t*> check_table_host;  // its source (an asynchronous upload)
  kernels::AbortCheck peer_check{};                    // watched_count 0: no check
  // NOTE [abort relay]: per local rank its send and receive token words (two words on its
  // device), the relayed-abort word (on the first local rank's device; nullptr without
  // messages), and the verdict a sender's token reads (every word of check_tables).
  std::map<int, std::uint64_t*> tokens;
  std::uint64_t* relay_word = nullptr;
  kernels::AbortCheck verdict{};

  // At construction, after the templates were mapped (has_messages: some template sends a
  // message); the tokens are allocated before (sequence_runner.cpp).
  void set_up(const Fixed& fixed, Devices& devices, bool has_messages);
  const std::uint64_t* of(int rank) const { return words[static_cast<std::size_t>(rank)]; }
  // The words a side of message `m` carries (NOTE [abort relay]).
  transport::MessageRelay relay_of(const transport::Message& m) const;
};

}  // namespace tide::exec::sequence_detail
