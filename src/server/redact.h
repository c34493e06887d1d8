// --redact-logs: request and response text kept out of log lines and error messages.
//
// With the option on, the server's debug log of each exchange names sizes instead of bodies,
// and an error answer's message is scrubbed of the request's own text before it is sent (or
// logged by a proxy): every run of 12 or more bytes that also occurs in a string of the
// request, and every quoted occurrence ('…' or "…") of a shorter request string of 4 or more
// bytes, becomes "[redacted]". Field names, limits and codes stay, so errors remain useful.
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

namespace power::server {

// `message` with the parts that repeat text of `request_body` (JSON: its string values and the
// keys of logit_bias / metadata; anything else: the raw bytes) replaced by "[redacted]".
std::string redact_message(std::string_view message, std::string_view request_body);

// An error answer (OpenAI's {"error": {"message": …}} or Ollama's {"error": "…"}) with its
// message scrubbed by redact_message; other bodies come back unchanged.
std::string redact_error_body(const std::string& response_body, std::string_view request_body);

// What a log line says instead of a body: "[redacted, N bytes]".
std::string redacted_size(size_t bytes);

}  // namespace power::server
