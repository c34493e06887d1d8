// Environment switches: POWER_REPACK, POWER_HUGEPAGES and the like, on unless turned off.
#pragma once

#include <cstdlib>
#include <string>
#include <string_view>

namespace power {

inline bool env_value_is_off(std::string_view s) {
  return s == "0" || s == "off" || s == "false" || s == "no";
}

// False when the environment sets `name` to 0, off, false or no; true otherwise (unset too).
// Read at each call, so tests and A/B runs may change it between loads.
inline bool env_switch_on(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr || !env_value_is_off(v);
}

// An opt-in switch: true when the environment sets `name` to anything but "", 0, off, false or
// no; false when it is unset. Read at each call.
inline bool env_switch_set_on(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' && !env_value_is_off(v);
}

// Power's home directory: $POWER_HOME, else ~/.power (./.power without $HOME). The store,
// the receipt key (keys/) and tensor manifests (tensors/) live under it.
inline std::string power_home() {
  if (const char* env = std::getenv("POWER_HOME"); env != nullptr && *env != '\0') return env;
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr && *home != '\0' ? home : ".") + "/.power";
}

}  // namespace power
