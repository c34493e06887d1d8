// Small helpers shared by the CLI commands: printing a Status as an error and parsing lists.
#pragma once

#include <cstdio>
#include <string>

#include "base/status.h"

namespace CLI {
class App;
}

namespace power::cli {

// Prints "power: error: <status>" to stderr and sets exit code 1.
void report_error(const Status& status);

// What `-m` names: an existing file is used as it is; otherwise (when the store is built in)
// a model name in the artifact store ($POWER_HOME), whose manifest is read and whose blob is
// checked (it exists with the recorded size; the hash was verified when it was committed)
// before its path is returned.
Result<std::string> resolve_model_path(const std::string& file_or_name);

// Adds `--model-lib FILE` (repeatable) to a command: model plugins (power/sdk/plugin.h) loaded
// before the command runs, so the architectures they register can be used. A library that
// cannot be loaded is reported and the command does not run (exit code 1).
void add_model_lib_option(CLI::App* cmd);

// Adds `--mirror-dir DIR` and `--mirror-bytes BYTES` (docs/RESIDENCY.md, "Mirrors").
void add_mirror_options(CLI::App* cmd, std::string* dir, std::string* bytes);

// Adds `--weights-cache BYTES` and `--weights-cache-policy lfru|lru` (docs/RESIDENCY.md, "The
// weights cache").
void add_weights_cache_options(CLI::App* cmd, std::string* bytes, std::string* policy);

}  // namespace power::cli
