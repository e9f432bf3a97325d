// Buffer numbering, bounds checks and allocation for the reference executor.
#include "memory.hpp"

#include <algorithm>

namespace tide::exec::detail {

BufferTable::BufferTable(const program::Program& program) {
  for (int r = 0; r < program.ranks; ++r) {
    const program::BufferSizes empty;
    const program::BufferSizes& sizes = r < static_cast<int>(program.buffers.size())
                                            ? program.buffers[static_cast<std::size_t>(r)]
                                            : empty;
    rank_base_.push_back(static_cast<int>(buffers_.size()));
    tensors_.push_back(static_cast<int>(sizes.tensor_bytes.size()));
    outputs_.push_back(static_cast<int>(std::max<std::size_t>(1, sizes.output_bytes.size())));
    buffers_.push_back(program::Buffer{r, program::Space::kArena, 0});
    sizes_.push_back(sizes.arena_bytes);
    // Output 0 always exists (possibly empty), so single-call programs need not size it.
    for (int o = 0; o < outputs_.back(); ++o) {
      buffers_.push_back(program::Buffer{r, program::Space::kOutput, o});
      sizes_.push_back(o < static_cast<int>(sizes.output_bytes.size())
                           ? sizes.output_bytes[static_cast<std::size_t>(o)]
                           : 0);
    }
    for (std::size_t p = 0; p < sizes.tensor_bytes.size(); ++p) {
      buffers_.push_back(program::Buffer{r, program::Space::kTensor, static_cast<int>(p)});
      sizes_.push_back(sizes.tensor_bytes[p]);
    }
  }
}

int BufferTable::index(const program::Buffer& buffer) const {
  if (buffer.rank < 0 || buffer.rank >= ranks()) return -1;
  const int base = rank_base_[static_cast<std::size_t>(buffer.rank)];
  switch (buffer.space) {
    case program::Space::kArena:
      return buffer.index == 0 ? base : -1;
    case program::Space::kOutput:
      if (buffer.index < 0 || buffer.index >= outputs_[static_cast<std::size_t>(buffer.rank)])
        return -1;
      return base + 1 + buffer.index;
    case program::Space::kTensor:
      if (buffer.index < 0 || buffer.index >= tensors_[static_cast<std::size_t>(buffer.rank)])
        return -1;
      return base + 1 + outputs_[static_cast<std::size_t>(buffer.rank)] + buffer.index;
  }
  return -1;
}

bool region_in_bounds(const BufferTable& table, const program::Region& region) {
  const int index = table.index(region.buffer);
  if (index < 0) return false;
  if (region.offset < 0 || region.width < 0 || region.rows < 1) return false;
  if (region.rows > 1 && region.pitch < region.width) return false;
  const std::int64_t last = region.offset + (region.rows - 1) * region.pitch + region.width;
  return last <= table.size(index);
}

std::string describe_bytes(const program::Buffer& buffer, std::int64_t begin, std::int64_t end) {
  std::string where = "rank " + std::to_string(buffer.rank) + " ";
  switch (buffer.space) {
    case program::Space::kArena:
      where += "arena";
      break;
    case program::Space::kOutput:
      where += buffer.index == 0 ? "output" : "output " + std::to_string(buffer.index);
      break;
    case program::Space::kTensor:
      where += "tensor " + std::to_string(buffer.index);
      break;
  }
  return where + " bytes [" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

Memory::Memory(const BufferTable& table) {
  buffers_.resize(static_cast<std::size_t>(table.count()));
  for (int i = 0; i < table.count(); ++i)
    buffers_[static_cast<std::size_t>(i)].assign(static_cast<std::size_t>(table.size(i)), kPoison);
}

}  // namespace tide::exec::detail
