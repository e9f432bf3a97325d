#include "tide/program/program.hpp"

#include <algorithm>

namespace tide::program {

std::string_view op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::kCopy:
      return "copy";
    case OpKind::kSum:
      return "sum";
    case OpKind::kLand:
      return "land";
    case OpKind::kCast:
      return "cast";
    case OpKind::kZero:
      return "zero";
    case OpKind::kSignal:
      return "signal";
    case OpKind::kWait:
      return "wait";
    case OpKind::kRailPut:
      return "rail-put";
    case OpKind::kEventRecord:
      return "event-record";
    case OpKind::kEventWait:
      return "event-wait";
    case OpKind::kRelease:
      return "release";
  }
  return "?";
}

int Program::stream(const std::string& name) {
  const auto it = std::find(stream_names.begin(), stream_names.end(), name);
  if (it != stream_names.end()) return static_cast<int>(it - stream_names.begin());
  stream_names.push_back(name);
  return static_cast<int>(stream_names.size()) - 1;
}

std::vector<Region> reads_of(const Op& op) {
  std::vector<Region> reads;
  switch (op.kind) {
    case OpKind::kCopy:
    case OpKind::kRailPut:
      for (const CopyDescriptor& c : op.copies)
        reads.push_back(c.src);
      break;
    case OpKind::kSum: {
      // Staged inputs are read only on the runs the segments name; a run covers the same
      // elements of every staged input's row.
      const std::int64_t item = item_bytes(op.in_dtype);
      for (const SumSegment& s : op.segments) {
        for (const Region& staged : op.staged) {
          reads.push_back(Region{staged.buffer,
                                 staged.offset + s.row * staged.pitch + s.out_elem * item,
                                 s.elems * item, s.elems * item, 1});
        }
        reads.push_back(Region{Buffer{op.rank, Space::kTensor, s.param}, s.src_elem * item,
                               s.elems * item, s.elems * item, 1});
      }
      break;
    }
    case OpKind::kLand:
      reads = op.sources;
      if (op.accumulate || op.wave_index > 0) reads.push_back(op.dst);
      break;
    case OpKind::kCast:
      reads = op.sources;
      break;
    default:
      break;
  }
  return reads;
}

std::vector<Region> writes_of(const Op& op) {
  switch (op.kind) {
    case OpKind::kCopy:
    case OpKind::kRailPut: {
      std::vector<Region> writes;
      for (const CopyDescriptor& c : op.copies)
        writes.push_back(c.dst);
      return writes;
    }
    case OpKind::kSum:
    case OpKind::kLand:
    case OpKind::kCast:
    case OpKind::kZero:
    case OpKind::kRelease:
      return {op.dst};
    default:
      return {};
  }
}

}  // namespace tide::program
