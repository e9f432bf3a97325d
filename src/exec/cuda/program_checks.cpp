// Host-only checks of a Program for the CUDA executor (CudaExecutor::check): everything that
// can be refused before a GPU is touched, with the op named. See NOTE [CUDA executor op
// mapping] in include/tide/exec/cuda_executor.hpp for what each op becomes.
#include "program_checks.hpp"

#include <algorithm>
#include <set>
#include <vector>

#include "tide/core/dtype.hpp"
#include "tide/core/error.hpp"
#include "tide/exec/cuda_executor.hpp"
#include "tide/kernels/landing.hpp"
#include "tide/kernels/level1_sum.hpp"

namespace tide::exec::cuda_detail {

using program::Buffer;
using program::Op;
using program::OpKind;
using program::Program;
using program::Region;
using program::Space;

std::string op_where(const Program& program, int op) {
  const Op& o = program.ops[static_cast<std::size_t>(op)];
  std::string stream = "?";
  if (o.stream >= 0 && o.stream < static_cast<int>(program.stream_names.size()))
    stream = program.stream_names[static_cast<std::size_t>(o.stream)];
  return "CudaExecutor: op " + std::to_string(op) + " '" + o.label + "' (" +
         std::string(program::op_kind_name(o.kind)) + ", rank " + std::to_string(o.rank) +
         ", stream '" + stream + "'): ";
}

std::int64_t buffer_size(const Program& program, const Buffer& b) {
  if (b.rank < 0 || b.rank >= static_cast<int>(program.buffers.size())) return -1;
  const program::BufferSizes& s = program.buffers[static_cast<std::size_t>(b.rank)];
  switch (b.space) {
    case Space::kArena:
      return b.index == 0 ? s.arena_bytes : -1;
    case Space::kTensor:
      return b.index >= 0 && b.index < static_cast<int>(s.tensor_bytes.size())
                 ? s.tensor_bytes[static_cast<std::size_t>(b.index)]
                 : -1;
    case Space::kOutput:
      return b.index >= 0 && b.index < static_cast<int>(s.output_bytes.size())
                 ? s.output_bytes[static_cast<std::size_t>(b.index)]
                 : -1;
  }
  return -1;
}

std::int64_t staged_stride(const Op& op) {
  return op.staged.size() < 2 ? 0 : op.staged[1].offset - op.staged[0].offset;
}

namespace {

std::string space_name(Space s) {
  return s == Space::kArena ? "arena" : s == Space::kTensor ? "tensor" : "output";
}

std::string describe(const Region& r) {
  return "rank " + std::to_string(r.buffer.rank) + " " + space_name(r.buffer.space) + " " +
         std::to_string(r.buffer.index) + " [offset " + std::to_string(r.offset) + ", " +
         std::to_string(r.rows) + " x " + std::to_string(r.width) + " bytes, pitch " +
         std::to_string(r.pitch) + "]";
}

class Checker {
 public:
  explicit Checker(const Program& p) : p_(p) {}

  void run() {
    if (p_.ranks < 1) invalid_program("ranks = " + std::to_string(p_.ranks) + " (need >= 1)");
    if (static_cast<int>(p_.buffers.size()) != p_.ranks) {
      invalid_program("has " + std::to_string(p_.buffers.size()) + " BufferSizes for " +
                      std::to_string(p_.ranks) + " ranks");
    }
    if (p_.counters < 0 || p_.events < 0) invalid_program("negative counter or event count");
    const auto events = static_cast<std::size_t>(p_.ranks) * static_cast<std::size_t>(p_.events);
    std::vector<int> recorded(events, -1);
    for (std::size_t i = 0; i < p_.ops.size(); ++i) {
      op_ = static_cast<int>(i);
      const Op& op = p_.ops[i];
      if (op.rank < 0 || op.rank >= p_.ranks) fail("rank outside [0, ranks)");
      if (op.stream < 0 || op.stream >= static_cast<int>(p_.stream_names.size()))
        fail("stream index outside the program's stream names");
      check_op(op);
      if (op.kind == OpKind::kEventRecord) {
        int& at = recorded[event_slot(op)];
        if (at >= 0)
          fail("event " + std::to_string(op.event) + " already recorded by op " +
               std::to_string(at) + "; record each (rank, event) once");
        at = op_;
      }
    }
    for (std::size_t i = 0; i < p_.ops.size(); ++i) {
      op_ = static_cast<int>(i);
      const Op& op = p_.ops[i];
      if (op.kind == OpKind::kEventWait && recorded[event_slot(op)] < 0) {
        fail("waits for event " + std::to_string(op.event) +
             ", which no op of its rank records: it would never complete");
      }
    }
  }

