// Status and Result<T> (include/power/status.h) plus the internal-invariant checks.
//
// Contract: functions that read files, network bodies, configuration or anything a user
// controls return Status or Result<T> and never abort. Internal invariants use POWER_CHECK,
// which aborts: a failed check is a bug in Power, never a consequence of input.
#pragma once

#include "power/status.h"  // IWYU pragma: export

namespace power {

[[noreturn]] void check_failed(const char* expr, const char* file, int line, const char* msg);

}  // namespace power

// Internal invariant: aborts with file/line. Never use for input validation.
#define POWER_CHECK(cond)                                                   \
  do {                                                                      \
    if (!(cond)) ::power::check_failed(#cond, __FILE__, __LINE__, nullptr); \
  } while (0)
#define POWER_CHECK_MSG(cond, msg)                                        \
  do {                                                                    \
    if (!(cond)) ::power::check_failed(#cond, __FILE__, __LINE__, (msg)); \
  } while (0)
