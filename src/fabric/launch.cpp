// Launcher glue: NOTE [launch] in docs/nccl_fabric.md.
#include "tide/fabric/launch.hpp"

#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <stdexcept>
#include <thread>

#include "tide/core/env.hpp"
#include "tide/core/error.hpp"
#include "tide/core/process.hpp"

extern char** environ;

namespace tide::fabric {
namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kIdFile = "nccl-unique-id";

// The launchers' variables (NOTE [environment knobs] declares the TIDE_* ones).
std::optional<std::string> env(const char* name) {
  return ::tide::env::value(name);
}

int parse_int(const std::string& text, const char* name) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || *end != '\0' || v < 0 || v > 1'000'000) {
    throw InvalidArgument(std::string("launcher: ") + name + "='" + text +
                          "' is not a rank or a world size");
  }
  return static_cast<int>(v);
}

struct Scheme {
  const char* launcher;
  const char* rank;
  const char* world;
  const char* local;
};

constexpr Scheme kSchemes[] = {
    {"tide", "TIDE_RANK", "TIDE_WORLD", "TIDE_LOCAL_RANK"},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
    {"mpich", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
};

std::string default_rendezvous(const std::string& launcher) {
  if (launcher != "torchrun") return {};
  return "/tmp/tide-rendezvous-" + env("MASTER_ADDR").value_or("local") + "-" +
         env("MASTER_PORT").value_or("0") + "-" + env("TORCHELASTIC_RUN_ID").value_or("none") +
         "-" + env("TORCHELASTIC_RESTART_COUNT").value_or("0");
}

}  // namespace

std::optional<LaunchedRank> launched_rank_from_environment() {
  for (const Scheme& s : kSchemes) {
    const auto rank = env(s.rank);
    const auto world = env(s.world);
    if (!rank || !world) continue;
    LaunchedRank me;
    me.launcher = s.launcher;
    me.rank = parse_int(*rank, s.rank);
    me.world = parse_int(*world, s.world);
    me.local_rank = env(s.local) ? parse_int(*env(s.local), s.local) : me.rank;
    if (me.world < 1 || me.rank >= me.world) {
      throw InvalidArgument(std::string("launcher (") + s.launcher + "): rank " + *rank +
                            " does not fit a world of " + *world);
    }
    me.rendezvous = env("TIDE_RENDEZVOUS").value_or(default_rendezvous(me.launcher));
    return me;
  }
  return std::nullopt;
}

int spawn_ranks(int world, const std::vector<std::string>& args, std::chrono::seconds grace) {
  if (world < 1) throw InvalidArgument("spawn: the world must have at least one rank");
  char pattern[] = "/tmp/tide-rendezvous-XXXXXX";
  if (mkdtemp(pattern) == nullptr) {
    throw std::runtime_error(std::string("spawn: cannot make a rendezvous directory: ") +
                             std::strerror(errno));
  }
  const std::string dir = pattern;
  std::vector<std::string> argv_text;
  argv_text.push_back("/proc/self/exe");
  argv_text.insert(argv_text.end(), args.begin(), args.end());

  WaitPolicy policy;
  policy.poll = std::chrono::milliseconds(20);
  policy.failure_grace = grace;
  policy.on_exit = [](int r, int wait_status) {
    const int code = exit_code(wait_status);
    if (code != 0) std::cerr << "tide: rank " << r << " exited with status " << code << "\n";
  };
  policy.on_stop = [] { std::cerr << "tide: stopping the ranks still running after a failure\n"; };
  const std::vector<ChildExit> exits = run_processes(
      world,
      [&](int r) {
        std::vector<std::string> env_text;
        for (char** e = environ; *e != nullptr; ++e) {
          const std::string_view v(*e);
          if (v.starts_with("TIDE_RANK=") || v.starts_with("TIDE_WORLD=") ||
              v.starts_with("TIDE_LOCAL_RANK=") || v.starts_with("TIDE_RENDEZVOUS=")) {
            continue;
          }
          env_text.emplace_back(v);
        }
        env_text.push_back("TIDE_RANK=" + std::to_string(r));
        env_text.push_back("TIDE_WORLD=" + std::to_string(world));
        env_text.push_back("TIDE_LOCAL_RANK=" + std::to_string(r));
        env_text.push_back("TIDE_RENDEZVOUS=" + dir);
        return spawn_child("/proc/self/exe", argv_text, env_text,
                           "spawn: cannot start rank " + std::to_string(r));
      },
      policy);
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  for (const ChildExit& e : exits) {
    if (exit_code(e.wait_status) != 0) return 1;
  }
  return 0;
}

std::vector<std::byte> exchange_unique_id(const LaunchedRank& me, std::vector<std::byte> id,
                                          std::chrono::milliseconds timeout) {
  if (me.world == 1) return id;
  if (me.rendezvous.empty()) {
    throw InvalidArgument(
        "launcher (" + me.launcher +
        "): no rendezvous directory for the NCCL unique id; set TIDE_RENDEZVOUS to a fresh "
        "directory that every rank can read");
  }
  const std::filesystem::path dir(me.rendezvous);
  const std::filesystem::path file = dir / kIdFile;
  if (me.rank == 0) {
    std::filesystem::create_directories(dir);
    std::filesystem::remove(file);
    const std::filesystem::path tmp = dir / (std::string(kIdFile) + ".tmp");
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out.write(reinterpret_cast<const char*>(id.data()), static_cast<std::streamsize>(id.size()));
      if (!out) throw std::runtime_error("rendezvous: cannot write " + tmp.string());
    }
    std::filesystem::rename(tmp, file);
    return id;
  }
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    std::ifstream in(file, std::ios::binary);
    if (in) {
      std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
      if (!bytes.empty()) {
        std::vector<std::byte> out(bytes.size());
        std::memcpy(out.data(), bytes.data(), bytes.size());
        return out;
      }
    }
    if (Clock::now() > deadline) {
      throw std::runtime_error(
          "tide: rank " + std::to_string(me.rank) + ": rank 0's NCCL unique id (" + file.string() +
          ") did not appear within " + std::to_string(timeout.count()) + " ms");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace tide::fabric
