// The runner's mapping (step 1 of NOTE [CUDA call sequences], docs/executor.md; built by
// sequence_mapping.cpp, run by sequence_enqueue.cpp): the mapped form of every call template,
// each op of the ranks this process holds resolved once to pointer slots, counter words, tables
// and kernel arguments, and the transport its messages take.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "sequence_devices.hpp"
#include "tide/exec/cuda_sequence.hpp"
#include "tide/kernels/landing.hpp"
#include "tide/kernels/level1_sum.hpp"
#include "tide/program/program.hpp"
#include "transport/message.hpp"

namespace tide::exec::sequence_detail {

inline constexpr int kFixed = -1;       // Ptr::slot: resolved at construction
inline constexpr int kOutputSlot = -2;  // Ptr::slot: the call's output
inline constexpr std::size_t kConstantWait = kConstantWaitTotal;  // a wait not on a counter total

// A device address: fixed (arena) or a slot filled per call (a tensor index, the output).
struct Ptr {
  std::byte* fixed = nullptr;
  int slot = kFixed;
  std::int64_t offset = 0;
};

struct Copy {
  Ptr dst, src;
  std::size_t width = 0, rows = 0, dpitch = 0, spitch = 0;
  bool flat = true;
};

// One wait of a (fused) kWait: the counter word, its index into the totals, the template's
// relative threshold (NOTE [CUDA call sequences]).
using WaitTerm = CudaWaitTerm;

// One counter addition of a (fused) kSignal.
struct AddTerm {
  std::uint64_t* word = nullptr;
  std::int64_t value = 0;
};

// One op of a template, resolved at construction.
struct SeqOp {
  program::OpKind kind = program::OpKind::kRelease;
  int rank = 0;
  int stream = -1;  // index into Devices::streams
  int op = -1;      // index into the template program's ops (profiles name it)
  bool empty = false;
  std::vector<Copy> copies;
  // The copy-engine pool (NOTE [copy-engine pool]): the lane of each copy (0: `stream`, j:
  // pool[j - 1], an index into Devices::streams), the fork event and one join per pool stream.
  // Empty where the copies stay on `stream`. The events are the Mapping's (pool_events).
  std::vector<int> lane;
  std::vector<int> pool;
  cudaEvent_t fork = nullptr;
  std::vector<cudaEvent_t> joins;
  // Counters: the word, its index into the totals, the template's value (as mapped); after
  // the fusion pass (sequence_fusion.hpp) a kWait enqueues `waits`, a kSignal `adds`.
  std::uint64_t* word = nullptr;
  std::size_t total = 0;
  std::int64_t value = 0;
  std::vector<WaitTerm> waits;
  std::vector<AddTerm> adds;
  // Events: local id and age (NOTE [call sequences]).
  int event = 0;
  int age = 0;
  // kSum: the kernel arguments less gradients, alpha, accumulate; the kTensor index of each
  // kernel gradient slot.
  kernels::Level1SumArgs sum{};
  bool sum_into_output = false;  // the one-node sum: the call's accumulate applies
  std::vector<int> gradient_slots;
  // One-shot programs (NOTE [one-shot programs]): the gradients as fixed pointers instead of
  // slots, and `sum.alpha` / `land.accumulate` the program's own.
  std::vector<const void*> fixed_gradients;
  std::unique_ptr<kernels::Level1SegmentTable> table;
  kernels::Level1Tuning tuning{};
  // kLand (out from `out`), kCast (dst `out`, src `in`), kZero (`out`).
  kernels::LandingArgs land{};
  Ptr out, in;
  std::int64_t elems = 0;
  int ctas = 0;
  std::size_t zero_width = 0, zero_rows = 0, zero_pitch = 0;
  // A side of a message (NOTE [CUDA call sequences] 6, NOTE [rail messages]): the sender's
  // (on `stream`, its transfer on `rail`) or the receiver's (`stream` == `rail`). Kept out of
  // the fusion pass.
  std::shared_ptr<transport::Message> message;
  int rail = -1;
  // Per message part: what it moves; a part of caller memory (slot != kFixed: a staged
  // shard, a gradient) is bound per call, its mapped pointer only a placeholder.
  std::vector<Ptr> message_slots;
};

// The stream name of a rank's rail stream (program stream names are >= 0), and of its first
// copy-pool stream (the j-th is kPoolStreamName - j).
inline constexpr int kRailStreamName = -1;
inline constexpr int kPoolStreamName = -2;

struct Template {
  std::vector<SeqOp> ops;               // local ranks' ops, in the template's legal order
  std::vector<int> streams;             // streams with ops (indices into Devices::streams)
  std::vector<std::int64_t> additions;  // per (rank, counter), rank-major
  std::vector<int> tensors;             // per rank: kTensor slots the call must bind
  int deferred = 0;  // ops enqueued after a later op (NOTE [enqueue order]; one-shot only)
  // Per call: the local ranks' message sends and their bytes (messages_sent()).
  std::int64_t message_sends = 0;
  std::int64_t message_bytes = 0;
};

// Why a slot whose calls send caller memory as messages does not re-point (NOTE [CUDA call
// sequences] 3).
inline constexpr const char* kMessageNotRepointed =
    "message: a rail message of caller memory (the transport's kernels or NCCL's operations "
    "take its pointer at capture and cannot be re-pointed)";

// A template as CudaExecutor::check() can take it: relative wait thresholds <= 0 (credits
// earlier calls already paid, NOTE [call sequences]) are met at once, so they check as 0.
program::Program checkable_template(const program::Program& t);

// The device address of `p` for a call's bindings.
std::byte* at(const Ptr& p, const CudaCallBindings& b);
// Whether `m` carries something a call binds (see Repoint).
bool carries_bindings(const SeqOp& m);

// The mapping part of the runner: the templates mapped once at construction (steps in
// sequence_mapping.cpp) and what goes with them; read by the enqueue, the slot graphs and the
// read-outs. It creates the streams and events its ops name (through Devices), nothing else.
class Mapping {
 public:
  Mapping(const Fixed& fixed, Devices& devices) : fixed_(fixed), devices_(devices) {}

