// Errors raised by TIDE. Every message is one line that names the offending value, the limit it
// broke and, where there is one, what to do instead. Front ends (the `tide` CLI, the future Python
// binding) print the message and map the type to an exit status or exception class.
#pragma once

#include <stdexcept>
#include <string>

namespace tide {

// The caller passed a value TIDE cannot interpret (a malformed shape, a zero size, L = 9).
class InvalidArgument : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// The input is well formed but lies outside TIDE's contract (Sec. 2.5, 6.3): FSDP2 keeps
// its stock collectives for such a group. The message says why.
class Unsupported : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A collective could not complete (a dead or stalled peer, an abort; fail-stop, Sec. 7.5); every
// later call on that communicator raises it too. Names the rank and the wait that failed.
class CommunicationError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An internal invariant failed: a bug in TIDE, never the caller's fault.
class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

}  // namespace tide
