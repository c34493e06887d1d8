#include "cli/cli_util.h"

#include "cli/commands.h"

namespace power::cli {

void report_error(const Status& status) {
  std::fprintf(stderr, "power: error: %s\n", status.to_string().c_str());
  set_exit_code(1);
}

}  // namespace power::cli
