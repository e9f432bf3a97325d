// Device side shared by the rendezvous transports (NOTE [rendezvous transport], NOTE [ipc
// rendezvous transport]): the device's global timer, and the one bounded, releasable wait both
// transports spin in. Include only from .cu files.
#pragma once

#include <cstdio>

namespace tide::transport {

__device__ inline unsigned long long rendezvous_now_ns() {
  unsigned long long t = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Whether the transport was released (MessageTransport::release): `release` is a word in mapped
// host memory that only the host writes, from 0 to 1.
__device__ inline bool rendezvous_released(const unsigned int* release) {
  return *static_cast<const volatile unsigned int*>(release) != 0;
}

// One thread spins until *word >= value, then fences (what the word's writer stored before it
// is visible) and returns true; returns false at once where the transport is released. Past
// `timeout_ns` of the global timer it prints the message (number `value` of the pair `from` ->
// `to`), what it waited for (`what`) and the word, and traps (NOTE style 8).
__device__ inline bool rendezvous_wait(const unsigned long long* word, unsigned long long value,
                                       const unsigned int* release, unsigned long long timeout_ns,
                                       const char* transport, const char* what,
                                       unsigned long long message, int from, int to) {
  const auto* w = static_cast<const volatile unsigned long long*>(word);
  const unsigned long long start = rendezvous_now_ns();
  while (*w < value) {
    if (rendezvous_released(release)) return false;
    if (rendezvous_now_ns() - start > timeout_ns) {
      printf(
          "TIDE %s: message %llu from rank %d to rank %d: %s word holds %llu after %llu ms "
          "(waiting for %llu)\n",
          transport, message, from, to, what, *w, timeout_ns / 1000000ull, value);
      __trap();
    }
    __nanosleep(256);
  }
  __threadfence_system();
  return true;
}

}  // namespace tide::transport
