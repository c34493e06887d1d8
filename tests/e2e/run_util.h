// Runs the `power` binary built in this tree and captures its exit code, stdout and stderr.
#pragma once

#include <string>
#include <vector>

namespace power::testing {

struct RunResult {
  int exit_code = -1;  // -1 when killed by a signal
  std::string out;
  std::string err;
  long max_rss_kb = 0;  // peak resident set of the child (getrusage ru_maxrss)
};

std::string power_binary();
// `prefix`: a program (absolute path) and its arguments that run the binary (e.g. setpriv).
RunResult run_power(const std::vector<std::string>& args,
                    const std::vector<std::string>& prefix = {});

// A file's bytes ("" when it cannot be read).
std::string read_file(const std::string& path);
// A file of ../shared/models/stories260K.
std::string stories(const std::string& name);

}  // namespace power::testing
