// Plan validation (Prop. 4.1, App. D). See the header for the properties checked.
#include "tide/core/plan_validator.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "tide/core/error.hpp"

namespace tide {
namespace {

using Masks = std::array<std::uint8_t, kMaxGpusPerNode>;

std::string wave_label(const RsWave& wave) {
  return "wave " + std::to_string(wave.index) + " (contributors " +
         std::to_string(wave.first_contributor) + ".." + std::to_string(wave.last_contributor) +
         ")";
}

ValidationResult reject(std::string reason) {
  return ValidationResult{false, std::move(reason)};
}

ValidationResult check_completeness(const RsPlan& plan) {
  const int m = plan.layout().topology().nodes();
  const auto& waves = plan.waves();
  const auto& rounds = plan.rounds();
  const int total_waves = static_cast<int>(waves.size());
  if (total_waves != plan.passes() * plan.waves_per_pass()) {
    return reject("the plan has " + std::to_string(total_waves) + " waves, expected " +
                  std::to_string(plan.passes() * plan.waves_per_pass()));
  }
  const int generations = total_waves == 1 ? 1 : 2;
  if (plan.generations() != generations) {
    return reject("the plan uses " + std::to_string(plan.generations()) +
                  " inbox generations for " + std::to_string(total_waves) + " waves");
  }
  int next_round = 0;
  for (int pass = 0; pass < plan.passes(); ++pass) {
    int next_contributor = 1;
    for (int w = 0; w < plan.waves_per_pass(); ++w) {
      const RsWave& wave = waves[static_cast<std::size_t>(pass * plan.waves_per_pass() + w)];
      if (wave.first_contributor != next_contributor || wave.last_contributor < next_contributor ||
          wave.contributor_count() > plan.wave_width()) {
        return reject(wave_label(wave) + " does not continue the contributor order 1..M " +
                      "in waves of at most W_wave = " + std::to_string(plan.wave_width()));
      }
      if (wave.generation != wave.index % generations) {
        return reject(wave_label(wave) + " uses inbox generation " +
                      std::to_string(wave.generation));
      }
      // Rounds of this wave: consecutive, inside the wave, at most k wide, covering every
      // remote contributor once.
      int expect = wave.first_contributor;
      const int last_remote = std::min(wave.last_contributor, m - 1);
      if (wave.first_round != next_round) return reject(wave_label(wave) + " skips a round");
      for (int r = 0; r < wave.round_count; ++r) {
        const RsRound& round = rounds.at(static_cast<std::size_t>(wave.first_round + r));
        if (round.wave != wave.index || round.first_contributor != expect || round.width < 1 ||
            round.width > plan.round_width() || expect + round.width - 1 > last_remote) {
          return reject("round " + std::to_string(round.index) + " is not a k-way round inside " +
                        wave_label(wave));
        }
        expect += round.width;
      }
      if (expect != last_remote + 1) {
        return reject(wave_label(wave) + " leaves remote contributors without a round");
      }
      next_round += wave.round_count;
      next_contributor = wave.last_contributor + 1;
    }
    if (next_contributor != m + 1) {
      return reject("pass " + std::to_string(pass) + " does not end with the own node c = M");
    }
  }
  if (next_round != static_cast<int>(rounds.size())) return reject("rounds outside any wave");

  // Each sub-slice's pass parts follow one another and their pieces tile each part parameter
  // by parameter; for every destination local rank i, the landing runs of all sub-slices and
  // passes tile its output span [0, E_live) exactly once (NOTE [sub-slice geometry]).
  const int l = plan.layout().topology().gpus_per_node();
  const std::int64_t scale = plan.sub_slice_space() / std::max<std::int64_t>(1, plan.span_elems());
  for (int s = 0; s < l; ++s) {
    for (int pass = 0; pass < plan.passes(); ++pass) {
      const std::int64_t begin = plan.sub_slice_begin(pass, s);
      if (pass > 0 && begin != plan.sub_slice_end(pass - 1, s)) {
        return reject("pass " + std::to_string(pass) + " of sub-slice " + std::to_string(s) +
                      " does not start where the previous part ended");
      }
      std::int64_t piece_cursor = begin;
      for (const RsPiece& piece : plan.pieces(pass, s)) {
        const ParamLayout& pl = plan.layout().param(piece.param);
        if (piece.span_begin != piece_cursor ||
            piece.param_offset != piece.span_begin - scale * pl.out_offset || piece.length() <= 0 ||
            piece.span_end > scale * (pl.out_offset + pl.shard_elems())) {
          return reject("the pieces of sub-slice " + std::to_string(s) +
                        " do not tile it parameter by parameter");
        }
        piece_cursor = piece.span_end;
      }
      if (piece_cursor != plan.sub_slice_end(pass, s)) {
        return reject("a sub-slice has uncovered elements");
      }
    }
  }
  for (int i = 0; i < l; ++i) {
    std::vector<std::pair<std::int64_t, std::int64_t>> runs;
    for (int s = 0; s < l; ++s) {
      for (int pass = 0; pass < plan.passes(); ++pass) {
        for (const RsLandingRun& run : plan.landing_runs(pass, s, i)) {
          if (run.length <= 0 || run.row < 0 || run.row >= plan.block_rows() || run.column < 0 ||
              run.column + run.length >
                  plan.sub_slice_end(pass, s) - plan.sub_slice_begin(pass, s)) {
            return reject("a landing run of sub-slice " + std::to_string(s) +
                          " lies outside its block");
          }
          runs.emplace_back(run.span_offset, run.length);
        }
      }
    }
    std::sort(runs.begin(), runs.end());
    std::int64_t covered = 0;
    for (const auto& [offset, length] : runs) {
      if (offset != covered) {
        return reject("the landings of destination GPU " + std::to_string(i) +
                      (offset < covered ? " overlap" : " leave a gap") + " at span element " +
                      std::to_string(std::min(offset, covered)));
      }
      covered += length;
    }
    if (covered != plan.span_elems()) {
      return reject("the sub-slices do not cover the output span of destination GPU " +
                    std::to_string(i));
    }
  }
  return {};
}

ValidationResult check_ownership(const RsPlan& plan) {
  const int m = plan.layout().topology().nodes();
  const int l = plan.layout().topology().gpus_per_node();
  const std::uint8_t all = static_cast<std::uint8_t>((1u << l) - 1u);
  for (int c = 1; c <= m; ++c) {
    std::uint8_t owned = 0;
    for (int j = 0; j < l; ++j) {
      const int s = plan.sub_slice(j, c);
      owned |= static_cast<std::uint8_t>(1u << s);
      if (plan.destination_gpu(s, c) != j) {
        return reject("contributor " + std::to_string(c) + ": sub-slice " + std::to_string(s) +
                      " leaves on rail " + std::to_string(j) + " but is placed on GPU " +
                      std::to_string(plan.destination_gpu(s, c)));
      }
    }
    if (owned != all) {
      return reject("contributor " + std::to_string(c) + " leaves a sub-slice without an owner");
    }
  }
  return {};
}

// Collision and stale-block freedom, wave by wave, from the plan's placement (Eq. 8).
ValidationResult check_waves(const RsPlan& plan) {
  const int l = plan.layout().topology().gpus_per_node();
  const std::uint8_t all = static_cast<std::uint8_t>((1u << l) - 1u);
  std::array<Masks, 2> dirty{};
  for (auto& generation : dirty)
    std::fill_n(generation.begin(), l, all);  // unknown contents
  for (const RsWave& wave : plan.waves()) {
    // holder[s] has bit j set once a contributor of this wave lands on GPU j for sub-slice s.
    Masks holder{};
    Masks written{};
    for (int c = wave.first_contributor; c <= wave.last_contributor; ++c) {
      for (int s = 0; s < l; ++s) {
        const int j = plan.destination_gpu(s, c);
        const auto bit = static_cast<std::uint8_t>(1u << j);
        if (holder[static_cast<std::size_t>(s)] & bit) {
          int other = wave.first_contributor;
          while (plan.destination_gpu(s, other) != j)
            ++other;
          std::string why = wave_label(wave) + " places contributors " + std::to_string(other) +
                            " and " + std::to_string(c) + " on destination GPU " +
                            std::to_string(j) + " for sub-slice " + std::to_string(s);
          if (l % plan.wave_width() != 0) {
            why += ": W_wave = " + std::to_string(plan.wave_width()) +
                   " does not divide L = " + std::to_string(l) + " (Prop. 4.1)";
          }
          return reject(why);
        }
        holder[static_cast<std::size_t>(s)] |= bit;
        written[static_cast<std::size_t>(j)] |= static_cast<std::uint8_t>(1u << s);
      }
    }
    Masks& state = dirty[static_cast<std::size_t>(wave.generation)];
    for (int j = 0; j < l; ++j) {
      const auto ju = static_cast<std::size_t>(j);
      if (written[ju] != wave.written_blocks[ju]) {
        return reject(wave_label(wave) + " records the wrong written blocks on GPU " +
                      std::to_string(j));
      }
      if ((wave.zeroed_blocks[ju] & written[ju]) != 0) {
        return reject(wave_label(wave) + " zeroes an inbox block it writes on GPU " +
                      std::to_string(j));
      }
      const std::uint8_t stale =
          static_cast<std::uint8_t>(state[ju] & ~written[ju] & ~wave.zeroed_blocks[ju]);
      if (stale != 0) {
        return reject(wave_label(wave) + " lands over a stale inbox block on GPU " +
                      std::to_string(j) + " (block mask " + std::to_string(stale) +
                      "): stale-block zeroing is missing");
      }
      state[ju] = written[ju];
    }
  }
  return {};
}

ValidationResult check_outbox(const RsPlan& plan) {
  const int depth = plan.outbox_depth();
  const int destinations = plan.remote_destinations();
  if (destinations > 0 && depth < 1) return reject("the outbox has no blocks");
  for (int j = depth + 1; j <= destinations; ++j) {
    if (plan.round_of_destination(j - depth) >= plan.round_of_destination(j)) {
      return reject("outbox block " + std::to_string(plan.outbox_block(j)) + " is refilled for " +
                    "destination " + std::to_string(j) + " before round " +
                    std::to_string(plan.round_of_destination(j - depth)) + " sends destination " +
                    std::to_string(j - depth) + " (n_out = " + std::to_string(depth) +
                    " is too shallow)");
    }
  }
  return {};
}

// An independent re-check of collision and stale-block freedom for accepted plans. It
// derives placement from the sender side only (Eq. 7: sender GPU j sends sub-slice
// s = (j + c_bar) mod L over rail j to GPU j) and tracks explicit block contents (contributor
// id, 0 for zeros, -1 for unknown) instead of bit masks. Returns true if the plan is sound.
bool independent_recheck(const RsPlan& plan) {
  const int m = plan.layout().topology().nodes();
  const int l = plan.layout().topology().gpus_per_node();
  std::array<std::array<std::array<int, kMaxGpusPerNode>, kMaxGpusPerNode>, 2> content{};
  for (auto& gen : content) {
    for (auto& gpu : gen)
      gpu.fill(-1);
  }
  for (const RsWave& wave : plan.waves()) {
    auto& inbox = content[static_cast<std::size_t>(wave.generation)];
    for (int j = 0; j < l; ++j) {
      for (int s = 0; s < l; ++s) {
        if ((wave.zeroed_blocks[static_cast<std::size_t>(j)] >> s) & 1u) {
          inbox[static_cast<std::size_t>(j)][static_cast<std::size_t>(s)] = 0;
        }
      }
    }
    std::array<std::array<bool, kMaxGpusPerNode>, kMaxGpusPerNode> fresh{};
    for (int c = wave.first_contributor; c <= wave.last_contributor; ++c) {
      const int c_bar = c % m;
      for (int j = 0; j < l; ++j) {
        const int s = (j + c_bar) % l;
        auto& slot = fresh[static_cast<std::size_t>(j)][static_cast<std::size_t>(s)];
        if (slot) return false;  // two contributors in one block
        slot = true;
        inbox[static_cast<std::size_t>(j)][static_cast<std::size_t>(s)] = c;
      }
    }
    for (int s = 0; s < l; ++s) {
      int landed = 0;
      for (int j = 0; j < l; ++j) {
        const int v = inbox[static_cast<std::size_t>(j)][static_cast<std::size_t>(s)];
        if (fresh[static_cast<std::size_t>(j)][static_cast<std::size_t>(s)]) {
          ++landed;
        } else if (v != 0) {
          return false;  // a stale or unknown block would join the reduction
        }
      }
      if (landed != wave.contributor_count()) return false;
    }
  }
  return true;
}

bool same_waves(const std::vector<RsWave>& a, const std::vector<RsWave>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const RsWave& x, const RsWave& y) {
    return x.first_contributor == y.first_contributor && x.last_contributor == y.last_contributor &&
           x.generation == y.generation && x.written_blocks == y.written_blocks &&
           x.zeroed_blocks == y.zeroed_blocks;
  });
}

}  // namespace

