// Expert-parallel lanes (App. F, L_sub = 1): the programs of a group whose ranks are one per
// node (MoE experts sharded over E_ep modulo subgroups: M rail peers, no NVLink peer), so
// neither collective needs its node-local half. The all-gather runs ceil(log2 M) recursive-
// doubling rounds landing to landing (no receive stage, no scatter); the reduce-scatter sends
// bf16 gradient pieces in rail parts into a double-buffered inbox of the destination, which
// sums the M - 1 arrivals and its own with one fixed 8-source fp32 sum. The group is its own
// M x 1 layout (program rank n: the group's n-th rank). Each collective comes as one call
// (build_ep_*_program) and as a call sequence (ep_*_call_sequence, NOTE [call sequences]; the
// runtime's, NOTE [runtime] 11). Design: docs/core.md, Expert-parallel lanes.
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

// Round d (Sec. 3.1, Fig. 5a): node n sends the c_d = min(2^d, M - 2^d) shards of nodes
// n .. n + c_d - 1 (mod M) to node (n - 2^d) mod M; sum_d c_d = M - 1 for every M.
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
  // Model FSDP2's compute stream: the landing's previous user before, the layer after READY.
  bool consumer = true;
  // The own shard: the resident one, or (AgOptions::shard_in_stage) per-call tensors kTensor p
  // copied or cast straight into the own landing rows.
  AgOptions shards;
  Fault fault = Fault::kNone;  // an ep-all-gather fault, on every rank
};

struct EpAgProgramIds {
  int ready_event = 0;  // per rank: the landing holds every shard (parameters ready)
  int used_event = 0;   // with a consumer: the layer finished reading them
};

// One call of the lane's all-gather: from each rank's packed shard at `resident` to the
// landing (Eq. 2) on every rank; with a consumer, also into kOutput 0 after READY.
Program build_ep_ag_program(const GroupLayout& layout, const EpAgProgramOptions& options = {},
                            EpAgProgramIds* ids = nullptr);

// --- Reduce-scatter ----------------------------------------------------------------------------

// The fixed sum adds 8 sources: the M - 1 arrivals and the own contribution.
inline constexpr int kEpSumSources = 8;

struct EpRsProgramOptions {
  float alpha = 1.0f;
  bool accumulate = false;
  // Fold through the scratch part even without accumulate (bound per call in a sequence).
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
// The same moved to `at` in a communicator's arena of `arena_bytes`.
EpRsArenaLayout ep_rs_arena_layout_at(EpRsArenaLayout areas, std::int64_t at,
                                      std::int64_t arena_bytes);

struct EpRsProgramIds {
  int done_event = 0;       // per rank, on its sum stream: the output is final
  int read_done_event = 0;  // per rank, on its host stream: its gradients may be freed
};

// One call of the lane's reduce-scatter: bf16 gradients (kTensor p) to each rank's fp32 shard
// (kOutput 0), Eq. 5 in the lane's order (ep_rs_expected()). 2 <= M <= kEpSumSources and bf16
// gradients, else Unsupported (ep_rs_inapplicable says why first).
Program build_ep_rs_program(const GroupLayout& layout, const EpRsProgramOptions& options = {},
                            EpRsProgramIds* ids = nullptr);
std::string ep_rs_inapplicable(const GroupLayout& layout);

// Why `fault` cannot show on this lane (empty when it can), e.g. a forwarding fault below 4 nodes.
std::string ep_ag_fault_inapplicable(Fault fault, const GroupLayout& layout);
std::string ep_rs_fault_inapplicable(Fault fault, const GroupLayout& layout,
                                     const EpRsProgramOptions& options);

// --- Call sequences (NOTE [call sequences]) ---------------------------------------------------

// The lane's all-gather calls of one group (`plan`: its M x 1 TIDE-AG plan), `areas` in the
// communicator's arena. A call's landing is offered to its senders only after this rank's
// previous call forwarded from it and completed, so consecutive calls need no lane handoff.
CallSequence ep_ag_call_sequence(const AgPlan& plan, const EpAgArenaLayout& areas,
                                 const SequenceOptions& options = {});
// The lane's reduce-scatter calls of one group, inbox and scratch at `areas` (fold_always).
// Inbox credits are cumulative over calls (a call's first parts wait for the previous one's
// last sums); alpha and accumulate are bound per call. Requires ep_rs_inapplicable empty.
CallSequence ep_rs_call_sequence(const GroupLayout& layout, const EpRsArenaLayout& areas,
                                 const SequenceOptions& options = {});

}  // namespace tide::program
