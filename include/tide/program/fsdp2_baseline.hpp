// Stock FSDP2's collectives as programs: the baseline TIDE is compared with everywhere.
#pragma once

#include "tide/core/layout.hpp"
#include "tide/program/program.hpp"

namespace tide::program {

struct Fsdp2Options {
  float alpha = 1.0f;       // reduce-scatter scale, applied to each input (PREMUL_SUM)
  bool accumulate = false;  // reduce-scatter: add into the existing output
  int nccl_ctas = 16;       // NCCL's CTAs (the paper's 8-node reduce-scatter: 16)
  int copy_ctas = 132;      // copy-in / copy-out / _chunk_cat kernels: a full H200 grid
};

struct Fsdp2Ids {
  int done_event = 0;  // recorded on each rank's compute stream when the output is final
};

// All-gather: copy-in of the P shards (kTensor p) into the rank-major N S buffer (arena), a
// ring all-gather on NCCL's CTAs, then split_with_sizes_copy into the output (Eq. 2).
Program build_fsdp2_all_gather(const GroupLayout& layout, const Fsdp2Options& options,
                               Fsdp2Ids* ids = nullptr);

// Reduce-scatter: _chunk_cat packs every gradient (kTensor p) into N fp32 output-sized blocks
// (zero padding, times alpha), then a ring reduce-scatter into each owner's output (Eq. 5).
Program build_fsdp2_reduce_scatter(const GroupLayout& layout, const Fsdp2Options& options,
                                   Fsdp2Ids* ids = nullptr);

}  // namespace tide::program
