// The `rlx` command. Subcommands register themselves (cmd_*.cpp); main only
// parses and turns every failure into a message and an exit code:
// an rlx::Error prints "rlx: error: <message>" and exits 1, never a crash.
#include <exception>
#include <iostream>

#include "cli/common.h"
#include "rlx/core/env.h"
#include "rlx/core/error.h"

#ifndef RLX_VERSION
#error "RLX_VERSION must be defined by the build (cli/CMakeLists.txt)"
#endif

int main(int argc, char** argv) {
  CLI::App app{"rlx: compile and run tensor graphs, sentence embeddings and GGUF LLMs on CUDA GPUs or the CPU.",
               "rlx"};
  app.set_version_flag("--version", "rlx " RLX_VERSION);
  app.require_subcommand(0, 1);
  bool markdown = false;
  // Defined before --help-env: flag callbacks run in definition order.
  app.add_flag("--markdown", markdown, "With --help-env: print docs/env.md")->group("");
  app.add_flag_callback(
      "--help-env",
      [&markdown] {
        std::cout << (markdown ? rlx::cli::env_markdown() : rlx::env_help_text());
        throw CLI::Success();
      },
      "Print every RLX_* environment variable with its type, default and meaning");

  rlx::cli::add_devices_command(app);
  rlx::cli::add_embed_command(app);
  rlx::cli::add_generate_command(app);
  rlx::cli::add_inspect_command(app);
  rlx::cli::add_dequant_command(app);
  rlx::cli::add_calibrate_command(app);
  rlx::cli::add_bench_command(app);
  rlx::cli::add_serve_command(app);

  try {
    app.parse(argc, argv);
    if (app.get_subcommands().empty()) {
      std::cerr << app.help();
      return rlx::cli::kExitError;
    }
    return 0;
  } catch (const CLI::ParseError& e) {
    return app.exit(e);  // --help, --version, bad options, not-available (RuntimeError)
  } catch (const rlx::Error& e) {
    std::cout.flush();
    std::cerr << "rlx: error: " << e.what() << "\n";
  } catch (const std::exception& e) {
    std::cout.flush();
    std::cerr << "rlx: error: " << e.what() << "\n";
  }
  return rlx::cli::kExitError;
}
