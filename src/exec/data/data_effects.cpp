// The data semantics of each op kind, in the exact arithmetic of NOTE [arithmetic order]
// (tide::arith). bf16 values are 16-bit words, fp32 values binary32, little-endian.
#include "tide/exec/data_effects.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "tide/core/arithmetic.hpp"
#include "tide/core/error.hpp"

namespace tide::exec {
namespace {

using program::Op;
using program::Region;

// A sum's input item: bf16 or fp32 (the validator refuses a sum of 1-byte items, NOTE [1-byte
// all-gather items]).
float load(const std::byte* p, DType dtype) {
  switch (dtype) {
    case DType::kBf16: {
      std::uint16_t w;
      std::memcpy(&w, p, sizeof w);
      return arith::bf16_to_float(w);
    }
    case DType::kFp32: {
      float f;
      std::memcpy(&f, p, sizeof f);
      return f;
    }
    case DType::kFp8:
    case DType::kU8:
      break;
  }
  throw InternalError("a sum reads " + std::string(dtype_name(dtype)) +
                      " items; only bf16 and fp32 are summed");
}

// The bytes of `region`, rows concatenated.
std::vector<std::byte> gather(const Region& region, ByteSpace& space) {
  std::vector<std::byte> out;
  out.reserve(static_cast<std::size_t>(region.bytes()));
  for_each_run(region, [&](std::int64_t offset, std::int64_t bytes) {
    const std::byte* p = space.at(region.buffer, offset);
    out.insert(out.end(), p, p + bytes);
  });
  return out;
}

// Writes `data` (rows concatenated) into `region`.
void scatter(const Region& region, const std::byte* data, ByteSpace& space) {
  for_each_run(region, [&](std::int64_t offset, std::int64_t bytes) {
    std::memmove(space.at(region.buffer, offset), data, static_cast<std::size_t>(bytes));
    data += bytes;
  });
}

void fill(const Region& region, std::byte value, ByteSpace& space) {
  for_each_run(region, [&](std::int64_t offset, std::int64_t bytes) {
    std::memset(space.at(region.buffer, offset), std::to_integer<int>(value),
                static_cast<std::size_t>(bytes));
  });
}

std::vector<float> gather_fp32(const Region& region, ByteSpace& space) {
  const std::vector<std::byte> bytes = gather(region, space);
  std::vector<float> out(bytes.size() / sizeof(float));
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

void copy(const program::CopyDescriptor& c, ByteSpace& space) {
  // Gathering first keeps overlapping source and destination well defined (memmove).
  const std::vector<std::byte> data = gather(c.src, space);
  scatter(c.dst, data.data(), space);
}

// Level 1 (Sec. 4.1): per element in a segment, level1_partial(staged in list order, own,
// alpha); +0 elsewhere in dst. Accumulating (the one-node sum into the output), each element of
// a segment becomes land(dst, part) = dst + part and padding stays +0, as the Level 1 kernel
// does (NOTE [arithmetic order], one-node layout).
void sum(int rank, const program::SumOp& op, ByteSpace& space) {
  const Region& dst = op.dst;
  const std::int64_t row_elems = dst.width / 4;
  const std::int64_t item = item_bytes(op.in_dtype);
  std::vector<const program::SumSegment*> segments;
  for (const program::SumSegment& s : op.segments)
    segments.push_back(&s);
  std::stable_sort(segments.begin(), segments.end(),
                   [](const auto* a, const auto* b) { return a->row < b->row; });

  std::vector<float> row(static_cast<std::size_t>(row_elems));
  std::vector<bool> covered(static_cast<std::size_t>(row_elems));
  std::vector<float> staged(op.staged.size());
  auto seg = segments.begin();
  for (std::int64_t r = 0; r < dst.rows; ++r) {
    std::fill(row.begin(), row.end(), 0.0f);
    std::fill(covered.begin(), covered.end(), false);
    for (; seg != segments.end() && (*seg)->row == r; ++seg) {
      const program::SumSegment& s = **seg;
      const program::Buffer own_buffer = s.source(rank);
      for (std::int64_t e = 0; e < s.elems; ++e) {
        const std::int64_t col = s.out_elem + e;
        for (std::size_t i = 0; i < op.staged.size(); ++i) {
          const Region& st = op.staged[i];
          staged[i] = load(space.at(st.buffer, st.offset + r * st.pitch + col * item), op.in_dtype);
        }
        const float own = load(space.at(own_buffer, (s.src_elem + e) * item), op.in_dtype);
        row[static_cast<std::size_t>(col)] = arith::level1_partial(staged, own, op.alpha);
        covered[static_cast<std::size_t>(col)] = true;
      }
    }
    if (op.accumulate && dst.width > 0) {
      std::vector<float> before(row.size());
      std::memcpy(before.data(), space.at(dst.buffer, dst.offset + r * dst.pitch),
                  static_cast<std::size_t>(dst.width));
      for (std::size_t k = 0; k < row.size(); ++k) {
        if (covered[k]) row[k] = arith::land(before[k], row[k], 0, true);
      }
    }
    if (dst.width > 0) {  // an empty sub-slice part writes nothing (and row.data() is null)
      std::memcpy(space.at(dst.buffer, dst.offset + r * dst.pitch), row.data(),
                  static_cast<std::size_t>(dst.width));
    }
  }
}

// Level 2 (Sec. 4.2): out = land(out, wave_sum(sources in order), wave_index, accumulate).
void land(const program::LandOp& op, ByteSpace& space) {
  std::vector<float> out = gather_fp32(op.dst, space);
  std::vector<std::vector<float>> parts;
  for (const Region& s : op.sources)
    parts.push_back(gather_fp32(s, space));
  std::vector<float> wave(parts.size());
  for (std::size_t k = 0; k < out.size(); ++k) {
    for (std::size_t j = 0; j < parts.size(); ++j)
      wave[j] = parts[j][k];
    out[k] = arith::land(out[k], arith::wave_sum(wave), op.wave_index, op.accumulate);
  }
  scatter(op.dst, reinterpret_cast<const std::byte*>(out.data()), space);
}

// Sec. 3.1: bf16 = round-to-nearest-even(fp32), NaN -> canonical.
void cast(const program::CastOp& op, ByteSpace& space) {
  const std::vector<float> in = gather_fp32(op.src, space);
  std::vector<std::uint16_t> out(in.size());
  for (std::size_t k = 0; k < in.size(); ++k)
    out[k] = arith::float_to_bf16(in[k]);
  scatter(op.dst, reinterpret_cast<const std::byte*>(out.data()), space);
}

}  // namespace

void apply_data(const Op& op, ByteSpace& space) {
  for (const program::CopyDescriptor& c : program::copies_of(op))
    copy(c, space);
  if (const auto* s = op.get_if<program::SumOp>()) {
    sum(op.rank, *s, space);
  } else if (const auto* l = op.get_if<program::LandOp>()) {
    land(*l, space);
  } else if (const auto* c = op.get_if<program::CastOp>()) {
    cast(*c, space);
  } else if (const auto* z = op.get_if<program::ZeroOp>()) {
    fill(z->dst, std::byte{0}, space);
  } else if (const auto* r = op.get_if<program::ReleaseOp>()) {
    fill(r->dst, kPoison, space);
  }
}

}  // namespace tide::exec
