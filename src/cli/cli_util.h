// Small helpers shared by the CLI commands: printing a Status as an error and parsing lists.
#pragma once

#include <cstdio>
#include <string>

#include "base/status.h"

namespace power::cli {

// Prints "power: error: <status>" to stderr and sets exit code 1.
void report_error(const Status& status);

}  // namespace power::cli
