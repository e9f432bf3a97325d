// All-gather calls' data for the runner's tests on the virtual fabric (cuda_sequence_test.cpp
// for TIDE-AG, cuda_ep_lane_test.cpp for the expert-parallel lane): for every call and rank
// the shard that rank contributes (fresh fp32 masters per call with a cast, bound as the
// call's tensors, so every call has fresh pointers; else one resident shard for every call),
// and a poisoned snapshot buffer into which the caller's consumer copies the rank's landing
// right after the call, on the caller stream.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "sequence_test_kernels.hpp"
#include "sequence_test_util.hpp"
#include "tide/core/arithmetic.hpp"
#include "tide/core/collective_reference.hpp"
#include "tide/core/layout.hpp"
#include "tide/exec/cuda_sequence.hpp"

namespace tide::sequence_testing {

class AgCallData {
 public:
  // `calls` calls' shards of `layout`, drawn from `rng` call by call, rank by rank, parameter
  // by parameter.
  AgCallData(std::mt19937_64& rng, const GroupLayout& layout, int calls, bool cast)
      : layout_(layout), cast_(cast) {
    const int world = layout.topology().world();
    const auto ucalls = static_cast<std::size_t>(calls);
    shards_.resize(ucalls);
    masters_.resize(ucalls);
    bindings_.resize(ucalls);
    snapshots_.resize(ucalls);
    for (std::size_t e = 0; e < ucalls; ++e) {
      for (int r = 0; r < world; ++r) {
        std::vector<std::uint16_t> shard(static_cast<std::size_t>(layout.shard_bytes() / 2), 0);
        exec::CudaCallBindings b;
        for (int p = 0; p < layout.param_count(); ++p) {
          const ParamLayout& pl = layout.param(p);
          std::vector<float> master(static_cast<std::size_t>(pl.shard_elems()));
          for (std::size_t i = 0; i < master.size(); ++i) {
            master[i] = random_value(rng, DType::kFp32);
            shard[static_cast<std::size_t>(pl.offset / 2) + i] = arith::float_to_bf16(master[i]);
          }
          if (cast) {
            masters_[e].push_back(std::make_unique<Dev>(master.size() * 4));
            masters_[e].back()->upload(master.data());
            b.tensors.push_back(masters_[e].back()->get());
          }
        }
        if (!cast && e > 0) shard = shards_[0][static_cast<std::size_t>(r)];
        shards_[e].push_back(std::move(shard));
        bindings_[e].push_back(std::move(b));
        snapshots_[e].push_back(std::make_unique<Dev>(landing_bytes()));
        snapshots_[e].back()->fill(0xEE);
      }
    }
  }

  int calls() const { return static_cast<int>(shards_.size()); }
  bool cast() const { return cast_; }
  std::size_t landing_bytes() const { return static_cast<std::size_t>(layout_.unsharded_bytes()); }

  // Without a cast, rank `rank`'s resident shard (bf16 bits), which the harness stores in the
  // rank's resident area before the first call.
  const std::vector<std::uint16_t>& resident(int rank) const {
    return shards_[0][static_cast<std::size_t>(rank)];
  }

  // Call e on `caller`, then the consumer's copy of every rank's landing (`landing(rank)`) on
  // the same stream.
  void step(exec::CudaSequenceRunner& runner, int e, const std::function<std::byte*(int)>& landing,
            cudaStream_t caller) {
    const auto ue = static_cast<std::size_t>(e);
    runner.enqueue(bindings_[ue], 1.0f, false, caller);
    for (int r = 0; r < layout_.topology().world(); ++r)
      exec::testing::launch_compute_copy(snapshots_[ue][static_cast<std::size_t>(r)]->get(),
                                         landing(r), landing_bytes(), caller);
  }

  // Call e's snapshots hold every rank's shard at its landing offset, bitwise; `what` names
  // the case in a failure.
  void expect_landed(int e, const std::string& what) const {
    const int world = layout_.topology().world();
    for (int r = 0; r < world; ++r) {
      const auto got =
          snapshots_[static_cast<std::size_t>(e)][static_cast<std::size_t>(r)]->download();
      for (int p = 0; p < layout_.param_count(); ++p) {
        const ParamLayout& pl = layout_.param(p);
        for (int src = 0; src < world; ++src) {
          const std::int64_t bytes = layout_.valid_rows(p, src) * pl.cols * 2;
          const auto& shard = shards_[static_cast<std::size_t>(e)][static_cast<std::size_t>(src)];
          ASSERT_EQ(std::memcmp(got.data() + layout_.landing_offset(p, src),
                                shard.data() + pl.offset / 2, static_cast<std::size_t>(bytes)),
                    0)
              << "call " << e << " rank " << r << " param " << p << " from rank " << src << ", "
              << what << ", cast " << cast_;
        }
      }
    }
  }

 private:
  const GroupLayout& layout_;
  bool cast_;
  std::vector<std::vector<std::vector<std::uint16_t>>> shards_;  // [call][rank]
  std::vector<std::vector<std::unique_ptr<Dev>>> masters_;
  std::vector<std::vector<exec::CudaCallBindings>> bindings_;
  std::vector<std::vector<std::unique_ptr<Dev>>> snapshots_;
};

}  // namespace tide::sequence_testing
