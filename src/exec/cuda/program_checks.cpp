// Host-only checks of a Program for the CUDA executor (CudaExecutor::check): everything that
// can be refused before a GPU is touched, with the op named. See NOTE [CUDA executor op
// mapping] in include/tide/exec/cuda_executor.hpp for what each op becomes.
#include "program_checks.hpp"

#include <algorithm>
#include <set>
#include <span>
#include <vector>

#include "tide/core/dtype.hpp"
#include "tide/core/error.hpp"
#include "tide/exec/cuda_executor.hpp"
#include "tide/kernels/landing.hpp"
#include "tide/kernels/level1_sum.hpp"
#include "tide/program/validate.hpp"

namespace tide::exec::cuda_detail {

using program::Buffer;
using program::Op;
using program::Program;
using program::Region;
using program::Space;

std::string op_where(const Program& program, int op) {
  return "CudaExecutor: op " + program::describe_op(program, op) + ": ";
}

std::int64_t buffer_size(const Program& program, const Buffer& b) {
  return program::buffer_size(program, b);
}

std::int64_t staged_stride(const program::SumOp& op) {
  return op.staged.size() < 2 ? 0 : op.staged[1].offset - op.staged[0].offset;
}

namespace {

std::string describe(const Region& r) {
  return "rank " + std::to_string(r.buffer.rank) + " buffer " + std::to_string(r.buffer.index) +
         " [offset " + std::to_string(r.offset) + ", " + std::to_string(r.rows) + " x " +
         std::to_string(r.width) + " bytes, pitch " + std::to_string(r.pitch) + "]";
}

// What the CUDA mapping needs beyond NOTE [program validity]: the kernels' limits and the
// layouts their launchers take (NOTE [CUDA executor op mapping]).
class MappingLimits {
 public:
  explicit MappingLimits(const Program& p) : p_(p) {}

  void run() {
    for (std::size_t i = 0; i < p_.ops.size(); ++i) {
      op_ = static_cast<int>(i);
      const Op& op = p_.ops[i];
      copies(program::copies_of(op));
      if (const auto* s = op.get_if<program::SumOp>()) {
        sum(op.rank, *s);
      } else if (const auto* l = op.get_if<program::LandOp>()) {
        land(*l);
      } else if (const auto* c = op.get_if<program::CastOp>()) {
        cast(*c);
      }
    }
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw InvalidArgument(op_where(p_, op_) + what);
  }
  [[noreturn]] void unsupported(const std::string& what) const {
    throw Unsupported(op_where(p_, op_) + what);
  }

  void copies(std::span<const program::CopyDescriptor> copies) const {
    for (std::size_t k = 0; k < copies.size(); ++k) {
      const program::CopyDescriptor& c = copies[k];
      if (c.src.buffer == c.dst.buffer && c.src.bytes() > 0) {
        const std::int64_t s_end = c.src.offset + (c.src.rows - 1) * c.src.pitch + c.src.width;
        const std::int64_t d_end = c.dst.offset + (c.dst.rows - 1) * c.dst.pitch + c.dst.width;
        if (c.src.offset < d_end && c.dst.offset < s_end) {
          unsupported("copy " + std::to_string(k) +
                      ": source and destination overlap in one buffer; copy engines do "
                      "not give memmove semantics (stage through another area)");
        }
      }
    }
  }

  void sum(int rank, const program::SumOp& op) const {
    if (op.dst.width == 0 || op.dst.rows == 0) return;  // an empty sub-slice part: no launch
    if (op.dst.buffer.rank != rank) fail("the sum's dst is not on its own rank");
    if (op.dst.pitch % 4 != 0 || op.dst.offset % 4 != 0)
      fail("dst is not fp32 rows (pitch and offset multiples of 4): " + describe(op.dst));
    if (op.dst.rows > kernels::kMaxLevel1Rows) fail("more than 8 rows");
    if (op.in_dtype != DType::kBf16 && op.in_dtype != DType::kFp32)
      unsupported("input dtype is neither bf16 nor fp32");
    const std::int64_t item = item_bytes(op.in_dtype);
    if (static_cast<int>(op.staged.size()) > kernels::kMaxLevel1Staged)
      fail(std::to_string(op.staged.size()) + " staged contributions (at most 7)");
    for (std::size_t k = 0; k < op.staged.size(); ++k) {
      const Region& s = op.staged[k];
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
      if (op.segments[k].elems < 1) fail("segment " + std::to_string(k) + " is empty");
      // An own contribution lies in a tensor, or in the rank's arena (the one-node Slot-Reuse
      // pull's gradient area, NOTE [one-node TIDE-RS]): one kernel gradient slot each.
      const program::Space space = op.segments[k].space;
      if (space != program::Space::kTensor && space != program::Space::kArena) {
        unsupported("segment " + std::to_string(k) +
                    ": an own contribution outside the tensors and the arena");
      }
      params.insert(space == program::Space::kArena ? -1 : op.segments[k].param);
    }
    if (static_cast<int>(params.size()) > kernels::kMaxLevel1Gradients)
      unsupported("more than 256 distinct gradients in one sum");
  }

  void land(const program::LandOp& op) const {
    if (!contiguous(op.dst) || op.dst.offset % 4 != 0)
      fail("dst is not a contiguous fp32 range: " + describe(op.dst));
    if (static_cast<int>(op.sources.size()) > kernels::kMaxWave)
      fail(std::to_string(op.sources.size()) + " sources (a wave has 1..8)");
    for (std::size_t k = 0; k < op.sources.size(); ++k) {
      const Region& s = op.sources[k];
      if (!contiguous(s) || s.offset % 4 != 0)
        fail("source " + std::to_string(k) + " is not a contiguous fp32 range: " + describe(s));
    }
    if (op.ctas > kernels::kMaxLandingCtas) fail("more than 1024 landing CTAs");
  }

  void cast(const program::CastOp& op) const {
    const Region& s = op.src;
    if (!contiguous(s) || !contiguous(op.dst) || s.offset % 4 != 0 || op.dst.offset % 2 != 0) {
      fail("needs a contiguous, aligned fp32 source and bf16 dst: " + describe(s) + " -> " +
           describe(op.dst));
    }
  }

  const Program& p_;
  int op_ = 0;
};

}  // namespace

void check_program(const Program& program) {
  // Counter waits are left to the run: a wait that can never be satisfied times out there,
  // naming itself (NOTE [CUDA executor op mapping], completion).
  program::ValidateOptions options;
  options.whole_program = false;
  options.event_records = true;
  const std::vector<program::Defect> defects = program::validate(program, options);
  if (!defects.empty()) {
    const program::Defect& d = defects.front();
    if (d.op < 0) throw InvalidArgument("CudaExecutor: " + d.what);
    throw InvalidArgument(op_where(program, d.op) + d.what);
  }
  MappingLimits(program).run();
}

}  // namespace tide::exec::cuda_detail

namespace tide::exec {
void CudaExecutor::check(const program::Program& program) {
  cuda_detail::check_program(program);
}
}  // namespace tide::exec
