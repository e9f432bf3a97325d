// The sequence runner over the ipc rendezvous transport when two ranks' messages cross (NOTE
// [CUDA call sequences] 5-6, NOTE [ipc rendezvous transport], Order and deadlock): forked
// processes on one GPU, one emulated host per rank. The sequence is the lane handoff of two
// ranks (program::handoff_sequence: each rank signals its own word and its peer's, a message,
// then waits for both). One process builds its runner from a copy whose legal order puts its
// own message before its peer's, so that its rail stream sends before it receives while its
// peer does the same: both sends wait for receives that never come, as NCCL's would. No
// option of the runner is involved: the misordered rank issues another program, as a rank
// that built its calls in another order would. The parent never touches CUDA.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "forked_ranks.hpp"
#include "tide/core/error.hpp"
#include "tide/core/store.hpp"
#include "tide/cuda/check.hpp"
#include "tide/exec/cuda_sequence.hpp"
#include "tide/fabric/ipc_fabric.hpp"
#include "tide/program/lanes.hpp"
#include "tide/transport/ipc_rendezvous.hpp"

namespace tide::fabric {
namespace {

using namespace std::chrono_literals;

bool gpu_present() {
  return std::filesystem::exists("/dev/nvidiactl");
}

// The handoff sequence of two ranks; with `swap`, the two messages (rank 0's signal to rank 1,
// rank 1's signal to rank 0) trade places in the template's legal order.
program::CallSequence handoff(bool swap) {
  program::CallSequence seq = program::handoff_sequence(2);
  if (!swap) return seq;
  program::CallTemplate& t = seq.templates.at(0);
  int* first = nullptr;
  int* second = nullptr;
  for (int& i : t.order.order) {
    const program::Op& op = t.program.ops[static_cast<std::size_t>(i)];
    const auto add = program::addition_of(op);
    if (!add || add->counter.rank == op.rank) continue;
    (first == nullptr ? first : second) = &i;
  }
  if (first == nullptr || second == nullptr) throw InternalError("the handoff has no two messages");
  std::swap(*first, *second);
  return seq;
}

// Polls until `stream` completes or `bound` passes; whether it completed.
bool drains(cudaStream_t stream, std::chrono::milliseconds bound) {
  const auto until = std::chrono::steady_clock::now() + bound;
  while (std::chrono::steady_clock::now() < until) {
    const cudaError_t e = cudaStreamQuery(stream);
    if (e == cudaSuccess) return true;
    if (e != cudaErrorNotReady) return false;
    std::this_thread::sleep_for(5ms);
  }
  return false;
}

// One rank: calls of the handoff; with `misorder`, rank 1 runs the swapped copy. Returns "ok"
// or what failed.
std::string run_rank(int rank, const std::filesystem::path& dir, bool misorder) {
  FileStore store(dir / "store");
  IpcExchange exchange = [&](const std::string& step, const std::string& mine) {
    return all_gather_values(store, "misorder/" + step, rank, 2, mine, 60s);
  };
  IpcFabricOptions o;
  o.device = 0;
  o.arena_bytes = 4096;
  o.signal_words = 4;
  o.hosts = {0, 1};  // every rank an emulated host: the signals between them are messages
  IpcFabric fabric(rank, 2, o, exchange);
  const program::CallSequence seq = handoff(misorder && rank == 1);
  std::string report = "ok";
  {
    exec::CudaSequencePlace place{0, 0};
    place.messages = transport::ipc_transports(fabric, 0);
    exec::CudaSequenceRunner runner(seq, fabric, place);
    cudaStream_t caller = nullptr;
    if (cudaStreamCreateWithFlags(&caller, cudaStreamNonBlocking) != cudaSuccess)
      return "no stream";
    exchange("built", "");  // both runners exist before either sends
    const std::vector<exec::CudaCallBindings> bindings(2);
    const int calls = misorder ? 1 : 2 * runner.event_slots() + 1;
    for (int e = 0; e < calls; ++e)
      runner.enqueue(bindings, 1.0f, false, caller);
    if (!misorder) {
      if (!drains(caller, 20s)) report = "the well-ordered calls did not complete";
      if (runner.messages_sent() != calls) {
        report = "sent " + std::to_string(runner.messages_sent()) + " messages in " +
                 std::to_string(calls) + " calls";
      }
    } else {
      // Deadlocked: the call holds, the watch names it and its unsatisfied wait.
      std::this_thread::sleep_for(300ms);
      const auto stall = runner.stalled(200ms);
      if (cudaStreamQuery(caller) != cudaErrorNotReady) {
        report = "the crossed call completed";
      } else if (!stall) {
        report = "stalled() named no call";
      } else if (stall->call != 0 || stall->waits.empty()) {
        report = "stalled() named call " + std::to_string(stall->call) + " with " +
                 std::to_string(stall->waits.size()) + " waits";
      } else {
        std::printf("rank %d: call %lld stalled; %s\n", rank, static_cast<long long>(stall->call),
                    stall->waits[0].c_str());
        runner.release_waits();
        if (!drains(caller, 20s)) {
          report = "the streams did not drain after release_waits()";
        } else if (runner.first_void_call() != 0) {
          report = "first_void_call() is " + std::to_string(runner.first_void_call());
        } else {
          try {
            runner.enqueue(bindings, 1.0f, false, caller);
            report = "an enqueue after release_waits() was accepted";
          } catch (const CudaError&) {
          }
        }
      }
    }
    exchange("checked", "");  // nobody unmaps while a peer's kernels still read its area
    if (!runner.stuck()) (void)cudaStreamDestroy(caller);
  }
  exchange("done", "");
  return report;
}

void expect_ranks(bool misorder) {
  const auto reports = testing::run_forked_ranks(
      2, "runner-misorder",
      [&](int rank, const std::filesystem::path& dir) { return run_rank(rank, dir, misorder); });
  if (reports[0].rfind("skip:", 0) == 0) GTEST_SKIP() << reports[0];
  for (std::size_t r = 0; r < reports.size(); ++r)
    EXPECT_EQ(reports[r], "ok") << "rank " << r;
}

// The control: both ranks issue the same order; every call completes, one message a rank per
// call.
TEST(RunnerMessagesGpu, WellOrderedMessagesComplete) {
  if (!gpu_present()) GTEST_SKIP() << "no GPU on this machine";
  expect_ranks(false);
}

// Crossed: both ranks hold; each rank's stalled() names call 0 and its unsatisfied wait,
// release_waits() drains its streams, the call is void, and the next enqueue is refused.
TEST(RunnerMessagesGpu, CrossedMessagesDeadlockAndTheWatchReleasesThem) {
  if (!gpu_present()) GTEST_SKIP() << "no GPU on this machine";
  expect_ranks(true);
}

}  // namespace
}  // namespace tide::fabric
