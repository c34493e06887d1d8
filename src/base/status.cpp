#include "base/status.h"

#include <cstdio>
#include <cstdlib>

namespace power {

std::string_view status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "ok";
    case StatusCode::kInvalidArgument:
      return "invalid_argument";
    case StatusCode::kNotFound:
      return "not_found";
    case StatusCode::kAlreadyExists:
      return "already_exists";
    case StatusCode::kCorrupt:
      return "corrupt";
    case StatusCode::kUnsupported:
      return "unsupported";
    case StatusCode::kOutOfRange:
      return "out_of_range";
    case StatusCode::kIo:
      return "io_error";
    case StatusCode::kIntegrity:
      return "integrity";
    case StatusCode::kResourceExhausted:
      return "resource_exhausted";
    case StatusCode::kDoesNotFit:
      return "does_not_fit";
    case StatusCode::kQueueFull:
      return "queue_full";
    case StatusCode::kDeadlineExceeded:
      return "deadline_exceeded";
    case StatusCode::kCancelled:
      return "cancelled";
    case StatusCode::kInternal:
      return "internal";
    case StatusCode::kPolicyRefused:
      return "policy_refused";
  }
  return "unknown";
}

void Status::append_context(std::string_view key, const std::string& value) {
  if (!context_.empty()) context_ += ", ";
  context_.append(key);
  context_ += '=';
  context_ += value;
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  std::string s(status_code_name(code_));
  s += ": ";
  s += message_;
  if (!context_.empty()) {
    s += " (";
    s += context_;
    s += ')';
  }
  return s;
}

void check_failed(const char* expr, const char* file, int line, const char* msg) {
  std::fprintf(stderr, "power: internal check failed: %s at %s:%d%s%s\n", expr, file, line,
               msg ? ": " : "", msg ? msg : "");
  std::abort();
}

}  // namespace power
