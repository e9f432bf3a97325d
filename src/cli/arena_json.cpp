#include "arena_json.hpp"

namespace tide::cli {

nlohmann::json arena_json(const runtime::ArenaInfo& a) {
  nlohmann::json slots = nlohmann::json::array();
  for (const runtime::ArenaInfo::Slot& s : a.slots)
    slots.push_back({{"id", s.id}, {"bytes", s.bytes}, {"groups", s.groups}});
  return {{"arena_bytes", a.arena_bytes},
          {"resident_bytes", a.resident_bytes},
          {"stage_bytes", a.stage_bytes},
          {"landing_bytes", a.landing_bytes},
          {"reduce_scatter_bytes", a.reduce_scatter_bytes},
          {"bound_bytes", a.bound_bytes},
          {"slots", slots}};
}

}  // namespace tide::cli
