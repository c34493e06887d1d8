#include "base/status.h"

#include <cstdio>
#include <cstdlib>

namespace power {

void check_failed(const char* expr, const char* file, int line, const char* msg) {
  std::fprintf(stderr, "power: internal check failed: %s at %s:%d%s%s\n", expr, file, line,
               msg ? ": " : "", msg ? msg : "");
  std::abort();
}

}  // namespace power
