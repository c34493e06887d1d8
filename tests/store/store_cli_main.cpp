// A `power` binary with only the store commands, so the store tests can run the real CLI
// code (src/cli/cmd_store.cpp) in separate processes: concurrent pulls, kill -9, exit codes.
#include <CLI/CLI.hpp>

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
void add_store_commands(CLI::App& app);
}  // namespace power::cli

int main(int argc, char** argv) {
  CLI::App app{"power (store commands only, for tests)"};
  app.require_subcommand(1);
  power::cli::add_store_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return power::cli::exit_code();
}
