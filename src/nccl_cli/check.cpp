// tide-nccl check: the CUDA executor over the NCCL fabric, one rank per process, every output
// bitwise equal to the CPU reference executor's on the same inputs.
//
// Steps, per case and per M x L split of the world (every rank builds the same case from the
// same seed, and computes the reference outputs itself):
//   1. NcclWindowFabric over the session's fabric; CudaExecutor (zeroes this rank's signal
//      words).
//   2. `repeats` runs, each: poison this rank's buffers and upload its inputs, a barrier (NOTE
//      [fabric interface]: no rank may signal or write a peer before the peer is ready), the
//      run, the comparison of this rank's checked regions, and a barrier (a run must not
//      start while a peer still runs the previous one: counters are epoch-based).
//   3. Every rank's status line is gathered; rank 0 prints the table. Any failure on any rank
//      makes every rank exit 1.
// Faults (--fault): "stall" starts one rank's first run late; "withhold" turns one rank's
// first credit to a peer into a no-op. Both must make the run fail on every rank, naming the
// unsatisfied wait (fail-stop, Sec. 7.5), within the run and fabric timeouts.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "commands.hpp"
#include "session.hpp"
#include "tide/core/error.hpp"
#include "tide/core/models.hpp"
#include "tide/exec/cuda_executor.hpp"
#include "tide/fabric/nccl_window_fabric.hpp"
#include "tide/testing/cases.hpp"
#include "tide/transport/nccl_transports.hpp"

