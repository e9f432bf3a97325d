// The layout of one FSDP2 parameter group (Sec. 2.1, Eqs. 2-3).
// Parameter p is viewed as a (D_p, K_p) matrix sharded along dimension 0 over N ranks:
//   R_p = ceil(D_p / N)              padded rows per rank (rows past D_p are padding)
//   s_p = R_p * K_p * b_ag            shard bytes (b_ag: 1, 2 or 4, dtype.hpp)
//   o_p = sum_{i<p} s_i;  S = sum_p s_p
//   Landing(p, r) = o_p * N + r * s_p the parameter-major landing offset (Eq. 2)
//   S_grad = b_grad * sum_p R_p K_p,  S_fp32 = 4 * sum_p R_p K_p
//   B_pack = 4 * sum_p N R_p K_p = (4 / b_grad) * N * S_grad   (FSDP2's packing buffer, Eq. 3)
// Rank r's reduce-scatter output concatenates its P fp32 shards: p at e_p = sum_{i<p} R_i K_i.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tide/core/dtype.hpp"
#include "tide/core/topology.hpp"

namespace tide {

inline constexpr int kMaxParamsPerGroup = 256;  // TIDE's group contract (Sec. 2.5)

struct ParamShape {
  std::string name;
  std::int64_t rows = 0;  // D_p: the dimension-0 extent
  std::int64_t cols = 0;  // K_p: the product of the trailing dimensions
};

struct ParamLayout {
  std::string name;
  std::int64_t rows = 0;           // D_p
  std::int64_t cols = 0;           // K_p
  std::int64_t rows_per_rank = 0;  // R_p
  std::int64_t shard_bytes = 0;    // s_p (all-gather dtype)
  std::int64_t offset = 0;         // o_p (bytes, all-gather dtype)
  std::int64_t out_offset = 0;     // e_p (elements of the fp32 output shard)
  std::int64_t shard_elems() const { return rows_per_rank * cols; }  // R_p * K_p
};

class GroupLayout {
 public:
  // Throws InvalidArgument for an empty group, a non-positive extent or a gradient dtype TIDE-RS
  // cannot reduce (fp8, u8: NOTE [1-byte all-gather items]), and Unsupported for more than
  // kMaxParamsPerGroup parameters or byte counts that overflow 63 bits. Any all-gather dtype:
  // shard offsets are multiples of b_ag only (1-byte items: no alignment past one byte).
  GroupLayout(const Topology& topology, std::vector<ParamShape> params, DType ag_dtype,
              DType grad_dtype);

  const Topology& topology() const { return topology_; }
  DType ag_dtype() const { return ag_dtype_; }
  DType grad_dtype() const { return grad_dtype_; }
  int param_count() const { return static_cast<int>(params_.size()); }  // P
  const std::vector<ParamLayout>& params() const { return params_; }
  const ParamLayout& param(int p) const { return params_.at(static_cast<std::size_t>(p)); }

  std::int64_t shard_elems() const { return shard_elems_; }  // sum_p R_p K_p
  std::int64_t shard_bytes() const { return shard_elems_ * item_bytes(ag_dtype_); }  // S
  std::int64_t grad_shard_bytes() const {
    return shard_elems_ * item_bytes(grad_dtype_);
  }                                                                                   // S_grad
  std::int64_t fp32_shard_bytes() const { return shard_elems_ * 4; }                  // S_fp32
  std::int64_t unsharded_bytes() const { return shard_bytes() * topology_.world(); }  // N S
  std::int64_t pack_buffer_bytes() const {
    return fp32_shard_bytes() * topology_.world();
  }  // Eq. 3

  // Eq. 2: where rank r's shard of parameter p lands in the parameter-major buffer.
  std::int64_t landing_offset(int p, int rank) const;
  // Rows of parameter p that rank r really holds: min(R_p, max(0, D_p - r R_p)).
  std::int64_t valid_rows(int p, int rank) const;

 private:
  Topology topology_;
  DType ag_dtype_;
  DType grad_dtype_;
  std::vector<ParamLayout> params_;
  std::int64_t shard_elems_ = 0;
};

}  // namespace tide