 private:
  [[noreturn]] void invalid_program(const std::string& what) const {
    throw InvalidArgument("CudaExecutor: the program " + what);
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw InvalidArgument(op_where(p_, op_) + what);
  }
  [[noreturn]] void unsupported(const std::string& what) const {
    throw Unsupported(op_where(p_, op_) + what);
  }

  std::size_t event_slot(const Op& op) const {
    return static_cast<std::size_t>(op.rank) * static_cast<std::size_t>(p_.events) +
           static_cast<std::size_t>(op.event);
  }

  // In bounds of an existing buffer, with a sane geometry.
  void region(const Region& r, const std::string& what) const {
    const std::int64_t size = buffer_size(p_, r.buffer);
    if (size < 0) fail(what + " names a buffer the program does not have: " + describe(r));
    if (r.offset < 0 || r.width < 0 || r.rows < 0)
      fail(what + " has a negative offset, width or row count: " + describe(r));
    if (r.rows > 1 && r.pitch < r.width) fail(what + " has pitch < width: " + describe(r));
    if (r.width > 0 && r.rows > 0) {
      const std::int64_t end = r.offset + (r.rows - 1) * r.pitch + r.width;
      if (end > size) {
        fail(what + " ends at byte " + std::to_string(end) + " past the buffer's " +
             std::to_string(size) + " bytes: " + describe(r));
      }
    }
  }

  void counter(const Op& op) const {
    if (op.counter.rank < 0 || op.counter.rank >= p_.ranks)
      fail("counter rank " + std::to_string(op.counter.rank) + " outside [0, ranks)");
    if (op.counter.id < 0 || op.counter.id >= p_.counters)
      fail("counter id " + std::to_string(op.counter.id) + " outside [0, " +
           std::to_string(p_.counters) + ")");
    if (op.value < 0) fail("negative counter value " + std::to_string(op.value));
  }

  void copies(const Op& op) const {
    for (std::size_t k = 0; k < op.copies.size(); ++k) {
      const program::CopyDescriptor& c = op.copies[k];
      const std::string what = "copy " + std::to_string(k);
      region(c.src, what + " source");
      region(c.dst, what + " destination");
      if (c.src.width != c.dst.width || c.src.rows != c.dst.rows) {
        fail(what + ": source and destination differ in shape: " + describe(c.src) + " vs " +
             describe(c.dst));
      }
      if (c.src.buffer == c.dst.buffer && c.src.bytes() > 0) {
        const std::int64_t s_end = c.src.offset + (c.src.rows - 1) * c.src.pitch + c.src.width;
        const std::int64_t d_end = c.dst.offset + (c.dst.rows - 1) * c.dst.pitch + c.dst.width;
        if (c.src.offset < d_end && c.dst.offset < s_end) {
          unsupported(what +
                      ": source and destination overlap in one buffer; copy engines do "
                      "not give memmove semantics (stage through another area)");
        }
      }
    }
  }

