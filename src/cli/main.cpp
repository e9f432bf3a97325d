// `tide`: the command-line front end of TIDE's planning layer. See docs/cli.md.
#include <CLI/CLI.hpp>
#include <exception>
#include <iostream>

#include "commands.hpp"
#include "tide/core/env.hpp"
#include "tide/core/error.hpp"

int main(int argc, char** argv) {
  CLI::App app{"TIDE: layout-aware, zero-copy collectives for PyTorch FSDP2 (planning tools)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "tide 0.1.0");
  app.add_flag_callback(
         "--help-env",
         [] {
           std::cout << "TIDE's environment variables (NOTE [environment knobs]):\n";
           for (const tide::env::EnvKnob& k : tide::env::kEnvKnobs) {
             std::cout << "  " << k.name << "\n      default: " << k.default_value << "\n      "
                       << k.meaning << '\n';
           }
           throw CLI::Success();
         },
         "Print every TIDE_* environment variable (name, default, meaning) and exit")
      ->trigger_on_parse();
  tide::cli::add_plan_command(app);
  tide::cli::add_check_plans_command(app);
  tide::cli::add_memory_command(app);
  tide::cli::add_solve_command(app);
  tide::cli::add_simulate_command(app);
  tide::cli::add_calibrate_command(app);
  tide::cli::add_check_runtime_command(app);

  // Every error is one line on stderr. Bad or unsupported input (or output that cannot be
  // written) exits with status 2; a failed check (CheckFailed) or a bug in TIDE with 1.
  auto fail = [](const std::string& kind, const std::string& what, int status = 2) {
    std::cerr << "tide: " << kind << what << '\n';
    return status;
  };
  // Output that cannot be written (a full disk, /dev/full, a closed pipe) fails a command
  // that otherwise succeeded; a failed command has already said why.
  auto flushed = [&](int status) {
    std::cout.flush();
    if (status == 0 && !std::cout) {
      return fail("", "cannot write the output to stdout (disk full or pipe closed?)");
    }
    return status;
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help, --version
  } catch (const CLI::ParseError& e) {
    return fail("", std::string(e.what()) + " (run with --help for usage)");
  } catch (const tide::InvalidArgument& e) {
    return flushed(fail("", e.what()));
  } catch (const tide::Unsupported& e) {
    return flushed(fail("unsupported: ", e.what()));
  } catch (const tide::cli::CheckFailed& e) {
    return flushed(fail("check failed: ", e.what(), 1));
  } catch (const std::bad_alloc&) {
    return flushed(fail("", "out of memory (use smaller shapes, fewer nodes or --timing-only)"));
  } catch (const std::exception& e) {
    return flushed(fail("internal error (please report): ", e.what(), 1));
  }
  return flushed(0);
}
