// Expert-parallel lanes (App. F, "Expert-parallel (L_sub = 1) rail lanes"): the programs of a
// group whose ranks are one per node. MoE routed experts sharded over E_ep modulo subgroups
// have, in each subgroup, M rail peers and no NVLink peer (L_sub = 1), so neither collective
// needs its node-local half:
//   - the all-gather runs R = ceil(log2 M) recursive-doubling rounds directly from landing to
//     landing: no receive stage, no copy-engine scatter (ep_lane_ag.cpp);
//   - the reduce-scatter skips Level 1 staging: each rank sends its bf16 gradient pieces over
//     the rail, in rail parts, into a double-buffered inbox of its destination, which sums the
//     M - 1 arrivals and its own contribution with one fixed 8-source fp32 sum
//     (ep_lane_rs.cpp).
// The group is given as its own M x 1 layout (GroupLayout over Topology(M, 1)): program rank
// n is the group's n-th rank, on the n-th node of the sub-mesh. Each collective comes as one
// call (build_ep_*_program: the reference executor, `tide simulate --lane ep`) and as an
// open-ended call sequence (ep_*_call_sequence, NOTE [call sequences]: the runtime, NOTE
// [runtime] 11). Which groups a job runs on the lane is the runtime's business.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tide/core/ag_plan.hpp"
#include "tide/core/cta_budgets.hpp"
#include "tide/core/layout.hpp"
#include "tide/program/call_sequence.hpp"
#include "tide/program/faults.hpp"
#include "tide/program/program.hpp"