  // Step 1 (NOTE [CUDA call sequences] 6): the transport messages take.
  void choose_transport();
  // Step 2: every template; where a template's slots cannot re-point, `repoint_failure` says
  // why (NOTE [slot graph policy]).
  void map_templates(std::string& repoint_failure);

  const Template& of_call(std::int64_t e) const {
    return templates[static_cast<std::size_t>(e % fixed_.sequence.period)];
  }
  // Throws where `bindings` do not bind what call e reads.
  void check_bindings(std::span<const CudaCallBindings> bindings, std::int64_t e) const;
  // `base` (what calls before e added) advanced past call e.
  void advance(std::vector<std::int64_t>& base, std::int64_t e) const;

  std::vector<Template> templates;
  // Per template: no copy of caller memory is 2-D, so its slot graphs may re-point (NOTE
  // [CUDA call sequences] 3: CUDA updates only 1-D copy nodes); known at construction.
  std::vector<char> template_repointable;
  // NOTE [CUDA call sequences] 6: where messages travel, and the 8-byte device word signal
  // messages carry (on the first local rank's device).
  std::shared_ptr<transport::MessageTransport> transport;  // the place's, or null
  bool has_messages = false;
  // NOTE [one-sided messages]: whether this runner's messages travel one-sided, and why not.
  bool one_sided = false;
  std::string one_sided_refusal;
  std::vector<cudaEvent_t> pool_events;  // NOTE [copy-engine pool]: every fork and join

 private:
  void choose_one_sided();
  // Whether `op` (a put or signal to another rank) travels as a message.
  bool is_message(const program::Op& op) const;
  Ptr resolve(const program::Region& r) const;
  std::uint64_t* word(const program::Counter& c) const;
  void map_template(const program::CallTemplate& t, Template& out);
  void map_message(const program::Op& op, std::set<int>& used, std::vector<SeqOp>& out);
  void map_op(const program::Op& op, int age, SeqOp& m);
  // NOTE [copy-engine pool] (sequence_copy_pool.cpp): deals the copies of the template's
  // copy ops over the rank's pool streams, adding the pool streams to `used`.
  void map_copy_pool(Template& t, std::set<int>& used);

  const Fixed& fixed_;
  Devices& devices_;
};

}  // namespace tide::exec::sequence_detail
