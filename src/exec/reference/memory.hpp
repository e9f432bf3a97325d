// Every rank's buffers as byte arrays (NOTE [reference execution semantics] 1), the table
// that numbers them, and the byte runs of a Region.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tide/exec/data_effects.hpp"
#include "tide/program/program.hpp"

namespace tide::exec::detail {

using exec::for_each_run;
using exec::kPoison;

// Numbers each (rank, space, index) of a Program's buffers 0..count()-1.
class BufferTable {
 public:
  explicit BufferTable(const program::Program& program);

  int index(const program::Buffer& buffer) const;  // -1 for an unknown buffer
  int count() const { return static_cast<int>(buffers_.size()); }
  std::int64_t size(int index) const { return sizes_[static_cast<std::size_t>(index)]; }
  const program::Buffer& buffer(int index) const {
    return buffers_[static_cast<std::size_t>(index)];
  }
  int ranks() const { return static_cast<int>(rank_base_.size()); }

 private:
  std::vector<int> rank_base_;  // index of rank r's arena; its output follows, then tensors
  std::vector<int> tensors_;    // per rank
  std::vector<int> outputs_;    // per rank (at least 1)
  std::vector<std::int64_t> sizes_;
  std::vector<program::Buffer> buffers_;
};

// Whether every byte of `region` lies inside its (known) buffer and the geometry is sane.
bool region_in_bounds(const BufferTable& table, const program::Region& region);

// "rank 2 arena bytes [0, 64)"
std::string describe_bytes(const program::Buffer& buffer, std::int64_t begin, std::int64_t end);

// The bytes of every buffer, poisoned (0xFF) at allocation.
class Memory {
 public:
  explicit Memory(const BufferTable& table);

  std::span<std::byte> bytes(int index) { return buffers_[static_cast<std::size_t>(index)]; }
  std::byte* at(int index, std::int64_t offset) {
    return buffers_[static_cast<std::size_t>(index)].data() + offset;
  }

 private:
  std::vector<std::vector<std::byte>> buffers_;
};

}  // namespace tide::exec::detail
