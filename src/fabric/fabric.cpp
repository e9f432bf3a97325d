// The fabric interface's defaults (include/tide/fabric/fabric.hpp): no messages.
#include "tide/fabric/fabric.hpp"

#include <string>

#include "tide/core/error.hpp"

namespace tide::fabric {

namespace {

[[noreturn]] void no_messages(int peer) {
  throw Unsupported("this fabric cannot send messages (rank " + std::to_string(peer) +
                    " is not load/store reachable and the fabric has no send/receive path)");
}

[[noreturn]] void no_one_sided(const Fabric& f) {
  throw Unsupported("this fabric has no one-sided messages (" + f.one_sided_reason() +
                    "); the runner carries them two-sided");
}

}  // namespace

void Fabric::put_signal(const void*, std::size_t, int, std::int64_t, int, cudaStream_t) {
  no_one_sided(*this);
}

void Fabric::put_token(const std::uint64_t*, int, std::uint64_t, int, cudaStream_t) {
  no_one_sided(*this);
}

void Fabric::signal(int, int, cudaStream_t) {
  no_one_sided(*this);
}

void Fabric::wait_signals(int, int, int, cudaStream_t) {
  no_one_sided(*this);
}

std::uint64_t Fabric::next_token_number(int, int, bool) {
  no_one_sided(*this);
}

std::uint64_t* Fabric::token_source(int, std::uint64_t, int) {
  no_one_sided(*this);
}

const std::uint64_t* Fabric::token_slot(int, std::uint64_t, int) const {
  no_one_sided(*this);
}

void Fabric::send(const void*, std::size_t, int peer, cudaStream_t) {
  no_messages(peer);
}

void Fabric::recv(void*, std::size_t, int peer, cudaStream_t) {
  no_messages(peer);
}

}  // namespace tide::fabric
