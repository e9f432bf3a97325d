// The host executor (architecture: exec/host): runs this process's rank's ops of one call
// on CPU processes that share a host fabric. Real copies and the shared data effects
// (data_effects.hpp), so outputs are bitwise equal to the reference executor's.
//
// NOTE [host execution]
// 1. The rank's ops run one at a time on the calling thread, in the projection of the call
//    template's legal order (NOTE [legal order]); since every rank does the same for every
//    call, in the order all ranks share, no rank can block for good, and event ops need no
//    action: a record always precedes its waits in that order.
// 2. A wait spins, then yields, then sleeps, on its signal word until it holds the total
//    that earlier calls of the sequence added to it plus the template's relative threshold
//    (NOTE [call sequences]). Signals add with release order after the op's data writes.
// 3. Per-call bindings: this rank's tensors (kTensor) and output (kOutput) are the caller's
//    pointers for this call; alpha and accumulate are patched into the sum and landing ops.
//    kRelease needs no action: the caller owns its gradients and the call is over on return.
// 4. Fail-stop: a wait past the timeout, a dead peer or an abort by another rank aborts the
//    fabric (every rank's next wait raises) and throws CommunicationError naming the rank and
//    the wait.
// 5. Rail messages: a kRailPut or kSignal from rank s to a rank d of another host (the
//    fabric's load_store(s, d) is false) travels through the host rail transport (NOTE [host
//    rail transport]): s packs the put's sources in descriptor order and sends them at the
//    op's place in the order; d, at the same place of its own walk of that order, receives
//    them into the destinations and then adds the op's value to its own counter. Every rank
//    walks the one order, so each pair's sends and receives match in number and order, and
//    the earliest unfinished message has both ends waiting on it: no rank blocks for good.
//    A put whose destinations are not all on its counter's rank is tide::Unsupported.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tide/fabric/host_fabric.hpp"
#include "tide/program/call_sequence.hpp"

namespace tide::exec {

struct HostCallBindings {
  std::vector<std::byte*> tensors;  // this rank's kTensor buffers, by index
  std::byte* output = nullptr;      // this rank's kOutput 0
  float alpha = 1.0f;               // the Level 1 scale (Sec. 4.3)
  bool accumulate = false;          // the landing adds into the output
};

// Which call this is among all of the communicator's calls (NOTE [host fabric] 4).
struct HostCallTag {
  std::int64_t index = 0;  // calls of the communicator before this one
  std::int64_t tag = 0;    // the group and collective, the same on every rank for this call
  std::string what;        // "reduce_scatter of group 'layers.3'", for messages
};

// Where a group's sequence lives on the fabric.
struct HostSequencePlace {
  std::int64_t region_offset = 0;  // the group's region in every rank's arena
  int first_counter = 0;           // the sequence's counter 0 among the fabric's words
};

// What a call sent as rail messages (NOTE [host execution] 5) from this rank.
struct HostCallTraffic {
  std::int64_t messages = 0;
  std::int64_t bytes = 0;
};

// Runs this rank's ops of `call`. `counter_base[id]`: what earlier calls of the sequence
// added to this rank's counter id (the caller advances it by the template's additions).
HostCallTraffic run_host_call(const program::CallTemplate& call, fabric::HostFabric& fabric,
                              const HostSequencePlace& place,
                              std::span<const std::int64_t> counter_base,
                              const HostCallBindings& bindings, const HostCallTag& tag,
                              std::chrono::milliseconds timeout);

}  // namespace tide::exec