ValidationResult validate_rs_plan(const RsPlan& plan) {
  for (auto check : {check_completeness, check_ownership, check_waves, check_outbox}) {
    ValidationResult result = check(plan);
    if (!result.accepted) return result;
  }
  return {};
}

namespace {

template <typename Plan>
std::optional<std::string> fallback_reason(const Plan& plan,
                                           ValidationResult (*validate)(const Plan&)) noexcept {
  try {
    ValidationResult result = validate(plan);
    if (result.accepted) return std::nullopt;
    return std::move(result.reason);
  } catch (const std::exception& e) {  // tables too broken to walk (or out of memory)
    try {
      return std::string("the plan's tables cannot be checked: ") + e.what();
    } catch (...) {
      return std::string("out of memory");  // short enough for the small-string buffer
    }
  }
}

}  // namespace

std::optional<std::string> rs_plan_fallback_reason(const RsPlan& plan) noexcept {
  return fallback_reason(plan, &validate_rs_plan);
}

std::optional<std::string> ag_plan_fallback_reason(const AgPlan& plan) noexcept {
  return fallback_reason(plan, &validate_ag_plan);
}

void require_valid_plan(const RsPlan& plan) {
  if (std::optional<std::string> why = rs_plan_fallback_reason(plan)) {
    throw InvalidArgument("TIDE-RS plan rejected (App. D): " + *why);
  }
}

