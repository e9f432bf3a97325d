#include "tide/core/layout.hpp"

#include <algorithm>
#include <limits>
#include <string>

#include "tide/core/error.hpp"

namespace tide {
namespace {

constexpr std::int64_t kMaxBytes = std::numeric_limits<std::int64_t>::max() / 16;

// a * b, or Unsupported when the product leaves the range TIDE's byte arithmetic keeps.
std::int64_t checked_mul(std::int64_t a, std::int64_t b, const std::string& what) {
  if (a != 0 && b > kMaxBytes / a) {
    throw Unsupported(what + " overflows TIDE's 60-bit byte arithmetic (" + std::to_string(a) +
                      " x " + std::to_string(b) + ")");
  }
  return a * b;
}

std::string param_label(const ParamShape& shape, std::size_t index) {
  return "parameter " + std::to_string(index) + (shape.name.empty() ? "" : " (" + shape.name + ")");
}

}  // namespace

GroupLayout::GroupLayout(const Topology& topology, std::vector<ParamShape> params, DType ag_dtype,
                         DType grad_dtype)
    : topology_(topology), ag_dtype_(ag_dtype), grad_dtype_(grad_dtype) {
  require_gradient_dtype(grad_dtype, "the gradient dtype");  // NOTE [1-byte all-gather items]
  if (item_bytes(ag_dtype) == 0) throw InvalidArgument("the all-gather dtype is not a DType");
  if (params.empty()) throw InvalidArgument("a parameter group needs at least one parameter");
  if (params.size() > static_cast<std::size_t>(kMaxParamsPerGroup)) {
    throw Unsupported("the group has " + std::to_string(params.size()) +
                      " parameters, more than TIDE's limit of " +
                      std::to_string(kMaxParamsPerGroup) +
                      ": FSDP2 keeps its stock all-gather and reduce-scatter for it");
  }
  const std::int64_t world = topology.world();
  const std::int64_t b_ag = item_bytes(ag_dtype);
  std::int64_t offset = 0;
  std::int64_t out_offset = 0;
  params_.reserve(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    ParamShape& shape = params[i];
    if (shape.rows < 1 || shape.cols < 1) {
      throw InvalidArgument(param_label(shape, i) + " has shape " + std::to_string(shape.rows) +
                            "x" + std::to_string(shape.cols) + "; both extents must be at least 1");
    }
    ParamLayout p;
    p.name = std::move(shape.name);
    p.rows = shape.rows;
    p.cols = shape.cols;
    p.rows_per_rank = (shape.rows + world - 1) / world;
    const std::int64_t elems = checked_mul(p.rows_per_rank, p.cols, param_label(shape, i));
    p.shard_bytes = checked_mul(elems, b_ag, param_label(shape, i));
    p.offset = offset;
    p.out_offset = out_offset;
    offset += p.shard_bytes;
    out_offset += elems;
    if (offset > kMaxBytes || out_offset > kMaxBytes) {
      throw Unsupported("the group's shard size overflows TIDE's 60-bit byte arithmetic");
    }
    params_.push_back(std::move(p));
  }
  shard_elems_ = out_offset;
  checked_mul(shard_elems_ * 4, world, "the group's unsharded fp32 size");
}

std::int64_t GroupLayout::landing_offset(int p, int rank) const {
  const ParamLayout& pl = param(p);
  return pl.offset * topology_.world() + static_cast<std::int64_t>(rank) * pl.shard_bytes;
}

std::int64_t GroupLayout::valid_rows(int p, int rank) const {
  const ParamLayout& pl = param(p);
  const std::int64_t remaining = pl.rows - static_cast<std::int64_t>(rank) * pl.rows_per_rank;
  return std::clamp<std::int64_t>(remaining, 0, pl.rows_per_rank);
}

}  // namespace tide
