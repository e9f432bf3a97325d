// The `tide` subcommands. Each registers its options on the app and sets a callback that
// prints a table (or JSON with --json) and throws tide::InvalidArgument / tide::Unsupported
// on bad input; main() turns those into a one-line error and exit status 2.
#pragma once

#include <CLI/CLI.hpp>
#include <stdexcept>

namespace tide::cli {

// A check the user asked for failed: a simulation's output or races, or an injected fault
// that showed other than expected. main() prints it as one line and exits with status 1.
class CheckFailed : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

void add_plan_command(CLI::App& app);
void add_check_plans_command(CLI::App& app);
void add_memory_command(CLI::App& app);
void add_solve_command(CLI::App& app);
void add_simulate_command(CLI::App& app);       // needs the reference executor
void add_calibrate_command(CLI::App& app);      // measures on a GPU; refuses without one
void add_check_runtime_command(CLI::App& app);  // the runtime across processes

}  // namespace tide::cli
