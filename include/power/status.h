// Power's public error type: Status and Result<T>, and the two macros that pass them on.
//
// Contract: every fallible call of the embedded API and of the model SDK returns a Status or
// Result<T> and never aborts or throws. A Status carries a code, a human message and optional
// context (tensor name, byte offset, expected vs. actual) appended to the message when printed.
// The codes a runtime caller meets: kInvalidArgument (bad request), kNotFound (model file,
// tensor, key), kDoesNotFit (the request can never fit the device budget or the context; the
// numbers are in context()), kQueueFull (the waiting queue is at its bound), kDeadlineExceeded
// (it did not fit before its deadline), kCancelled, kCorrupt / kUnsupported (the model file).
// Header-only (apart from fmt, which formats context values), so a model plugin built against
// the installed SDK needs no Power library to link.
// Thread-safety: values; no shared state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace power {

enum class StatusCode : uint8_t {
  kOk = 0,
  kInvalidArgument,  // the caller passed something unusable
  kNotFound,         // a named thing (file, tensor, key, model) does not exist
  kAlreadyExists,
  kCorrupt,            // bytes that do not parse: truncated or malformed file
  kUnsupported,        // well-formed but not something Power implements
  kOutOfRange,         // an index, size or offset beyond its bound
  kIo,                 // the operating system refused (open, read, write, fsync, rename)
  kIntegrity,          // a hash or signature does not match
  kResourceExhausted,  // a budget or cap would be exceeded
  kDoesNotFit,         // admission: can never fit on this device
  kQueueFull,
  kDeadlineExceeded,
  kCancelled,
  kInternal,
  kPolicyRefused,  // a caller's acceptance policy is not met by the model or configuration
};

inline std::string_view status_code_name(StatusCode code) {
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

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  const std::string& context() const { return context_; }

  // Adds "key=value" context, e.g. .with("tensor", name).with("offset", 1234).
  template <typename V>
  Status with(std::string_view key, const V& value) && {
    append_context(key, fmt::format("{}", value));
    return std::move(*this);
  }
  template <typename V>
  Status& with(std::string_view key, const V& value) & {
    append_context(key, fmt::format("{}", value));
    return *this;
  }

  // "corrupt: tensor data out of bounds (tensor=blk.0.attn_q.weight, offset=1234)"
  std::string to_string() const {
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

 private:
  void append_context(std::string_view key, const std::string& value) {
    if (!context_.empty()) context_ += ", ";
    context_.append(key);
    context_ += '=';
    context_ += value;
  }

  StatusCode code_ = StatusCode::kOk;
  std::string message_;
  std::string context_;
};

template <typename... Args>
Status make_error(StatusCode code, fmt::format_string<Args...> f, Args&&... args) {
  return Status(code, fmt::format(f, std::forward<Args>(args)...));
}

// Result<T>: a value or a non-ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    if (std::get<Status>(v_).ok()) {
      v_ = Status(StatusCode::kInternal, "Result constructed from an ok Status");
    }
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  Status take_status() && { return ok() ? Status() : std::move(std::get<Status>(v_)); }

  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::move(std::get<T>(v_)); }
  T* operator->() { return &std::get<T>(v_); }
  const T* operator->() const { return &std::get<T>(v_); }
  T& operator*() & { return std::get<T>(v_); }
  const T& operator*() const& { return std::get<T>(v_); }
  T&& operator*() && { return std::move(std::get<T>(v_)); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace power

#define POWER_CONCAT_INNER(a, b) a##b
#define POWER_CONCAT(a, b) POWER_CONCAT_INNER(a, b)

// Returns early with the Status if it is not ok.
#define POWER_RETURN_IF_ERROR(expr)        \
  do {                                     \
    ::power::Status _power_st = (expr);    \
    if (!_power_st.ok()) return _power_st; \
  } while (0)

// POWER_ASSIGN_OR_RETURN(auto x, f()); returns the Status of f() if it failed.
#define POWER_ASSIGN_OR_RETURN(lhs, expr) \
  POWER_ASSIGN_OR_RETURN_IMPL(POWER_CONCAT(_power_res_, __LINE__), lhs, expr)
#define POWER_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr)   \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return std::move(tmp).take_status(); \
  lhs = std::move(tmp).value()
