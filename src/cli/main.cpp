// `power`: the command-line front end. Every subcommand group registers here, in one place.
#include <cstdio>

#include <CLI/CLI.hpp>

#include "cli/commands.h"

namespace power::cli {
namespace {
int g_exit_code = 0;
}  // namespace

void set_exit_code(int code) {
  g_exit_code = code;
}
int exit_code() {
  return g_exit_code;
}

}  // namespace power::cli

int main(int argc, char** argv) {
  CLI::App app{"Power: you define the model, Power runs it."};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("power ") + POWER_VERSION);
  power::cli::add_inspect_commands(app);
  power::cli::add_quantize_commands(app);
  power::cli::add_run_commands(app);
  power::cli::add_text_commands(app);
  power::cli::add_template_commands(app);
  power::cli::add_bench_commands(app);
  power::cli::add_dev_commands(app);
  power::cli::add_onnx_commands(app);
  power::cli::add_receipt_commands(app);
  power::cli::add_secure_commands(app);
  power::cli::add_attest_commands(app);
#if POWER_WITH_STORE
  power::cli::add_store_commands(app);
#endif
  power::cli::add_serve_commands(app);
  power::cli::add_embed_commands(app);
  power::cli::add_validate_commands(app);
  power::cli::add_residency_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return power::cli::exit_code();
}
