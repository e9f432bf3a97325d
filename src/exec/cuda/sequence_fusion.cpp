// The fusion pass of the CUDA sequence runner (see sequence_fusion.hpp).
#include "sequence_fusion.hpp"

#include <algorithm>
#include <map>
#include <utility>

namespace tide::exec::sequence_detail {
namespace {

using program::OpKind;

// `into` followed by `more`, one term per counter (the highest threshold); false, leaving
// `into` as it was, when the result would exceed `limit` terms.
bool merge_waits(std::vector<WaitTerm>& into, const std::vector<WaitTerm>& more,
                 std::size_t limit) {
  std::vector<WaitTerm> merged = into;
  for (const WaitTerm& w : more) {
    const auto same = std::find_if(merged.begin(), merged.end(),
                                   [&](const WaitTerm& x) { return x.total == w.total; });
    if (same != merged.end()) {
      same->value = std::max(same->value, w.value);
    } else {
      merged.push_back(w);
    }
  }
  if (merged.size() > limit) return false;
  into = std::move(merged);
  return true;
}

// As merge_waits for additions: additions to one word summed.
bool merge_adds(std::vector<AddTerm>& into, const std::vector<AddTerm>& more, std::size_t limit) {
  std::vector<AddTerm> merged = into;
  for (const AddTerm& a : more) {
    const auto same = std::find_if(merged.begin(), merged.end(),
                                   [&](const AddTerm& x) { return x.word == a.word; });
    if (same != merged.end()) {
      same->value += a.value;
    } else {
      merged.push_back(a);
    }
  }
  if (merged.size() > limit) return false;
  into = std::move(merged);
  return true;
}

class Fuser {
 public:
  explicit Fuser(const FusionLimits& limits) : limits_(limits) {}

  void add(SeqOp&& op) {
    const auto it = last_.find(op.stream);
    if (it != last_.end() && !op.message && !out_[it->second].message) {
      SeqOp& prev = out_[it->second];
      if (op.kind == OpKind::kWait && prev.kind == OpKind::kWait) {
        std::vector<WaitTerm> terms = prev.waits;
        if (merge_waits(terms, op.waits, limits_.waits)) {
          // The fused wait takes the later op's place; the earlier one is dropped.
          op.waits = std::move(terms);
          prev.kind = OpKind::kRelease;
          prev.empty = true;
          prev.waits.clear();
        }
      } else if (op.kind == OpKind::kSignal && prev.kind == OpKind::kSignal) {
        if (merge_adds(prev.adds, op.adds, limits_.adds)) return;  // kept at the earlier place
      }
    }
    last_[op.stream] = out_.size();
    out_.push_back(std::move(op));
  }

  std::vector<SeqOp> finish() {
    std::erase_if(out_, [](const SeqOp& m) { return m.kind == OpKind::kRelease; });
    return std::move(out_);
  }

 private:
  FusionLimits limits_;
  std::vector<SeqOp> out_;
  std::map<int, std::size_t> last_;  // stream -> its last op in out_
};

}  // namespace

std::vector<SeqOp> fuse_waits_and_signals(std::vector<SeqOp> ops, const FusionLimits& limits) {
  Fuser f(
      FusionLimits{std::max<std::size_t>(1, limits.waits), std::max<std::size_t>(1, limits.adds)});
  for (SeqOp& op : ops) {
    if (op.message) {  // a message side keeps its place and its own enqueue
      op.empty = false;
      f.add(std::move(op));
      continue;
    }
    switch (op.kind) {
      case OpKind::kWait:
        op.waits = {WaitTerm{op.word, op.total, op.value}};
        op.empty = false;
        f.add(std::move(op));
        break;
      case OpKind::kSignal:
        op.adds = {AddTerm{op.word, op.value}};
        op.empty = false;
        f.add(std::move(op));
        break;
      case OpKind::kRailPut: {
        if (!op.copies.empty()) {
          SeqOp copies;
          copies.kind = OpKind::kCopy;
          copies.rank = op.rank;
          copies.stream = op.stream;
          copies.copies = std::move(op.copies);
          f.add(std::move(copies));
        }
        op.kind = OpKind::kSignal;
        op.copies.clear();
        op.adds = {AddTerm{op.word, op.value}};
        op.empty = false;
        f.add(std::move(op));
        break;
      }
      case OpKind::kRelease:
        break;
      default:
        if (!op.empty) f.add(std::move(op));
        break;
    }
  }
  return f.finish();
}

}  // namespace tide::exec::sequence_detail
