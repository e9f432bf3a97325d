// The CUDA sequence runner's abort words, step 5 of NOTE [CUDA call sequences] and NOTE [abort
// relay] (docs/executor.md): the words that keep a released rank's later signals from counting,
// the end-of-call check's tables, and the words each message side carries. The watch's release
// (sequence_watch.cpp) stores into them; the enqueue (sequence_enqueue.cpp) reads relay_of().
#include "sequence_abort_words.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "tide/core/error.hpp"
#include "tide/cuda/check.hpp"
#include "transport/message.hpp"

namespace tide::exec {

// NOTE [CUDA call sequences] 5: the abort word of every local rank (the published one, or a
// private word per device), the published words of the other ranks this process loads
// directly (NOTE [abort relay]: the rest are relayed by their messages), the relayed-abort
// word where the sequence sends messages, the end-of-call check's tables where some rank is
// another process's, and the verdict a message's token reads. Called at construction, after
// the templates were mapped.
void sequence_detail::AbortWords::set_up(const Fixed& fixed, Devices& devices, bool has_messages) {
  words.assign(static_cast<std::size_t>(fixed.ranks), nullptr);
  const int word = fixed.place.abort_word;
  const int first =
      fixed.local_ranks.empty() ? 0 : fixed.local_ranks[0];  // the caller stream's rank
  bool others = false;                                       // some rank is another process's
  for (int r = 0; r < fixed.ranks; ++r) {
    if (!fixed.fabric.local(r)) others = true;
    if (word >= 0) {
      std::uint64_t* signals = fixed.fabric.signals(r);
      // NOTE [abort relay] 3: only words of ranks this process loads and stores directly.
      const bool reachable =
          fixed.fabric.local(r) || (signals != nullptr && fixed.fabric.load_store(first, r));
      if (fixed.fabric.local(r) && signals == nullptr) {
        throw InternalError("CudaSequenceRunner: local rank " + std::to_string(r) +
                            " has no signal words");
      }
      if (reachable) words[static_cast<std::size_t>(r)] = signals + word;
    } else if (fixed.fabric.local(r)) {
      const int device = fixed.fabric.device_of(r);
      std::uint64_t*& own = private_words[device];
      if (own == nullptr) {
        devices.use_device_of(r);
        TIDE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&own), 8));
      }
      words[static_cast<std::size_t>(r)] = own;
    }
  }
  for (const int r : fixed.local_ranks) {
    devices.use_device_of(r);
    TIDE_CUDA_CHECK(
        cudaMemsetAsync(words[static_cast<std::size_t>(r)], 0, 8, devices.setup_stream(r)));
  }
  if (has_messages) {  // NOTE [abort relay] 2
    devices.use_device_of(first);
    TIDE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&relay_word), 8));
    TIDE_CUDA_CHECK(cudaMemsetAsync(relay_word, 0, 8, devices.setup_stream(first)));
  }
  std::vector<const std::uint64_t*>& table = check_table_host;  // uploaded asynchronously
  table.clear();
  if (word >= 0) {
    for (int r = 0; r < fixed.ranks; ++r)
      if (!fixed.fabric.local(r) && words[static_cast<std::size_t>(r)] != nullptr)
        table.push_back(words[static_cast<std::size_t>(r)]);
  }
  if (relay_word != nullptr) table.push_back(relay_word);
  const auto watched = static_cast<int>(table.size());
  for (const int r : fixed.local_ranks) {
    const std::uint64_t* own = words[static_cast<std::size_t>(r)];
    if (std::find(table.begin() + watched, table.end(), own) == table.end()) table.push_back(own);
  }
  if (!has_messages && (word < 0 || !others || watched == 0)) return;  // no table needed
  devices.use_device_of(first);
  const std::size_t bytes = table.size() * sizeof(const std::uint64_t*);
  TIDE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&check_tables), bytes));
  TIDE_CUDA_CHECK(cudaMemcpyAsync(check_tables, table.data(), bytes, cudaMemcpyHostToDevice,
                                  devices.setup_stream(first)));
  verdict.watched = check_tables;  // NOTE [abort relay] 1: every word
  verdict.watched_count = static_cast<int>(table.size());
  // The end-of-call check only where another process's rank can abort, with published words.
  if (word < 0 || !others || watched == 0) return;
  peer_check.watched = check_tables;
  peer_check.watched_count = watched;
  peer_check.own = check_tables + watched;
  peer_check.own_count = static_cast<int>(table.size()) - watched;
}

transport::MessageRelay sequence_detail::AbortWords::relay_of(const transport::Message& m) const {
  transport::MessageRelay relay;
  std::uint64_t* token_words = tokens.at(m.self);
  relay.verdict = verdict;
  relay.send_token = token_words;
  relay.recv_token = token_words + 1;
  relay.own_abort = of(m.self);
  relay.relay = relay_word;
  return relay;
}

}  // namespace tide::exec
