// The graph waits (tide/kernels/signal/generation_wait.hpp and sequence_generations.hpp, NOTE [CUDA
// call sequences] 3). On the host, their arithmetic: for random periodic sequences, the threshold a
// wait kernel computes from its slot's generation equals the host threshold (what earlier calls
// added, plus the template's value) for every call of the slot, before and after the call it was
// captured at. On a GPU, the kernel itself: it holds its stream until every term is met, across
// launches.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/gpu_test_util.hpp"
#include "sequence_generations.hpp"
#include "test_seed.hpp"
#include "tide/cuda/check.hpp"

namespace tide::exec::cuda_detail {
namespace {

// What calls 0 .. e - 1 added to counter i.
std::int64_t base(const std::vector<std::vector<std::int64_t>>& additions, std::int64_t e,
                  std::size_t i) {
  std::int64_t sum = 0;
  for (std::int64_t c = 0; c < e; ++c)
    sum += additions[static_cast<std::size_t>(c) % additions.size()][i];
  return sum;
}

TEST(GenerationWaits, ThresholdsFollowEveryCallOfTheSlot) {
  const tide::testing::TestSeed seed;
  const std::uint64_t s = seed.value();
  std::mt19937_64 rng(s);
  for (int trial = 0; trial < 300; ++trial) {
    const int p = 1 + static_cast<int>(rng() % 4);
    const int q = p * (1 + static_cast<int>(rng() % 3));
    const std::size_t counters = 1 + rng() % 5;
    std::vector<std::vector<std::int64_t>> additions(static_cast<std::size_t>(p),
                                                     std::vector<std::int64_t>(counters));
    for (auto& t : additions)
      for (auto& a : t)
        a = static_cast<std::int64_t>(rng() % 10);
    const std::vector<std::int64_t> step = slot_period_additions(additions, q);
    const std::int64_t captured = static_cast<std::int64_t>(rng() % (3 * static_cast<unsigned>(q)));
    for (std::size_t i = 0; i < counters; ++i) {
      const std::int64_t value = static_cast<std::int64_t>(rng() % 41) - 20;
      const GenerationWait w =
          generation_wait(nullptr, base(additions, captured, i) + value, step[i], captured, q);
      for (std::int64_t e = captured % q; e < captured + 6 * q; e += q) {
        ASSERT_EQ(generation_threshold(w, generation_of(e, q)), base(additions, e, i) + value)
            << "trial " << trial << " P " << p << " Q " << q << " captured at " << captured
            << " call " << e << " counter " << i;
      }
    }
  }
}

// Every call of slot j adds 1 to G_j before anything else; call e then sees generation_of(e).
TEST(GenerationWaits, EachCallSeesItsSlotsCount) {
  for (const int q : {1, 2, 3, 4, 6, 8}) {
    std::vector<std::int64_t> g(static_cast<std::size_t>(q), 0);
    for (std::int64_t e = 0; e < 10 * q; ++e) {
      ++g[static_cast<std::size_t>(e % q)];
      ASSERT_EQ(g[static_cast<std::size_t>(e % q)], generation_of(e, q)) << "Q " << q << " e " << e;
    }
  }
}

// 40 random terms (two launches: 32 and 8) at generation g, each word one short of its
// threshold; plus a word at the release value (met) and a negative threshold (met). The
// stream must stay held until the last short word reaches its threshold, then finish.
TEST(GenerationWaits, KernelHoldsTheStreamUntilEveryTermIsMet) {
  TIDE_REQUIRE_GPU();
  const tide::testing::TestSeed seed;
  const std::uint64_t s = seed.value();
  std::mt19937_64 rng(s);
  constexpr int kTerms = 40;
  void* host = nullptr;
  TIDE_CUDA_CHECK(cudaHostAlloc(&host, (kTerms + 2) * 8, cudaHostAllocMapped));
  auto* words = static_cast<volatile std::uint64_t*>(host);
  const std::int64_t g = 1 + static_cast<std::int64_t>(rng() % 5);
  std::uint64_t* generation = nullptr;
  TIDE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&generation), 8));
  const auto g_bits = static_cast<std::uint64_t>(g);
  TIDE_CUDA_CHECK(cudaMemcpy(generation, &g_bits, 8, cudaMemcpyHostToDevice));
  std::vector<GenerationWait> waits;
  std::vector<std::int64_t> threshold;
  for (int i = 0; i < kTerms; ++i) {
    const auto step = static_cast<std::int64_t>(rng() % 7);
    threshold.push_back(1 + static_cast<std::int64_t>(rng() % 1000));
    words[i] = static_cast<std::uint64_t>(threshold.back() - 1);
    waits.push_back({const_cast<std::uint64_t*>(&words[i]), threshold.back() - step * g, step});
  }
  words[kTerms] = std::uint64_t{1} << 62;  // released
  waits.push_back({const_cast<std::uint64_t*>(&words[kTerms]), 1000000, 0});
  words[kTerms + 1] = 0;
  waits.push_back({const_cast<std::uint64_t*>(&words[kTerms + 1]), -5, 0});
  cudaStream_t stream = nullptr;
  TIDE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  launch_generation_waits(waits, generation, stream);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(cudaStreamQuery(stream), cudaErrorNotReady) << "no term was met yet";
  for (int i = 0; i < kTerms - 1; ++i)
    words[i] = static_cast<std::uint64_t>(threshold[static_cast<std::size_t>(i)]);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(cudaStreamQuery(stream), cudaErrorNotReady) << "the last term is still short";
  words[kTerms - 1] = static_cast<std::uint64_t>(threshold.back()) + 3;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (cudaStreamQuery(stream) == cudaErrorNotReady && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const cudaError_t done = cudaStreamQuery(stream);
  if (done == cudaErrorNotReady) {
    for (int i = 0; i < kTerms + 2; ++i)
      words[i] = std::uint64_t{1} << 62;  // let the kernel go before failing
  }
  TIDE_CUDA_CHECK(cudaStreamSynchronize(stream));
  EXPECT_EQ(done, cudaSuccess) << "every term was met, yet the stream is held";
  TIDE_CUDA_CHECK(cudaStreamDestroy(stream));
  TIDE_CUDA_CHECK(cudaFree(generation));
  TIDE_CUDA_CHECK(cudaFreeHost(host));
}

}  // namespace
}  // namespace tide::exec::cuda_detail
