// Whether a process of this host still runs, for naming a dead peer (NOTE [runtime] 5).
#pragma once

namespace tide {

// False for a pid that is absent, a zombie or dead (read from /proc/<pid>/stat).
bool process_alive(int pid);

}  // namespace tide
