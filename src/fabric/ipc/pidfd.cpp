// pidfd_open / pidfd_getfd through syscall(2): glibc 2.36 wraps them, older ones do not.
#include "pidfd.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>

#include "tide/core/error.hpp"

// The generic syscall numbers (x86-64 and arm64 share them), where the headers predate them.
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

namespace tide::fabric::detail {
namespace {

// Closes a descriptor at scope exit.
struct Descriptor {
  int fd = -1;
  ~Descriptor() {
    if (fd >= 0) ::close(fd);
  }
};

int pidfd_open(pid_t pid) {
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
}
int pidfd_getfd(int pidfd, int fd) {
  return static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd, fd, 0));
}

constexpr int kCapSysPtrace = 19;  // linux/capability.h

bool has_cap_sys_ptrace() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("CapEff:", 0) != 0) continue;
    std::uint64_t caps = 0;
    std::istringstream(line.substr(7)) >> std::hex >> caps;
    return ((caps >> kCapSysPtrace) & 1) != 0;
  }
  return false;
}

}  // namespace

bool pidfd_getfd_available(std::string& why) {
  Descriptor self{pidfd_open(::getpid())};
  if (self.fd < 0) {
    why = std::string("pidfd_open failed: ") + std::strerror(errno) + " (Linux 5.3+ needed)";
    return false;
  }
  Descriptor copy{pidfd_getfd(self.fd, self.fd)};
  if (copy.fd < 0) {
    why = std::string("pidfd_getfd failed: ") + std::strerror(errno) + " (Linux 5.6+ needed)";
    return false;
  }
  return true;
}

bool peers_may_take_descriptors(std::string& why) {
  int scope = 0;
  std::ifstream("/proc/sys/kernel/yama/ptrace_scope") >> scope;  // absent: no Yama, 0
  if (scope == 0) return true;
  if (scope < 3 && has_cap_sys_ptrace()) return true;
  why = "kernel.yama.ptrace_scope is " + std::to_string(scope) +
        " and the process lacks CAP_SYS_PTRACE, so a peer process may not take its file "
        "descriptors (sysctl kernel.yama.ptrace_scope=0 allows it)";
  return false;
}

int take_descriptor(pid_t pid, int fd) {
  Descriptor process{pidfd_open(pid)};
  if (process.fd < 0) {
    throw Unsupported("pidfd_open(" + std::to_string(pid) + ") failed: " + std::strerror(errno));
  }
  const int mine = pidfd_getfd(process.fd, fd);
  if (mine < 0) {
    throw Unsupported("pidfd_getfd(process " + std::to_string(pid) + ", descriptor " +
                      std::to_string(fd) + ") failed: " + std::strerror(errno) +
                      " (TIDE_IPC_HANDLES=cuda-ipc shares arenas without it)");
  }
  return mine;
}

}  // namespace tide::fabric::detail