namespace tide::nccl_cli {
namespace {

using program::Buffer;
using program::Space;
using testing::CollectiveCase;

// Every (M, L) with M L = world and L in {1, 2, 4, 8} (TIDE's node sizes).
std::vector<std::pair<int, int>> splits(int world) {
  std::vector<std::pair<int, int>> out;
  for (int l : {1, 2, 4, 8}) {
    if (world % l == 0) out.emplace_back(world / l, l);
  }
  return out;
}

std::vector<ParamShape> shrunk_preset(const char* name, std::int64_t factor) {
  std::vector<ParamShape> out = find_model_group(name).params;
  for (ParamShape& s : out) {
    s.rows = (s.rows + factor - 1) / factor;
    s.cols = (s.cols + factor - 1) / factor;
  }
  return out;
}

testing::AgCaseOptions ag(bool cast, DType dtype, std::vector<ParamShape> shapes = {},
                          std::string what = "") {
  testing::AgCaseOptions o;
  o.cast = cast;
  o.dtype = dtype;
  o.shapes = std::move(shapes);
  o.what = std::move(what);
  return o;
}

testing::RsCaseOptions rs(RsMode mode, DType grad, bool accumulate, float alpha = 0.0f,
                          std::vector<ParamShape> shapes = {}, std::string what = "") {
  testing::RsCaseOptions o;
  o.mode = mode;
  o.grad = grad;
  o.accumulate = accumulate;
  o.alpha = alpha;
  o.shapes = std::move(shapes);
  o.what = std::move(what);
  return o;
}

struct CheckCase {
  CollectiveCase c;
  int gpus_per_node = 1;  // L of its split
};

std::vector<CheckCase> make_cases(int world, std::uint64_t seed, bool quick) {
  std::vector<CheckCase> cases;
  const DType bf16 = DType::kBf16, fp32 = DType::kFp32;
  for (auto [m, l] : splits(world)) {
    std::uint64_t s = seed * 1000 + static_cast<std::uint64_t>(m * 16 + l) * 37;
    const auto add = [&cases, l = l](CollectiveCase c) { cases.push_back({std::move(c), l}); };
    add(testing::ag_case(m, l, ++s));
    add(testing::rs_case(m, l, ++s));
    add(testing::step_case(m, l, ++s));
    if (quick) continue;
    add(testing::ag_case(m, l, ++s, ag(true, bf16)));
    add(testing::ag_case(m, l, ++s, ag(false, fp32)));
    add(testing::rs_case(m, l, ++s, rs(RsMode::kSlotReuse, bf16, false)));
    add(testing::rs_case(m, l, ++s, rs(RsMode::kInPlace, fp32, true, 0.3f)));
    add(testing::rs_case(m, l, ++s, rs(RsMode::kSlotReuse, fp32, true)));
    testing::StepCaseOptions step;
    step.mode = RsMode::kSlotReuse;
    step.grad = fp32;
    step.accumulate = true;
    add(testing::step_case(m, l, ++s, step));
    // Many odd parameters, and the model presets shrunk to fit the CPU reference.
    std::mt19937_64 rng(++s);
    const auto many = testing::random_shapes(rng, 200);
    add(testing::ag_case(m, l, ++s, ag(false, bf16, many, " 200 params")));
    add(testing::rs_case(m, l, ++s, rs(RsMode::kInPlace, bf16, false, 0, many, " 200 params")));
    for (const char* preset : {"llama3.1-70b", "qwen3-30b-a3b"}) {
      const auto shapes = shrunk_preset(preset, 32);
      const std::string what = std::string(" ") + preset + "/32";
      add(testing::ag_case(m, l, ++s, ag(false, bf16, shapes, what)));
      add(testing::rs_case(m, l, ++s, rs(RsMode::kInPlace, bf16, false, 0, shapes, what)));
    }
    // 1-byte items (NOTE [1-byte all-gather items]): random byte codes, landed byte for byte.
    add(testing::ag_case(m, l, ++s, ag(false, DType::kFp8)));
    add(testing::ag_case(m, l, ++s, ag(false, DType::kU8, many, " 200 params")));
  }
  return cases;
}

// Withholds one signal that rank `rank` owes a peer and that some wait of the peer needs: a
// bare signal (a credit) becomes a no-op marker, a put keeps its copy but loses its signal. Returns
// its label, or "" when there is none.
std::string withhold_one_credit(program::Program& p, int rank) {
  std::map<std::pair<int, int>, std::int64_t> total;  // (counter rank, id) -> one run's sum
  for (const program::Op& op : p.ops) {
    if (const auto add = program::addition_of(op))
      total[{add->counter.rank, add->counter.id}] += add->value;
  }
  for (program::Op& op : p.ops) {
    const auto add = program::addition_of(op);  // a kSignal or kRailPut owes its addition
    if (op.rank != rank || !add || add->counter.rank == rank) continue;
    const auto key = std::pair{add->counter.rank, add->counter.id};
    const bool needed = std::any_of(p.ops.begin(), p.ops.end(), [&](const program::Op& w) {
      const auto* wait = w.get_if<program::WaitOp>();
      return wait != nullptr && std::pair{wait->counter.rank, wait->counter.id} == key &&
             wait->value > total[key] - add->value;
    });
    if (!needed) continue;
    const std::string label = op.label;
    // A put keeps its data and loses its signal; a bare signal becomes a marker.
    if (const auto* put = op.get_if<program::RailPutOp>()) {
      op.payload = program::CopyOp{put->copies, put->ctas};
    } else {
      op.payload = program::ReleaseOp{};
    }
    op.label = "withheld: " + label;
    return label;
  }
  return {};
}

struct CaseResult {
  std::string status = "ok";  // "ok" or the first failure on this rank
  double enqueue_us = 0;      // median over runs
  double wall_us = 0;
  std::string message_path;  // CudaExecutor::message_path() (the same on every rank)
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Compares this rank's checked regions with the reference; "" when all are equal.
std::string compare_own(exec::CudaExecutor& ex, const CollectiveCase& c, int me,
                        const std::vector<std::vector<std::byte>>& want) {
  for (std::size_t i = 0; i < c.checks.size(); ++i) {
    const testing::CaseCheck& k = c.checks[i];
    if (k.buffer.rank != me) continue;
    const std::vector<std::byte> all = ex.download(k.buffer);
    const auto n =
        static_cast<std::size_t>(k.bytes < 0 ? static_cast<std::int64_t>(all.size()) : k.bytes);
    const auto* got = all.data() + k.offset;
    for (std::size_t b = 0; b < n; ++b) {
      if (got[b] != want[i][b]) {
        return "check " + std::to_string(i) + " differs from the reference first at byte " +
               std::to_string(b);
      }
    }
  }
  return {};
}

// Poisons this rank's buffers and uploads its inputs.
void prepare(exec::CudaExecutor& ex, const CollectiveCase& c, const program::Program& program,
             int me) {
  const program::BufferSizes& own = program.buffers[static_cast<std::size_t>(me)];
  ex.fill(Buffer{me, Space::kArena, 0}, testing::kPoison);
  for (std::size_t i = 0; i < own.tensor_bytes.size(); ++i)
    ex.fill(Buffer{me, Space::kTensor, static_cast<int>(i)}, testing::kPoison);
  for (std::size_t i = 0; i < own.output_bytes.size(); ++i)
    ex.fill(Buffer{me, Space::kOutput, static_cast<int>(i)}, testing::kPoison);
  for (const testing::CaseInput& in : c.inputs) {
    if (in.buffer.rank == me) ex.upload(in.buffer, in.bytes, in.offset);
  }
}

// Every rank makes the same sequence of session collectives whatever fails where: a failure
// is carried in the sums, so all ranks stop together.
CaseResult run_one(RankSession& session, const CollectiveCase& c, int gpus_per_node,
                   const std::vector<std::vector<std::byte>>& want, const CheckArgs& args,
                   bool inject) {
  CaseResult result;
  const int me = session.rank();
  program::Program program = c.program;
  const bool faulty = inject && me == (args.fault_rank < 0 ? session.world() - 1 : args.fault_rank);
  if (faulty && args.fault == "withhold") {
    const std::string label = withhold_one_credit(program, me);
    std::fprintf(stderr, "tide-nccl: rank %d withholds its credit '%s'\n", me, label.c_str());
  }
  std::unique_ptr<fabric::NcclWindowFabric> pf;
  std::unique_ptr<exec::CudaExecutor> ex;
  try {
    fabric::NcclWindowOptions po;
    po.one_host = false;  // ranks the split puts on other nodes are reached by messages
    po.gpus_per_node = gpus_per_node;
    po.messages_between_nodes = args.common.messages;
    if (args.common.messages) po.message_comm = session.message_comm();
    pf = std::make_unique<fabric::NcclWindowFabric>(session.fabric(), program, po);
    exec::CudaExecutorOptions eo;
    eo.copy_streams = args.common.copy_streams;
    fabric::NcclWindowFabric* window = pf.get();
    eo.messages = [window] { return transport::nccl_transports(*window, 0); };
    ex = std::make_unique<exec::CudaExecutor>(program, *pf, eo);
    result.message_path = ex->message_path();
  } catch (const std::exception& e) {
    result.status = std::string("setup: ") + e.what();
  }
  std::vector<double> enqueue, wall;
  exec::CudaRunOptions run;
  run.timeout_s = args.common.run_timeout_s;
  for (int k = 0; k < args.repeats; ++k) {
    // Every run starts from poisoned buffers and fresh inputs (accumulate reads the output).
    if (result.status == "ok") {
      try {
        prepare(*ex, c, program, me);
      } catch (const std::exception& e) {
        result.status = std::string("setup: ") + e.what();
      }
    }
    // No rank may signal or write a peer before the peer's executor exists and its buffers
    // are prepared (NOTE [fabric interface]).
    if (session.sum_over_ranks(result.status != "ok", "every rank prepared") > 0) {
      if (result.status == "ok") result.status = "not run: a peer failed its setup";
      break;
    }
    if (faulty && args.fault == "stall" && k == 0) {
      const double late = args.stall_s > 0 ? args.stall_s : 3 * args.common.run_timeout_s;
      std::fprintf(stderr, "tide-nccl: rank %d stalls %.1f s before its run\n", me, late);
      std::this_thread::sleep_for(std::chrono::duration<double>(late));
    }
    try {
      const exec::CudaRunResult r = ex->run(run);
      enqueue.push_back(r.enqueue_us);
      wall.push_back(r.wall_us);
      const std::string diff = compare_own(*ex, c, me, want);
      if (!diff.empty()) result.status = "run " + std::to_string(k) + ": " + diff;
    } catch (const std::exception& e) {
      result.status = "run " + std::to_string(k) + ": " + e.what();
    }
    // A run must not start while a peer still runs the previous one (epoch counters, reused
    // arenas); the sum doubles as that barrier and stops every rank on any failure.
    if (session.sum_over_ranks(result.status != "ok", "end of a run on every rank") > 0) {
      if (result.status == "ok") result.status = "stopped: a peer failed";
      break;
    }
  }
  result.enqueue_us = median(enqueue);
  result.wall_us = median(wall);
  return result;
}

}  // namespace

int run_check(const fabric::LaunchedRank& me, const CheckArgs& args) {
  const std::vector<CheckCase> cases =
      make_cases(me.world, args.seed, args.quick || !args.fault.empty());
  std::int64_t window = 0;
  for (const CheckCase& k : cases)
    window = std::max(window, fabric::NcclWindowFabric::required_window_bytes(k.c.program));
  RankSession session(
      me, window,
      std::chrono::milliseconds(static_cast<std::int64_t>(args.common.fabric_timeout_s * 1000)));
  const bool lead = session.rank() == 0;
  GroupSignature signature;
  signature.name = "tide-nccl check";
  signature.nodes = 1;
  signature.gpus_per_node = session.world();
  signature.virtual_nodes = true;
  signature.params = {{"w", 64, 8}};
  const Decision decision = session.agree_on(signature);
  if (lead) std::cout << decision.log_line() << "\n";
  if (decision.backend != Backend::kTide) {
    if (lead) std::cout << "tide-nccl check: TIDE is not available here; nothing to check\n";
    return 1;
  }
  if (lead) {
    std::printf("tide-nccl check: %d ranks (%s launcher), %zu cases, %d runs each%s%s\n",
                session.world(), me.launcher.c_str(), cases.size(), args.repeats,
                args.fault.empty() ? "" : (", fault " + args.fault).c_str(),
                args.common.messages ? ", transfers between nodes as messages" : "");
    std::printf("%-48s %-10s %12s %12s\n", "case", "result", "enqueue us", "run us");
  }
  nlohmann::json rows = nlohmann::json::array();
  int failed = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const CollectiveCase& c = cases[i].c;
    CaseResult r;
    try {
      const auto want = testing::reference_outputs(c);
      r = run_one(session, c, cases[i].gpus_per_node, want, args, !args.fault.empty() && i == 0);
    } catch (const std::exception& e) {
      r.status = e.what();
    }
    const auto lines = session.gather_text(r.status, "status of a case");
    const double enqueue = session.max_over_ranks(r.enqueue_us, "enqueue time");
    const double wall = session.max_over_ranks(r.wall_us, "run time");
    std::string verdict = "ok";
    for (int k = 0; k < session.world(); ++k) {
      if (lines[static_cast<std::size_t>(k)] != "ok") verdict = "FAILED";
    }
    if (verdict != "ok") {
      ++failed;
      // Fail-stop: every rank names the failure (the first rank whose own run failed).
      for (int k = 0; k < session.world(); ++k) {
        const std::string& line = lines[static_cast<std::size_t>(k)];
        if (line == "ok" || line.starts_with("stopped:") || line.starts_with("not run:")) continue;
        std::fprintf(stderr, "tide-nccl: rank %d: '%s' failed on rank %d: %s\n", session.rank(),
                     c.name.c_str(), k, line.c_str());
        break;
      }
    }
    if (lead) {
      std::printf("%-48s %-10s %12.1f %12.1f\n", c.name.c_str(), verdict.c_str(), enqueue, wall);
      for (int k = 0; k < session.world(); ++k) {
        if (lines[static_cast<std::size_t>(k)] != "ok")
          std::printf("  rank %d: %s\n", k, lines[static_cast<std::size_t>(k)].c_str());
      }
      rows.push_back({{"case", c.name},
                      {"ok", verdict == "ok"},
                      {"ranks", lines},
                      {"message_path", r.message_path},
                      {"enqueue_us_max_rank_median", enqueue},
                      {"run_us_max_rank_median", wall}});
    }
    if (!args.fault.empty()) break;  // a fault leaves the executors drained: one case only
  }
  if (lead) {
    std::printf("tide-nccl check: %d of %zu cases failed\n", failed,
                args.fault.empty() ? cases.size() : std::size_t{1});
    if (!args.common.out.empty()) {
      std::ofstream(args.common.out) << nlohmann::json{{"world", session.world()},
                                                       {"fault", args.fault},
                                                       {"messages", args.common.messages},
                                                       {"repeats", args.repeats},
                                                       {"cases", rows}}
                                            .dump(2)
                                     << "\n";
    }
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace tide::nccl_cli
