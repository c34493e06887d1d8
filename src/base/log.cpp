#include "base/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace power {
namespace {

LogLevel level_from_env() {
  const char* v = std::getenv("POWER_LOG");
  if (v == nullptr) return LogLevel::kWarn;
  if (std::strcmp(v, "error") == 0) return LogLevel::kError;
  if (std::strcmp(v, "info") == 0) return LogLevel::kInfo;
  if (std::strcmp(v, "debug") == 0) return LogLevel::kDebug;
  return LogLevel::kWarn;
}

std::atomic<int>& level_storage() {
  static std::atomic<int> level{static_cast<int>(level_from_env())};
  return level;
}

}  // namespace

void set_log_level(LogLevel level) {
  level_storage().store(static_cast<int>(level));
}
LogLevel log_level() {
  return static_cast<LogLevel>(level_storage().load());
}

void log_write(LogLevel level, std::string_view message) {
  static constexpr const char* kNames[] = {"error", "warn", "info", "debug"};
  std::string line = fmt::format("power[{}]: {}\n", kNames[static_cast<int>(level)], message);
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace power
