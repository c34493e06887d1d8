// A caller's acceptance policy: the conditions under which a caller accepts an execution.
//
// A request carrying a policy is refused before any compute (StatusCode::kPolicyRefused, the
// message naming every unmet rule) when the loaded model or the configuration does not meet
// it; no runtime or server setting relaxes it. `power verify --policy` checks a receipt
// against the same rules. JSON form (unknown members are an error, so that a misspelt rule
// never silently weakens a policy):
//   {"allowed_model_sha256": ["<64 hex>", ...],   // empty or absent: any model
//    "min_power_version": "0.1.0",                // absent: any version
//    "require_signature": true,                   // the execution must yield a signed receipt
//    "allowed_devices": ["cpu", "cpu:avx2"],      // device kind, or kind:kernel-ISA-path
//    "require_deterministic": true}               // see docs/RECEIPTS.md "Determinism"
// Thread-safety: values.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "power/status.h"

namespace power {

struct AcceptancePolicy {
  std::vector<std::string> allowed_model_sha256;  // lowercase hex; empty: any
  std::string min_power_version;                  // "MAJOR.MINOR.PATCH"; empty: any
  bool require_signature = false;
  std::vector<std::string> allowed_devices;  // "cpu", "cpu:scalar|avx2|avx512"; empty: any
  bool require_deterministic = false;
};

// Parses the JSON form above. kInvalidArgument naming the offending member.
Result<AcceptancePolicy> parse_acceptance_policy(std::string_view json_text);

}  // namespace power
