// Whether a process of this host still runs, for naming a dead peer (NOTE [runtime] 5), and
// this host's name.
#pragma once

#include <string>

namespace tide {

// This host's name (gethostname); empty where it cannot be read.
std::string host_name();

// False for a pid that is absent, a zombie or dead (read from /proc/<pid>/stat).
bool process_alive(int pid);

}  // namespace tide
