// The TIDE-RS plan options every subcommand that builds a reduce-scatter plan takes.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <string>

#include "tide/core/error.hpp"
#include "tide/core/rs_defaults.hpp"
#include "tide/core/rs_plan.hpp"

namespace tide::cli {

struct RsArgs {
  int wave_width = 0;
  int round_width = 4;
  int rounds_in_flight = 0;  // 0: not given, the sizing solver's default (rs_defaults.hpp)
  int passes = 1;
  int staging_slots = 2;
  std::int64_t chunk_bytes = 0;
  std::string mode = "in-place";
  std::string sub_slices = std::string(sub_slices_name(RsOptions{}.sub_slices));
  bool multi_node_layout = false;

  void add_to(CLI::App& cmd) {
    cmd.add_option("--wave-width", wave_width, "Contributors per wave W_wave (default L)")
        ->check(CLI::Range(1, kMaxGpusPerNode));
    cmd.add_option("--round-width", round_width, "Rail transfers per round k")
        ->capture_default_str();
    cmd.add_option("--rounds-in-flight", rounds_in_flight,
                   "Network rounds in flight d (1: lockstep; default: the sizing solver's d for "
                   "the group on App. G's rates, as tide solve prints it)")
        ->check(CLI::Range(1, kMaxRoundsInFlight));
    cmd.add_option("--passes", passes, "Sub-slice passes n_part")->capture_default_str();
    cmd.add_option("--staging-slots", staging_slots, "Level 1 staging slots n_stg")
        ->capture_default_str();
    cmd.add_option("--chunk-bytes", chunk_bytes,
                   "Level 1 staging slot size in bytes (0: the sizing solver's default, the "
                   "fewest chunks whose staging fits FSDP2's fp32 packing buffer; "
                   "rs_defaults.hpp)")
        ->capture_default_str();
    cmd.add_option("--mode", mode, "TIDE-RS memory mode: in-place or slot-reuse")
        ->capture_default_str();
    cmd.add_option("--sub-slices", sub_slices,
                   "Sub-slice geometry: across-ranks (paper Sec. 4.1, strided gradient reads), "
                   "per-rank or node-contiguous (1-D reads)")
        ->capture_default_str();
    cmd.add_flag("--multi-node-layout", multi_node_layout,
                 "At M = 1, keep the multi-node layout (own-node spares and a landing) instead "
                 "of the one-node layout, where each rank owns its own rows and Level 1 sums "
                 "into its output (NOTE [one-node TIDE-RS])");
  }

  // A staging slot holds (L - 1) contributions of R rows (L across ranks, 1 per rank):
  // --chunk-bytes sets its row width.
  RsOptions options(const GroupLayout& layout) const {
    RsOptions o;
    o.wave_width = wave_width;
    o.round_width = round_width;
    o.passes = passes;
    o.staging_slots = staging_slots;
    o.mode = parse_mode(mode);
    o.sub_slices = parse_sub_slices(sub_slices);
    o.one_node = !multi_node_layout;
    if (o.one_node && layout.topology().nodes() == 1) o.sub_slices = RsSubSlices::kPerRank;
    if (chunk_bytes < 0) throw InvalidArgument("--chunk-bytes must not be negative");
    const std::int64_t l = layout.topology().gpus_per_node();
    const std::int64_t rows = o.sub_slices == RsSubSlices::kAcrossRanks ? l : 1;
    if (chunk_bytes > 0 && l > 1) {
      o.staging_chunk_elems = std::max<std::int64_t>(
          1, chunk_bytes / ((l - 1) * rows * item_bytes(layout.grad_dtype())));
    }
    if (rounds_in_flight > 0) {
      o.rounds_in_flight = rounds_in_flight;  // an explicit value wins
      if (o.staging_chunk_elems == 0)
        o.staging_chunk_elems = default_staging_chunk_elems(layout, o);
      return o;
    }
    return with_solver_defaults(o, layout);  // d and, without --chunk-bytes, the staging chunk
  }
};

}  // namespace tide::cli
