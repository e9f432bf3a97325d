// Race checking at each op's completion (NOTE [reference execution semantics] 3-4): every
// read must see bytes whose last writer happens before it; every write (or release) must
// come after the earlier writer and every reader since; a landing must not sum a partial that
// an earlier landing already summed (NOTE [reference execution semantics] 4).
#pragma once

#include <cstdint>
#include <vector>

#include "clock.hpp"
#include "errors.hpp"
#include "memory.hpp"
#include "shadow_map.hpp"

namespace tide::exec::detail {

class RaceChecker {
 public:
  RaceChecker(const program::Program& program, const BufferTable& table, ErrorSink& sink);

  // The caller set [begin, end) of buffer `index` before the run.
  void mark_input(int index, std::int64_t begin, std::int64_t end);
  // Op `op` completed with clock `clock`: check its reads, then its writes, and record both.
  void on_complete(int op, const ClockRef& clock);

 private:
  struct Conflict {
    ErrorKind kind;
    int other_op;
    std::int64_t begin;
    std::int64_t end;
  };
  // `consume`: `r` is a source of a landing, which sums (consumes) the partial there.
  void check_read(int op, const Access& me, const ClockRef& clock, const program::Region& r,
                  bool consume);
  void check_write(int op, const Access& me, const ClockRef& clock, const program::Region& r,
                   bool release);
  bool written_by_zero(const Access& writer) const;
  void report(int op, const program::Region& region, const std::vector<Conflict>& conflicts,
              bool release);

  const program::Program& program_;
  const BufferTable& table_;
  ErrorSink& sink_;
  std::vector<ShadowMap> shadow_;  // per buffer index
};

}  // namespace tide::exec::detail
