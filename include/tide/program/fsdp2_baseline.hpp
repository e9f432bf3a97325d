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

// All-gather: copy-in of the rank's P shards (kTensor p, s_p bytes each) into its slot of
// the rank-major N S-byte buffer (arena), a ring all-gather over N ranks on NCCL's CTAs,
// then split_with_sizes_copy into the parameter-major output (kOutput, N S bytes; Eq. 2).
Program build_fsdp2_all_gather(const GroupLayout& layout, const Fsdp2Options& options,
                               Fsdp2Ids* ids = nullptr);

// Reduce-scatter: torch._chunk_cat packs every gradient (kTensor p, D_p x K_p) into an fp32
// buffer of N output-sized blocks (zero padding, times alpha), then a ring reduce-scatter
// over N ranks sums each block into its owner's output (kOutput, S_fp32 bytes, Eq. 5).
Program build_fsdp2_reduce_scatter(const GroupLayout& layout, const Fsdp2Options& options,
                                   Fsdp2Ids* ids = nullptr);

}  // namespace tide::program