  void sum(const Op& op) const {
    region(op.dst, "dst");
    if (op.dst.width == 0 || op.dst.rows == 0) return;  // an empty sub-slice part: no launch
    if (op.dst.buffer.rank != op.rank) fail("the sum's dst is not on its own rank");
    if (op.dst.width % 4 != 0 || op.dst.pitch % 4 != 0 || op.dst.offset % 4 != 0)
      fail("dst is not fp32 rows (width, pitch and offset multiples of 4): " + describe(op.dst));
    if (op.dst.rows > kernels::kMaxLevel1Rows) fail("more than 8 rows");
    if (op.in_dtype != DType::kBf16 && op.in_dtype != DType::kFp32)
      unsupported("input dtype is neither bf16 nor fp32");
    const std::int64_t item = item_bytes(op.in_dtype);
    const std::int64_t width = op.dst.width / 4;
    if (static_cast<int>(op.staged.size()) > kernels::kMaxLevel1Staged)
      fail(std::to_string(op.staged.size()) + " staged contributions (at most 7)");
    for (std::size_t k = 0; k < op.staged.size(); ++k) {
      const Region& s = op.staged[k];
      region(s, "staged " + std::to_string(k));
      if (s.width != width * item || s.rows != op.dst.rows) {
        fail("staged " + std::to_string(k) +
             " does not have dst's rows x elements: " + describe(s));
      }
      const Region& s0 = op.staged[0];
      if (!(s.buffer == s0.buffer) || s.pitch != s0.pitch || s.offset % item != 0 ||
          s.pitch % item != 0 ||
          (k > 0 && s.offset - op.staged[k - 1].offset != staged_stride(op))) {
        unsupported(
            "the staged contributions are not one buffer with one pitch and a uniform "
            "stride (the Level 1 kernel reads them as base + k x stride); " +
            describe(s));
      }
    }
    if (op.staged.size() > 1 &&
        staged_stride(op) < (op.dst.rows - 1) * op.staged[0].pitch + op.staged[0].width) {
      fail("staged contributions overlap (stride " + std::to_string(staged_stride(op)) + ")");
    }
    std::set<int> params;
    for (std::size_t k = 0; k < op.segments.size(); ++k) {
      const program::SumSegment& s = op.segments[k];
      const std::string what = "segment " + std::to_string(k);
      if (s.row < 0 || s.row >= op.dst.rows) fail(what + ": row outside dst");
      if (s.elems < 1 || s.out_elem < 0 || s.out_elem + s.elems > width)
        fail(what + ": columns outside [0, " + std::to_string(width) + ") or empty");
      const std::int64_t size = buffer_size(p_, Buffer{op.rank, Space::kTensor, s.param});
      if (size < 0) fail(what + ": tensor " + std::to_string(s.param) + " does not exist");
      if (s.src_elem < 0 || (s.src_elem + s.elems) * item > size)
        fail(what + ": elements outside tensor " + std::to_string(s.param));
      params.insert(s.param);
    }
    if (static_cast<int>(params.size()) > kernels::kMaxLevel1Gradients)
      unsupported("more than 256 distinct gradients in one sum");
  }

  void land(const Op& op) const {
    region(op.dst, "dst");
    if (!contiguous(op.dst) || op.dst.bytes() % 4 != 0 || op.dst.offset % 4 != 0)
      fail("dst is not a contiguous fp32 range: " + describe(op.dst));
    if (op.sources.empty() || static_cast<int>(op.sources.size()) > kernels::kMaxWave)
      fail(std::to_string(op.sources.size()) + " sources (a wave has 1..8)");
    for (std::size_t k = 0; k < op.sources.size(); ++k) {
      const Region& s = op.sources[k];
      region(s, "source " + std::to_string(k));
      if (!contiguous(s) || s.bytes() != op.dst.bytes() || s.offset % 4 != 0)
        fail("source " + std::to_string(k) +
             " is not a contiguous fp32 range of dst's length: " + describe(s));
    }
    if (op.wave_index < 0) fail("negative wave index");
    if (op.ctas > kernels::kMaxLandingCtas) fail("more than 1024 landing CTAs");
  }

  void cast(const Op& op) const {
    region(op.dst, "dst");
    if (op.sources.size() != 1) fail("a cast has exactly one source");
    const Region& s = op.sources[0];
    region(s, "source");
    if (!contiguous(s) || !contiguous(op.dst) || s.bytes() != 2 * op.dst.bytes() ||
        s.offset % 4 != 0 || op.dst.offset % 2 != 0) {
      fail("needs a contiguous fp32 source twice the bytes of a contiguous bf16 dst: " +
           describe(s) + " -> " + describe(op.dst));
    }
  }

  void check_op(const Op& op) const {
    switch (op.kind) {
      case OpKind::kCopy:
        copies(op);
        break;
      case OpKind::kRailPut:
        copies(op);
        counter(op);
        break;
      case OpKind::kSignal:
      case OpKind::kWait:
        counter(op);
        break;
      case OpKind::kEventRecord:
      case OpKind::kEventWait:
        if (op.event < 0 || op.event >= p_.events)
          fail("event id " + std::to_string(op.event) + " outside [0, " +
               std::to_string(p_.events) + ")");
        break;
      case OpKind::kSum:
        sum(op);
        break;
      case OpKind::kLand:
        land(op);
        break;
      case OpKind::kCast:
        cast(op);
        break;
      case OpKind::kZero:
      case OpKind::kRelease:
        region(op.dst, "dst");
        break;
      default:
        fail("unknown op kind");
    }
  }

  const Program& p_;
  int op_ = 0;
};

}  // namespace

void check_program(const Program& program) {
  Checker(program).run();
}

}  // namespace tide::exec::cuda_detail

namespace tide::exec {
void CudaExecutor::check(const program::Program& program) {
  cuda_detail::check_program(program);
}
}  // namespace tide::exec
