// tide-nccl: TIDE across GPUs over the NCCL fabric, one process per GPU.
//
//   tide-nccl --spawn 2 check            # starts 2 ranks on this host (mpirun-style)
//   torchrun --nproc-per-node 8 $(which tide-nccl) bench      # or under torchrun / mpirun
//
// Every rank runs the same command; rank 0 prints. NOTE [launch] says how ranks find each
// other. NVLink multicast is never used (the fabric keeps NCCL_NVLS_ENABLE=0).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "commands.hpp"
#include "tide/core/error.hpp"
#include "tide/fabric/launch.hpp"

namespace {

using tide::nccl_cli::CommonArgs;

void add_common(CLI::App* app, CommonArgs& c) {
  app->add_option("--run-timeout", c.run_timeout_s, "seconds a TIDE run may take (fail-stop)")
      ->check(CLI::PositiveNumber);
  app->add_option("--fabric-timeout", c.fabric_timeout_s,
                  "seconds any fabric wait may take (TIDE_FABRIC_TIMEOUT_S overrides)")
      ->check(CLI::PositiveNumber);
  app->add_option("--json", c.out, "rank 0 writes the results as JSON to this file");
}

// check and bench: how the executor moves data (CommonArgs::messages, copy_streams).
void add_executor_options(CLI::App* app, CommonArgs& c) {
  app->add_option("--copy-streams", c.copy_streams,
                  "streams a copy op's descriptors are dealt over (Sec. 6.2)")
      ->check(CLI::Range(1, 16));
  app->add_flag("--messages", c.messages,
                "send transfers between declared nodes as messages (as between hosts)");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tide-nccl: TIDE-AG and TIDE-RS across GPUs over NCCL, one process per GPU"};
  app.require_subcommand(1);
  int spawn = 0;
  app.add_option("--spawn", spawn,
                 "start this many ranks on this host (one per GPU) and wait for them")
      ->check(CLI::Range(1, 64));

  tide::nccl_cli::ProbeArgs probe;
  CLI::App* probe_cmd =
      app.add_subcommand("probe", "peer pointers, copy-engine reads/writes, peer bandwidth");
  add_common(probe_cmd, probe.common);
  probe_cmd->add_option("--bytes", probe.bytes, "bytes of each timed copy")
      ->check(CLI::Range(std::int64_t{4096}, std::int64_t{1} << 36));
  probe_cmd->add_option("--repeats", probe.repeats)->check(CLI::Range(1, 1000));

  tide::nccl_cli::CheckArgs check;
  CLI::App* check_cmd = app.add_subcommand(
      "check", "every split of the world, bitwise against the CPU reference executor");
  add_common(check_cmd, check.common);
  check_cmd->add_option("--repeats", check.repeats, "runs of each executor")
      ->check(CLI::Range(1, 100));
  check_cmd->add_option("--seed", check.seed);
  check_cmd->add_option("--fault", check.fault, "stall | withhold: expect every rank to fail")
      ->check(CLI::IsMember({"stall", "withhold"}));
  check_cmd->add_option("--fault-rank", check.fault_rank, "the faulty rank (default: the last)");
  check_cmd->add_option("--stall", check.stall_s, "stall: seconds late (default 3 x run timeout)")
      ->check(CLI::NonNegativeNumber);
  check_cmd->add_flag("--quick", check.quick, "fewer cases");
  add_executor_options(check_cmd, check.common);

  tide::nccl_cli::BenchArgs bench;
  CLI::App* bench_cmd =
      app.add_subcommand("bench", "TIDE against NCCL plus FSDP2's layout copies, nccl-tests style");
  add_common(bench_cmd, bench.common);
  bench_cmd->add_option("--cases", bench.cases,
                        "flat32m flat128m llama3.1-70b qwen3-30b-a3b (default: all)");
  bench_cmd->add_option("--repeats", bench.repeats)->check(CLI::Range(1, 10000));
  bench_cmd->add_option("--warmup", bench.warmup)->check(CLI::Range(0, 1000));
  bench_cmd->add_option("--seed", bench.seed);
  std::string ops = "ag,rs";
  bench_cmd->add_option("--ops", ops, "ag, rs or ag,rs")
      ->check(CLI::IsMember({"ag", "rs", "ag,rs", "rs,ag"}));
  bench_cmd->add_option("--rs-sum-ctas", bench.rs_sum_ctas, "Level 1 sum CTA budget")
      ->check(CLI::Range(1, 132));
  bench_cmd->add_option("--rs-landing-ctas", bench.rs_landing_ctas, "landing CTA budget")
      ->check(CLI::Range(1, 132));
  bench_cmd
      ->add_option("--rs-chunk", bench.rs_chunk_elems,
                   "Level 1 staging chunk, columns per staged row (0: a whole pass part)")
      ->check(CLI::NonNegativeNumber);
  bench_cmd->add_flag("--rs-slot-reuse", bench.rs_slot_reuse, "TIDE-RS in Slot-Reuse mode");
  bench_cmd->add_flag("--one-node", bench.one_node,
                      "the one-node layout at 1 x world only (RS: peers push; AG: staged shards)");
  add_executor_options(bench_cmd, bench.common);

  CLI11_PARSE(app, argc, argv);

  try {
    if (spawn > 0) {
      std::vector<std::string> args;
      for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--spawn") {
          ++i;
          continue;
        }
        if (a.starts_with("--spawn=")) continue;
        args.push_back(a);
      }
      return tide::fabric::spawn_ranks(spawn, args, std::chrono::seconds(30));
    }
    auto me = tide::fabric::launched_rank_from_environment();
    if (!me) {
      me = tide::fabric::LaunchedRank{};  // a world of one
      me->launcher = "none";
    }
    if (probe_cmd->parsed()) return tide::nccl_cli::run_probe(*me, probe);
    if (check_cmd->parsed()) return tide::nccl_cli::run_check(*me, check);
    if (bench_cmd->parsed()) {
      bench.all_gather = ops.find("ag") != std::string::npos;
      bench.reduce_scatter = ops.find("rs") != std::string::npos;
      return tide::nccl_cli::run_bench(*me, bench);
    }
  } catch (const tide::InvalidArgument& e) {
    std::cerr << "tide-nccl: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "tide-nccl: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
