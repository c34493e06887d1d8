// Acceptance policy: parsing (strict) and checking.
#include "receipt/policy.h"

#include <algorithm>
#include <charconv>

#include "base/sha256.h"
#include "receipt/canonical_json.h"

namespace power {

Result<AcceptancePolicy> parse_acceptance_policy(std::string_view json_text) {
  auto parsed = receipt::parse_json_strict(json_text);
  if (!parsed.ok()) {
    return Status(StatusCode::kInvalidArgument, "the policy is not valid JSON")
        .with("error", parsed.status().message());
  }
  const nlohmann::json& j = *parsed;
  if (!j.is_object()) return Status(StatusCode::kInvalidArgument, "the policy must be an object");
  AcceptancePolicy p;
  auto string_list = [](const nlohmann::json& v, const std::string& name,
                        std::vector<std::string>& out) -> Status {
    if (!v.is_array()) {
      return Status(StatusCode::kInvalidArgument, "policy member must be an array of strings")
          .with("member", name);
    }
    for (const auto& item : v) {
      if (!item.is_string()) {
        return Status(StatusCode::kInvalidArgument, "policy member must be an array of strings")
            .with("member", name);
      }
      out.push_back(item.get<std::string>());
    }
    return Status();
  };
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const nlohmann::json& v = it.value();
    if (k == "allowed_model_sha256") {
      POWER_RETURN_IF_ERROR(string_list(v, k, p.allowed_model_sha256));
      for (std::string& h : p.allowed_model_sha256) {
        auto d = parse_sha256_hex(h);
        if (!d.ok()) {
          return Status(StatusCode::kInvalidArgument,
                        "allowed_model_sha256 entries must be 64 hex digits")
              .with("value", h);
        }
        h = to_hex(*d);  // lowercase
      }
    } else if (k == "allowed_devices") {
      POWER_RETURN_IF_ERROR(string_list(v, k, p.allowed_devices));
    } else if (k == "min_power_version") {
      if (!v.is_string() || !receipt::compare_versions(v.get<std::string>(), "0").ok()) {
        return Status(StatusCode::kInvalidArgument,
                      "min_power_version must be a dotted version string such as \"0.1.0\"");
      }
      p.min_power_version = v.get<std::string>();
    } else if (k == "require_signature" || k == "require_deterministic") {
      if (!v.is_boolean()) {
        return Status(StatusCode::kInvalidArgument, "policy member must be true or false")
            .with("member", k);
      }
      (k == "require_signature" ? p.require_signature : p.require_deterministic) = v.get<bool>();
    } else {
      return Status(StatusCode::kInvalidArgument, "unknown policy member").with("member", k);
    }
  }
  return p;
}

namespace receipt {

Result<int> compare_versions(std::string_view a, std::string_view b) {
  auto parts = [](std::string_view s) -> Result<std::vector<uint64_t>> {
    std::vector<uint64_t> out;
    size_t start = 0;
    while (true) {
      const size_t dot = s.find('.', start);
      const std::string_view part =
          s.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
      uint64_t v = 0;
      auto [p, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
      if (part.empty() || ec != std::errc() || p != part.data() + part.size()) {
        return Status(StatusCode::kInvalidArgument, "not a dotted numeric version")
            .with("value", s);
      }
      out.push_back(v);
      if (dot == std::string_view::npos) break;
      start = dot + 1;
    }
    return out;
  };
  POWER_ASSIGN_OR_RETURN(std::vector<uint64_t> x, parts(a));
  POWER_ASSIGN_OR_RETURN(std::vector<uint64_t> y, parts(b));
  const size_t n = std::max(x.size(), y.size());
  x.resize(n, 0);
  y.resize(n, 0);
  if (x < y) return -1;
  return x == y ? 0 : 1;
}

Status check_policy(const AcceptancePolicy& p, const ExecutionFacts& f) {
  std::vector<std::string> unmet;
  if (!p.allowed_model_sha256.empty() &&
      std::find(p.allowed_model_sha256.begin(), p.allowed_model_sha256.end(), f.model_sha256) ==
          p.allowed_model_sha256.end()) {
    unmet.push_back("model sha256 " + f.model_sha256 + " is not in allowed_model_sha256");
  }
  if (!p.min_power_version.empty()) {
    auto c = compare_versions(f.power_version, p.min_power_version);
    if (!c.ok() || *c < 0) {
      unmet.push_back("Power " + f.power_version + " is older than min_power_version " +
                      p.min_power_version);
    }
  }
  if (p.require_signature && !f.signed_receipt) {
    unmet.push_back("require_signature: no signed receipt can be produced");
  }
  if (!p.allowed_devices.empty()) {
    const std::string with_isa = f.device_kind + ":" + f.kernel_isa;
    bool ok = false;
    for (const std::string& d : p.allowed_devices) ok = ok || d == f.device_kind || d == with_isa;
    if (!ok) unmet.push_back("device " + with_isa + " is not in allowed_devices");
  }
  if (p.require_deterministic && !f.nondeterminism.empty()) {
    std::string why;
    for (const std::string& r : f.nondeterminism) why += (why.empty() ? "" : "; ") + r;
    unmet.push_back("require_deterministic: " + why);
  }
  if (unmet.empty()) return Status();
  std::string msg = "refused by the caller's policy: ";
  for (size_t i = 0; i < unmet.size(); ++i) msg += (i ? "; " : "") + unmet[i];
  return Status(StatusCode::kPolicyRefused, msg);
}

nlohmann::json policy_to_json(const AcceptancePolicy& p) {
  nlohmann::json j = nlohmann::json::object();
  j["allowed_model_sha256"] = p.allowed_model_sha256;
  if (!p.min_power_version.empty()) j["min_power_version"] = p.min_power_version;
  j["require_signature"] = p.require_signature;
  j["allowed_devices"] = p.allowed_devices;
  j["require_deterministic"] = p.require_deterministic;
  return j;
}

}  // namespace receipt
}  // namespace power
