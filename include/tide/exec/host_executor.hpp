// The host executor (architecture: exec/host): runs this process's rank's ops of one call
// on CPU processes that share a host fabric. Real copies and the shared data effects
// (data_effects.hpp), so outputs are bitwise equal to the reference executor's.
// Contract (NOTE [host execution] in docs/runtime.md): run_host_call() runs the rank's ops on
// the calling thread in the template's legal order, complete when it returns. Every rank runs
// the same calls in the same order (what keeps waits and messages from blocking for good). A
// timeout, dead peer or abort aborts the fabric and throws CommunicationError naming the rank
// and the wait. A put whose destinations are not all on its counter's rank is Unsupported.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tide/fabric/host_fabric.hpp"
#include "tide/program/call_sequence.hpp"
#include "tide/transport/host_messages.hpp"

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
  // Rail messages' transport (NOTE [host execution] 5), one per fabric, for other hosts.
  transport::HostMessages* messages = nullptr;
};

// What a call sent as rail messages (NOTE [host execution] 5) from this rank.
struct HostCallTraffic {
  std::int64_t messages = 0;
  std::int64_t bytes = 0;
};

// Runs this rank's ops of `call`; counter_base[id]: what earlier calls added to counter id.
HostCallTraffic run_host_call(const program::CallTemplate& call, fabric::HostFabric& fabric,
                              const HostSequencePlace& place,
                              std::span<const std::int64_t> counter_base,
                              const HostCallBindings& bindings, const HostCallTag& tag,
                              std::chrono::milliseconds timeout);

}  // namespace tide::exec
