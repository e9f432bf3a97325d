// Links against an installed tide_core and checks a topology's arithmetic.
#include <cstdio>

#include "tide/core/topology.hpp"

int main() {
  const tide::Topology topology(3, 4);
  if (topology.world() != 12 || topology.node_of(7) != 1 || topology.local_of(7) != 3) {
    std::puts("consumer: wrong topology arithmetic");
    return 1;
  }
  std::puts("consumer: ok");
  return 0;
}
