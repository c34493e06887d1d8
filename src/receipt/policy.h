// Checking an AcceptancePolicy (include/power/policy.h) against the facts of one execution:
// the same rules at submit time (the runtime's facts) and at verify time (a receipt's facts).
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "power/policy.h"

namespace power::receipt {

struct ExecutionFacts {
  std::string model_sha256;
  std::string power_version;
  bool signed_receipt = false;  // the execution yields a receipt signed by the runtime key
  std::string device_kind;      // "cpu"
  std::string kernel_isa;       // "scalar", "avx2", "avx512"
  // Why the execution is not reproducible bit for bit; empty: deterministic.
  std::vector<std::string> nondeterminism;
};

// kPolicyRefused whose message lists every unmet rule; ok when all hold.
Status check_policy(const AcceptancePolicy& policy, const ExecutionFacts& facts);

// -1, 0, 1 for a < b, a == b, a > b over dotted numeric versions ("0.10.2"); kInvalidArgument
// when either is not one.
Result<int> compare_versions(std::string_view a, std::string_view b);

nlohmann::json policy_to_json(const AcceptancePolicy& policy);

}  // namespace power::receipt
