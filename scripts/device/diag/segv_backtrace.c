// A SIGSEGV handler to preload into a process that crashes without a Python or C++ trace: it
// prints each frame as "module +offset (nearest exported symbol)" to stderr, for addr2line on
// an unstripped build. Used on the H200 to find tide._C's static libstdc++
// (bench/results/ipc/diagnostic-segv-backtrace.md).
//   gcc -shared -fPIC -o /tmp/segv.so scripts/device/diag/segv_backtrace.c
//   LD_PRELOAD=/tmp/segv.so python3 ...
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
static void handler(int sig) {
  (void)sig;
  void* frames[64];
  int n = backtrace(frames, 64);
  for (int i = 0; i < n; ++i) {
    Dl_info info;
    if (dladdr(frames[i], &info) && info.dli_fname) {
      fprintf(stderr, "SEGV frame %d: %s +0x%lx (%s)\n", i, info.dli_fname,
              (unsigned long)((char*)frames[i] - (char*)info.dli_fbase),
              info.dli_sname ? info.dli_sname : "?");
    } else {
      fprintf(stderr, "SEGV frame %d: %p\n", i, frames[i]);
    }
  }
  _exit(139);
}
__attribute__((constructor)) static void install(void) {
  struct sigaction sa = {0};
  sa.sa_handler = handler;
  sigaction(SIGSEGV, &sa, NULL);
}
