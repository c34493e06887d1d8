// Environment switches: POWER_REPACK, POWER_HUGEPAGES and the like, on unless turned off.
#pragma once

#include <cstdlib>
#include <string_view>

namespace power {

// False when the environment sets `name` to 0, off, false or no; true otherwise (unset too).
// Read at each call, so tests and A/B runs may change it between loads.
inline bool env_switch_on(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return true;
  const std::string_view s(v);
  return !(s == "0" || s == "off" || s == "false" || s == "no");
}

}  // namespace power
