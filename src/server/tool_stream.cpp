#include "server/tool_stream.h"

#include <algorithm>

namespace power::server {

namespace {

bool only_space(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; });
}

std::string_view trim(std::string_view s) {
  const char* ws = " \n\r\t";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

}  // namespace

std::string ToolStreamFilter::push(std::string_view text) {
  held_.append(text);
  if (holding_) return {};
  // A reply that starts with a JSON object or array may be a bare call.
  if (only_space(sent_)) {
    const size_t first = held_.find_first_not_of(" \n\r\t");
    if (first != std::string::npos && (held_[first] == '{' || held_[first] == '[')) {
      holding_ = true;
      return {};
    }
  }
  // The earliest complete opener: send what is before it, hold the rest to the end.
  size_t cut = std::string::npos;
  for (std::string_view op : kOpeners) cut = std::min(cut, held_.find(op));
  if (cut != std::string::npos) {
    holding_ = true;
  } else {
    // The earliest suffix that is a proper prefix of an opener stays held.
    cut = held_.size();
    for (size_t i = held_.size(); i-- > 0 && held_.size() - i < 64;) {
      std::string_view tail = std::string_view(held_).substr(i);
      for (std::string_view op : kOpeners) {
        if (tail.size() < op.size() && op.starts_with(tail)) cut = i;
      }
    }
  }
  std::string out = held_.substr(0, cut);
  held_.erase(0, cut);
  sent_ += out;
  return out;
}

std::string ToolStreamFilter::finish(const Completion& c) {
  if (c.tool_calls.empty()) {  // no call after all: everything held is content
    std::string out;
    out.swap(held_);
    sent_ += out;
    return out;
  }
  // Calls were parsed: Completion::text is the content outside them (trimmed). Send the part
  // of it that is not out yet; if what was sent does not line up with it (it cannot when the
  // filter worked as designed), send nothing rather than repeat text.
  std::string_view content = c.text, already = trim(sent_);
  held_.clear();
  if (!content.starts_with(already)) return {};
  std::string_view rest = content.substr(already.size());
  if (only_space(rest)) return {};
  std::string out(already.empty() ? trim(rest) : rest);
  sent_ += out;
  return out;
}

}  // namespace power::server
