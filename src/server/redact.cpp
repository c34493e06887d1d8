#include "server/redact.h"

#include <algorithm>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace power::server {

namespace {

using json = nlohmann::json;

constexpr size_t kRun = 12;   // a shared run this long is request text, not wording of ours
constexpr size_t kShort = 4;  // shorter request strings are redacted only where quoted
constexpr char kMark[] = "[redacted]";

// The request's own text: every string value (prompts, message contents, tool arguments and
// results, inputs, names), and the keys of the maps whose keys are the client's data
// (logit_bias, metadata). Other keys are the API's field names: errors name them on purpose.
void collect(const json& j, bool keys_are_data, std::vector<std::string>* out) {
  if (j.is_string()) {
    out->push_back(j.get<std::string>());
  } else if (j.is_object()) {
    for (const auto& [k, v] : j.items()) {
      if (keys_are_data) out->push_back(k);
      collect(v, k == "logit_bias" || k == "metadata", out);
    }
  } else if (j.is_array()) {
    for (const auto& v : j) collect(v, false, out);
  }
}

}  // namespace

std::string redact_message(std::string_view message, std::string_view request_body) {
  if (message.empty() || request_body.empty()) return std::string(message);
  std::vector<std::string> texts;
  json body = json::parse(request_body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) {
    texts.emplace_back(request_body);
  } else {
    collect(body, false, &texts);
  }
  std::vector<bool> hide(message.size(), false);
  // Long runs: every kRun-byte window of the message that occurs in some request string.
  if (message.size() >= kRun) {
    std::unordered_set<std::string_view> windows;
    for (size_t i = 0; i + kRun <= message.size(); ++i) windows.insert(message.substr(i, kRun));
    std::unordered_set<std::string_view> found;
    for (const std::string& t : texts) {
      for (size_t i = 0; i + kRun <= t.size(); ++i) {
        std::string_view w(t.data() + i, kRun);
        if (windows.count(w)) found.insert(w);
      }
    }
    for (size_t i = 0; i + kRun <= message.size(); ++i) {
      if (found.count(message.substr(i, kRun))) {
        std::fill(hide.begin() + static_cast<long>(i), hide.begin() + static_cast<long>(i + kRun),
                  true);
      }
    }
  }
  // Short strings: where the message quotes them whole.
  for (const std::string& t : texts) {
    if (t.size() < kShort || t.size() >= kRun + 2) continue;
    for (char q : {'\'', '"'}) {
      const std::string quoted = q + t + q;
      for (size_t at = message.find(quoted); at != std::string_view::npos;
           at = message.find(quoted, at + 1)) {
        std::fill(hide.begin() + static_cast<long>(at + 1),
                  hide.begin() + static_cast<long>(at + 1 + t.size()), true);
      }
    }
  }
  std::string out;
  for (size_t i = 0; i < message.size();) {
    if (!hide[i]) {
      out += message[i++];
      continue;
    }
    out += kMark;
    while (i < message.size() && hide[i]) ++i;
  }
  return out;
}

std::string redact_error_body(const std::string& response_body, std::string_view request_body) {
  json j = json::parse(response_body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("error")) return response_body;
  json& e = j["error"];
  if (e.is_string()) {
    e = redact_message(e.get<std::string>(), request_body);
  } else if (e.is_object() && e.contains("message") && e["message"].is_string()) {
    e["message"] = redact_message(e["message"].get<std::string>(), request_body);
    // `param` is a field path, which can hold a client's map key (logit_bias.<key>).
    if (e.contains("param") && e["param"].is_string()) {
      e["param"] = redact_message(e["param"].get<std::string>(), request_body);
    }
  } else {
    return response_body;
  }
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string redacted_size(size_t bytes) {
  return fmt::format("[redacted, {} bytes]", bytes);
}

}  // namespace power::server
