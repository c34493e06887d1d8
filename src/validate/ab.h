// Two-order A/B validation (`power ab`, docs/VALIDATION.md): settings files, the policy, the
// figures derived from raw runs, the gates and the decision, and the signed evidence file
// power.ab-evidence.v1 that `power ab verify` re-derives.
//
// The method: a baseline and a candidate setting run the same workload on the same model.
// An A/A control (baseline against itself, same schedule) measures the machine's noise.
// Each round runs the pair in both orders (baseline->candidate "AB", candidate->baseline
// "BA"); the ratio candidate/baseline of tokens per second is taken within each order, the
// median per order across rounds, and the score is the lower of the two medians. The
// candidate is selected only when both order medians gain at least min_gain, the score's
// gain exceeds noise_multiple x the noise floor, the bootstrap interval lies above 1, latency
// and prefix-cache behaviour stay within bounds, and its output passes the equivalence gate.
// Anything less keeps the baseline; a candidate whose output fails is rejected.
//
// Everything derive() computes comes from the evidence's own raw runs, quality records and
// policy, so a verifier with only the file reaches the same figures bit for bit.
// Thread-safety: pure functions.
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "power/runtime.h"

namespace power::receipt {
class SigningKey;
}

namespace power::validate {

// A settings file: the keys of `power serve --config` that shape a run (ctx, threads,
// kv_type, max_running, replicas, state_checkpoints, prefix_reuse), the speculative keys
// (spec, spec_k, spec_s, spec_fixed_k, draft_model) and `env` (environment variables for
// the run's process, e.g. {"POWER_REPACK": "0"}; needs --process fresh). Dashes in keys read
// as underscores. Unknown keys are an error.
struct Settings {
  nlohmann::json canonical;  // normalized keys, as hashed
  std::string sha256;        // of the canonical JSON text
  LoadOptions load;
  std::map<std::string, std::string> env;
};
Result<Settings> parse_settings(const nlohmann::json& j);

// The decision policy with its defaults (docs/VALIDATION.md "Gates").
struct Policy {
  std::string equivalence = "token-exact";  // bit-exact | token-exact | lossy
  double min_gain = 0.03;                   // each order median >= 1 + min_gain
  double noise_multiple = 2.0;              // score - 1 > noise_multiple x noise floor
  double ci_level = 0.95;
  int bootstrap_resamples = 2000;
  uint64_t bootstrap_seed = 20261203;
  double max_p99_token_latency_increase = 0.20;
  double max_ttft_increase = 0.10;
  double max_prefix_hit_rate_diff_pp = 0.5;
  double max_mean_kld = 0.001;      // token-exact, teacher-forced
  double min_same_top1_pct = 99.5;  // token-exact, teacher-forced
  double max_flip_rate = 0.02;      // lossy
  double noninferiority_margin = 0.01;
  double mcnemar_alpha = 0.05;
  double max_other_cpu_fraction = 0.25;  // idle gate: other processes' CPU per wall second
  std::string idle_gate = "flag";        // flag | refuse
};
Result<Policy> policy_from_json(const nlohmann::json& j);  // missing keys keep defaults
nlohmann::json policy_to_json(const Policy& p);

// The derived figures and the decision from an evidence object's "policy", "runs",
// "reference" and "quality" members: {"derived": {...}, "decision": {...}}.
Result<nlohmann::json> derive(const nlohmann::json& evidence);

// Canonical JSON of `evidence` (without "signature") signed with `key`: the file's text.
Result<std::string> sign_evidence(nlohmann::json evidence, const receipt::SigningKey& key);

// Checks an evidence file: schema, signature (by the key in the file, and by
// expected_public_key_hex when not empty), and that derive() reproduces its "derived" and
// "decision" exactly. kIntegrity / kCorrupt naming the first check that failed.
Status verify_evidence(const std::string& text, const std::string& expected_public_key_hex);

}  // namespace power::validate
