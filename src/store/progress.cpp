#include "store/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace power::store {
namespace {

int terminal_columns(std::FILE* out) {
  struct winsize ws {};
  if (::ioctl(::fileno(out), TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 40) return ws.ws_col;
  return 80;
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--";
  auto s = static_cast<uint64_t>(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

class BarPrinter {
 public:
  explicit BarPrinter(std::FILE* out) : out_(out) {}

  void operator()(const PullProgress& e) {
    if (e.status == "downloading") {
      draw(e);
      return;
    }
    end_bar();
    std::string line = e.status;
    if (!e.file.empty()) line += " " + e.file;
    if (!e.digest.empty() && e.status != "success") line += " " + e.digest.substr(0, 19);
    if (e.status == "exists" || e.status == "committed") {
      line += " (" + format_bytes(e.completed_bytes) + ")";
    }
    if (!e.message.empty()) line += ": " + e.message;
    std::fprintf(out_, "%s\n", line.c_str());
    std::fflush(out_);
  }

 private:
  void draw(const PullProgress& e) {
    const int cols = terminal_columns(out_);
    std::string right = format_bytes(e.completed_bytes);
    if (e.total_bytes > 0) right += "/" + format_bytes(e.total_bytes);
    right += fmt::format("  {}/s", format_bytes(static_cast<uint64_t>(e.rate_bytes_per_s)));
    if (e.total_bytes > 0 && e.rate_bytes_per_s > 0) {
      double remaining =
          static_cast<double>(e.total_bytes - std::min(e.total_bytes, e.completed_bytes));
      right += "  ETA " + format_duration(remaining / e.rate_bytes_per_s);
    }
    std::string left = e.file.substr(0, 24);
    std::string pct;
    if (e.total_bytes > 0) {
      pct = fmt::format("{:3}%", std::min<uint64_t>(100, e.completed_bytes * 100 / e.total_bytes));
    }
    int bar_width = cols - static_cast<int>(left.size() + pct.size() + right.size()) - 8;
    std::string bar;
    if (bar_width >= 10 && e.total_bytes > 0) {
      int filled =
          static_cast<int>(static_cast<double>(bar_width) *
                           static_cast<double>(std::min(e.completed_bytes, e.total_bytes)) /
                           static_cast<double>(e.total_bytes));
      bar = " [" + std::string(filled, '=') + std::string(bar_width - filled, ' ') + "]";
    }
    std::string line = fmt::format("{} {}{} {}", left, pct, bar, right);
    if (static_cast<int>(line.size()) > cols - 1) line.resize(cols - 1);
    std::fprintf(out_, "\r%s\x1b[K", line.c_str());
    std::fflush(out_);
    bar_open_ = true;
  }

  void end_bar() {
    if (bar_open_) std::fputc('\n', out_);
    bar_open_ = false;
  }

  std::FILE* out_;
  bool bar_open_ = false;
};

}  // namespace

std::string format_bytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double v = static_cast<double>(bytes) / 1024.0;
  int unit = 0;
  while (v >= 1024.0 && unit < 3) {
    v /= 1024.0;
    ++unit;
  }
  return fmt::format("{:.1f} {}", v, kUnits[unit]);
}

std::string progress_to_json(const PullProgress& e) {
  nlohmann::ordered_json j;
  j["status"] = e.status;
  if (!e.model.empty()) j["model"] = e.model;
  if (!e.file.empty()) j["file"] = e.file;
  if (!e.digest.empty()) j["digest"] = e.digest;
  if (!e.source.empty()) j["source"] = e.source;
  if (e.status == "downloading" || e.completed_bytes > 0 || e.total_bytes > 0) {
    j["completed"] = e.completed_bytes;
    if (e.total_bytes > 0) j["total"] = e.total_bytes;
  }
  if (e.status == "downloading") j["rate_bytes_per_s"] = std::llround(e.rate_bytes_per_s);
  if (!e.message.empty()) j[e.status == "error" ? "error" : "message"] = e.message;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

ProgressCallback make_progress_printer(ProgressStyle style, std::FILE* out) {
  if (style == ProgressStyle::kAuto) {
    style = ::isatty(::fileno(out)) ? ProgressStyle::kBar : ProgressStyle::kJsonLines;
  }
  switch (style) {
    case ProgressStyle::kNone:
      return [](const PullProgress&) {};
    case ProgressStyle::kBar: {
      auto printer = std::make_shared<BarPrinter>(out);
      return [printer](const PullProgress& e) { (*printer)(e); };
    }
    case ProgressStyle::kJsonLines:
    case ProgressStyle::kAuto:
      break;
  }
  return [out](const PullProgress& e) {
    std::string line = progress_to_json(e) + "\n";
    std::fwrite(line.data(), 1, line.size(), out);
    std::fflush(out);
  };
}

}  // namespace power::store
