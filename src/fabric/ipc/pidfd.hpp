// File descriptors taken from another process of this host (pidfd_open + pidfd_getfd, Linux
// 5.6+), as the ipc fabric takes its peers' cuMem allocations (NOTE [ipc fabric]).
#pragma once

#include <sys/types.h>

#include <string>

namespace tide::fabric::detail {

// Whether this kernel has pidfd_open and pidfd_getfd (tried on this process's own descriptor);
// otherwise `why` says what failed.
bool pidfd_getfd_available(std::string& why);

// Whether another process of this user may take this process's descriptors: Yama's
// ptrace_scope is 0 (or absent), or the process holds CAP_SYS_PTRACE; otherwise `why` says which
// setting refuses it and how to change it.
bool peers_may_take_descriptors(std::string& why);

// A descriptor of this process that refers to what `fd` refers to in process `pid`. The caller
// closes it. Throws tide::Unsupported naming the process, the descriptor and errno's text.
int take_descriptor(pid_t pid, int fd);

}  // namespace tide::fabric::detail
