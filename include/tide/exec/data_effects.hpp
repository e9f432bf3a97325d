// The data effects of a program's ops in the arithmetic of NOTE [arithmetic order], shared by
// every CPU executor (reference and host). bf16: 16-bit words; fp32: binary32; little-endian.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tide/program/program.hpp"

namespace tide::exec {

// Byte value of released and never-written memory ("poison").
inline constexpr std::byte kPoison{0xFF};

// Where a buffer's bytes are, as this process sees them.
class ByteSpace {
 public:
  virtual ~ByteSpace() = default;
  // The address of byte `offset` of `buffer`. Regions handed to apply_data() lie inside
  // their buffers (the program validator checks them), so no bounds are passed.
  virtual std::byte* at(const program::Buffer& buffer, std::int64_t offset) = 0;
};

// Applies `op`'s effect on memory (copies as memmove; kSum: level1_partial inside its segments,
// +0 outside; kLand: land(wave_sum(sources)); kCast: fp32 to bf16; kRelease poisons; sync ops:
// nothing).
void apply_data(const program::Op& op, ByteSpace& space);

// Calls f(offset, bytes) for each contiguous run of `region`, rows merged when contiguous.
template <class F>
void for_each_run(const program::Region& region, F&& f) {
  if (region.width <= 0) return;
  if (region.rows <= 1 || region.pitch == region.width) {
    f(region.offset, region.width * region.rows);
    return;
  }
  for (std::int64_t r = 0; r < region.rows; ++r)
    f(region.offset + r * region.pitch, region.width);
}

}  // namespace tide::exec