namespace tide::program {

// Empty when `layout` is an expert-parallel lane group (L = 1, M >= 2); otherwise why not.
std::string ep_lane_inapplicable(const GroupLayout& layout);

// --- All-gather --------------------------------------------------------------------------------

// Round d of the recursive doubling (Sec. 3.1, Fig. 5a): node n sends the c_d = min(2^d, M -
// 2^d) shards it holds first (those of nodes n .. n + c_d - 1, mod M) to node (n - 2^d) mod M.
// Since sum_d c_d = M - 1, every M is covered, a power of two or not.
struct EpAgRound {
  int index = 0;     // d
  int distance = 0;  // 2^d
  int count = 0;     // c_d
};
std::vector<EpAgRound> ep_ag_rounds(int nodes);

// Where the lane's all-gather keeps its bytes in each rank's arena.
struct EpAgArenaLayout {
  std::int64_t resident = 0;  // S bytes: the resident shard (in-place adoption, Sec. 3.1)
  std::int64_t landing = 0;   // N S bytes: the parameter-major landing (Eq. 2)
  std::int64_t arena_bytes = 0;
};
EpAgArenaLayout ep_ag_arena_layout(const GroupLayout& layout);

struct EpAgProgramOptions {
  // Model FSDP2's compute stream: before the call the landing's previous user reads it (the
  // landing is then an input), after READY the layer reads the new parameters into output 0.
  bool consumer = true;
  // Where the own shard comes from (AgOptions::shard_in_stage): the resident shard, or with
  // every call per-parameter tensors kTensor p (staged shards: copied; fp32 masters: cast)
  // straight into the own landing rows. No receive stage either way.
  AgOptions shards;
  Fault fault = Fault::kNone;  // an ep-all-gather fault, on every rank
};

struct EpAgProgramIds {
  int ready_event = 0;  // per rank: the landing holds every shard (parameters ready)
  int used_event = 0;   // with a consumer: the layer finished reading them
};

// One call of the lane's all-gather on every rank. Input: each rank's packed shard at
// `resident` (the all-gather dtype, P shards). Output: the landing, parameter p of rank u at
// landing + layout.landing_offset(p, u) on every rank (Eq. 2); with a consumer, also copied to
// kOutput 0 after READY.
Program build_ep_ag_program(const GroupLayout& layout, const EpAgProgramOptions& options = {},
                            EpAgProgramIds* ids = nullptr);

// --- Reduce-scatter ----------------------------------------------------------------------------

// The fixed sum adds 8 sources: the M - 1 arrivals and the own contribution.
inline constexpr int kEpSumSources = 8;

struct EpRsProgramOptions {
  float alpha = 1.0f;
  bool accumulate = false;
  // Sum every part into the scratch part and fold it into the output whether or not the call
  // accumulates (the fold then copies): a call sequence binds accumulate per call (NOTE [host
  // execution] 3), so its ops must not depend on it. The arena then always has the scratch.
  bool fold_always = false;
  int parts = 4;  // rail parts per destination shard (App. F: four); fewer for tiny shards
  int sum_ctas = kDefaultSumCtas;
  int landing_ctas = kDefaultLandingCtas;  // the accumulate fold
  Fault fault = Fault::kNone;              // an ep-reduce-scatter fault, on every rank
};

// Where the lane's reduce-scatter keeps its bytes in each rank's arena, and its geometry.
struct EpRsArenaLayout {
  std::int64_t inbox = 0;        // generations x (M - 1) blocks of part_elems bf16
  std::int64_t scratch = 0;      // with accumulate: one fp32 part (the sum before the fold)
  std::int64_t block_bytes = 0;  // stride between inbox blocks
  std::int64_t generation_bytes = 0;
  std::int64_t part_elems = 0;  // elements of the fp32 shard per part (the last may be shorter)
  int parts = 0;                // ceil(S_fp32 / 4 / part_elems)
  int generations = 0;          // min(2, parts): the inbox double buffer
  std::int64_t arena_bytes = 0;
};
EpRsArenaLayout ep_rs_arena_layout(const GroupLayout& layout, const EpRsProgramOptions& options);
// The same with every offset moved by `at` (the lane's area in a communicator's arena) and
// arena_bytes the whole arena's, `arena_bytes`.
EpRsArenaLayout ep_rs_arena_layout_at(EpRsArenaLayout areas, std::int64_t at,
                                      std::int64_t arena_bytes);

struct EpRsProgramIds {
  int done_event = 0;       // per rank, on its sum stream: the output is final
  int read_done_event = 0;  // per rank, on its host stream: its gradients may be freed
};

// One call of the lane's reduce-scatter on every rank. Inputs: each rank's gradients G_p
// (kTensor p, D_p x K_p bf16) and, when accumulating, its output. Output: each rank's packed
// fp32 shard (kOutput 0, S_fp32 bytes), Eq. 5 in the lane's arithmetic order (NOTE [arithmetic
// order], expert-parallel lane): ep_rs_expected() in tide/core/collective_reference.hpp.
// Requires 2 <= M <= kEpSumSources (one fixed sum holds every contribution) and bf16
// gradients; throws Unsupported otherwise (ep_rs_inapplicable says why first).
Program build_ep_rs_program(const GroupLayout& layout, const EpRsProgramOptions& options = {},
                            EpRsProgramIds* ids = nullptr);
std::string ep_rs_inapplicable(const GroupLayout& layout);

// Why `fault` cannot show on this lane (empty when it can): e.g. a forwarding fault below 4
// nodes, where no round forwards a received shard; an inbox-reuse fault with fewer than three
// parts, where no generation is reused.
std::string ep_ag_fault_inapplicable(Fault fault, const GroupLayout& layout);
std::string ep_rs_fault_inapplicable(Fault fault, const GroupLayout& layout,
                                     const EpRsProgramOptions& options);

// --- Call sequences (NOTE [call sequences]) ---------------------------------------------------

// The lane's all-gather calls of one group: the own shard from `plan.options()` (resident, or
// per call by pointer), `areas` in the communicator's arena (resident, landing; arena_bytes
// the whole arena). `plan` is the group's M x 1 TIDE-AG plan (for its layout, options and
// inputs). Each call's landing is offered to its senders only after this rank's previous call
// forwarded from it and completed (event waits one call back), so consecutive calls of the
// sequence are race-free without the lane handoff.
CallSequence ep_ag_call_sequence(const AgPlan& plan, const EpAgArenaLayout& areas,
                                 const SequenceOptions& options = {});
// The lane's reduce-scatter calls of one group, with the inbox and scratch at `areas`
// (ep_rs_arena_layout with fold_always, placed by ep_rs_arena_layout_at). An inbox
// generation's credits are shared by every call (cumulative, like TIDE-RS's INBOX_FREE), so
// the first parts of a call wait for the last sums of the previous one. alpha and
// accumulate are bound per call. Requires ep_rs_inapplicable(layout) empty.
CallSequence ep_rs_call_sequence(const GroupLayout& layout, const EpRsArenaLayout& areas,
                                 const SequenceOptions& options = {});

}  // namespace tide::program
