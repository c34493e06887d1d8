// Logging to stderr with levels. The level comes from POWER_LOG (error, warn, info, debug;
// default warn) or set_log_level(). Thread-safe: one line is written with one fwrite.
#pragma once

#include <string_view>

#include <fmt/format.h>

namespace power {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

void set_log_level(LogLevel level);
LogLevel log_level();
void log_write(LogLevel level, std::string_view message);

template <typename... Args>
void log(LogLevel level, fmt::format_string<Args...> f, Args&&... args) {
  if (level > log_level()) return;
  log_write(level, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace power

#define POWER_LOG_ERROR(...) ::power::log(::power::LogLevel::kError, __VA_ARGS__)
#define POWER_LOG_WARN(...) ::power::log(::power::LogLevel::kWarn, __VA_ARGS__)
#define POWER_LOG_INFO(...) ::power::log(::power::LogLevel::kInfo, __VA_ARGS__)
#define POWER_LOG_DEBUG(...) ::power::log(::power::LogLevel::kDebug, __VA_ARGS__)