void require_valid_plan(const AgPlan& plan) {
  if (std::optional<std::string> why = ag_plan_fallback_reason(plan)) {
    throw InvalidArgument("TIDE-AG plan rejected (Sec. 3.1): " + *why);
  }
}

SweepResult sweep_plans(const SweepRanges& ranges) {
  if (ranges.min_nodes < 1 || ranges.max_nodes < ranges.min_nodes || ranges.min_wave_width < 1 ||
      ranges.max_wave_width < ranges.min_wave_width || ranges.min_round_width < 1 ||
      ranges.max_round_width < ranges.min_round_width) {
    throw InvalidArgument("check-plans ranges must be non-empty and start at 1 or more");
  }
  if (ranges.max_wave_width > ranges.gpus_per_node) {
    throw InvalidArgument("wave width " + std::to_string(ranges.max_wave_width) +
                          " exceeds L = " + std::to_string(ranges.gpus_per_node) +
                          " (a wave holds at most L contributors)");
  }
  Topology(ranges.max_nodes, ranges.gpus_per_node);  // validates L and the node range
  if (ranges.passes < 1 || ranges.passes > kMaxPasses) {
    throw InvalidArgument("passes n_part = " + std::to_string(ranges.passes) + " is outside 1.." +
                          std::to_string(kMaxPasses));
  }
  const auto start = std::chrono::steady_clock::now();
  std::exception_ptr failure;
  std::atomic<int> next_m{ranges.min_nodes};
  std::mutex merge;
  SweepResult total;
  auto sweep_worker = [&] {
    SweepResult local;
    std::vector<RsWave> rechecked_waves;
    bool rechecked_sound = false;
    for (int m = next_m++; m <= ranges.max_nodes; m = next_m++) {
      rechecked_waves.clear();
      const Topology topo(m, ranges.gpus_per_node);
      // One parameter of N rows x 8L columns: every sub-slice holds live elements.
      const GroupLayout layout(topo, {ParamShape{"sweep", topo.world(), 8L * topo.gpus_per_node()}},
                               DType::kBf16, DType::kBf16);
      for (int w = ranges.min_wave_width; w <= ranges.max_wave_width; ++w) {
        for (int k = ranges.min_round_width; k <= ranges.max_round_width; ++k) {
          for (int mode = 0; mode < (ranges.both_modes ? 2 : 1); ++mode) {
            RsOptions options;
            options.wave_width = w;
            options.round_width = k;
            options.passes = ranges.passes;
            options.mode = mode == 0 ? RsMode::kInPlace : RsMode::kSlotReuse;
            const RsPlan plan(layout, options);
            const ValidationResult result = validate_rs_plan(plan);
            ++local.plans;
            if (result.accepted) {
              ++local.accepted;
              // The re-check reads only the waves and the placement, which k and the mode
              // leave unchanged: re-run it whenever the waves differ from the last ones.
              if (!same_waves(plan.waves(), rechecked_waves)) {
                rechecked_waves = plan.waves();
                rechecked_sound = independent_recheck(plan);
              }
              if (!rechecked_sound) ++local.violations;
            } else {
              ++local.rejected;
              if (local.first_rejection.empty()) {
                local.first_rejection = "M=" + std::to_string(m) + " W_wave=" + std::to_string(w) +
                                        ": " + result.reason;
              }
            }
          }
        }
      }
    }
    const std::lock_guard lock(merge);
    total.plans += local.plans;
    total.accepted += local.accepted;
    total.rejected += local.rejected;
    total.violations += local.violations;
    if (total.first_rejection.empty()) total.first_rejection = local.first_rejection;
  };
  auto worker = [&] {
    try {
      sweep_worker();
    } catch (...) {
      const std::lock_guard lock(merge);
      if (!failure) failure = std::current_exception();
    }
  };
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back(worker);
  for (std::thread& t : pool)
    t.join();
  if (failure) std::rethrow_exception(failure);
  total.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return total;
}

}  // namespace tide
