#include "validate/ab.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "base/sha256.h"
#include "receipt/canonical_json.h"
#include "receipt/signing_key.h"
#include "validate/stats.h"

namespace power::validate {
namespace {

using json = nlohmann::json;

Status bad(const std::string& msg) {
  return Status(StatusCode::kInvalidArgument, msg);
}

std::string normalize_key(std::string key) {
  for (auto& c : key) {
    if (c == '-') c = '_';
  }
  return key;
}

Result<int64_t> get_int(const json& v, const std::string& key, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) return bad(fmt::format("settings key '{}' must be an integer", key));
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) {
    return bad(fmt::format("settings key '{}' must be between {} and {}", key, lo, hi));
  }
  return x;
}

Result<std::string> get_string(const json& v, const std::string& key) {
  if (!v.is_string()) return bad(fmt::format("settings key '{}' must be a string", key));
  return v.get<std::string>();
}

Result<bool> get_bool(const json& v, const std::string& key) {
  if (!v.is_boolean()) return bad(fmt::format("settings key '{}' must be true or false", key));
  return v.get<bool>();
}

double number(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

// A member's string value; "" when absent, null or not a string.
std::string text(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

int64_t integer(const json& j, const char* key, int64_t fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : fallback;
}

json member(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_object() ? *it : json::object();
}

// Tokens per second of one run.
double speed(const json& run) {
  const double wall = number(run, "wall_s");
  return wall > 0 ? number(run, "completion_tokens") / wall : 0.0;
}

struct Reason {
  std::string code, detail;
};

}  // namespace

Result<Settings> parse_settings(const json& j) {
  if (!j.is_object()) return bad("a settings file must be a JSON object");
  Settings s;
  s.canonical = json::object();
  for (const auto& [raw, v] : j.items()) {
    const std::string key = normalize_key(raw);
    if (s.canonical.contains(key)) return bad(fmt::format("settings key '{}' given twice", key));
    s.canonical[key] = v;
    if (key == "ctx") {
      POWER_ASSIGN_OR_RETURN(s.load.n_ctx, get_int(v, key, 0, int64_t{1} << 24));
    } else if (key == "threads") {
      POWER_ASSIGN_OR_RETURN(int64_t x, get_int(v, key, 0, 4096));
      s.load.threads = static_cast<int>(x);
    } else if (key == "kv_type") {
      POWER_ASSIGN_OR_RETURN(s.load.kv_type, get_string(v, key));
      if (s.load.kv_type != "f16" && s.load.kv_type != "f32") {
        return bad("settings key 'kv_type' must be f16 or f32");
      }
    } else if (key == "max_running") {
      POWER_ASSIGN_OR_RETURN(int64_t x, get_int(v, key, 1, 4096));
      s.load.max_running = static_cast<int>(x);
    } else if (key == "replicas") {
      POWER_ASSIGN_OR_RETURN(int64_t x, get_int(v, key, 1, 256));
      s.load.replicas = static_cast<int>(x);
    } else if (key == "state_checkpoints") {
      POWER_ASSIGN_OR_RETURN(int64_t x, get_int(v, key, 0, 4096));
      s.load.state_checkpoints = static_cast<int>(x);
    } else if (key == "prefix_reuse") {
      POWER_ASSIGN_OR_RETURN(s.load.prefix_reuse, get_bool(v, key));
    } else if (key == "spec") {
      POWER_ASSIGN_OR_RETURN(s.load.speculative.mode, get_string(v, key));
    } else if (key == "spec_k") {
      POWER_ASSIGN_OR_RETURN(int64_t x, get_int(v, key, 1, 16));
      s.load.speculative.k = static_cast<int>(x);
    } else if (key == "spec_s") {
      POWER_ASSIGN_OR_RETURN(int64_t x, get_int(v, key, 0, 64));
      s.load.speculative.s = static_cast<int>(x);
    } else if (key == "spec_fixed_k") {
      POWER_ASSIGN_OR_RETURN(bool fixed, get_bool(v, key));
      s.load.speculative.adaptive = !fixed;
    } else if (key == "draft_model") {
      POWER_ASSIGN_OR_RETURN(s.load.draft_model, get_string(v, key));
    } else if (key == "env") {
      if (!v.is_object()) return bad("settings key 'env' must be an object of strings");
      for (const auto& [name, value] : v.items()) {
        if (!value.is_string() || name.empty() || name.find('=') != std::string::npos) {
          return bad("settings key 'env' must map variable names to strings");
        }
        s.env[name] = value.get<std::string>();
      }
    } else {
      return bad(fmt::format("unknown settings key '{}'", raw));
    }
  }
  POWER_ASSIGN_OR_RETURN(std::string text, receipt::canonical_json(s.canonical));
  s.sha256 = sha256_hex(text);
  return s;
}

json policy_to_json(const Policy& p) {
  return {{"equivalence", p.equivalence},
          {"min_gain", p.min_gain},
          {"noise_multiple", p.noise_multiple},
          {"ci_level", p.ci_level},
          {"bootstrap_resamples", p.bootstrap_resamples},
          {"bootstrap_seed", std::to_string(p.bootstrap_seed)},
          {"max_p99_token_latency_increase", p.max_p99_token_latency_increase},
          {"max_ttft_increase", p.max_ttft_increase},
          {"max_prefix_hit_rate_diff_pp", p.max_prefix_hit_rate_diff_pp},
          {"max_mean_kld", p.max_mean_kld},
          {"min_same_top1_pct", p.min_same_top1_pct},
          {"max_flip_rate", p.max_flip_rate},
          {"noninferiority_margin", p.noninferiority_margin},
          {"mcnemar_alpha", p.mcnemar_alpha},
          {"max_other_cpu_fraction", p.max_other_cpu_fraction},
          {"idle_gate", p.idle_gate}};
}

Result<Policy> policy_from_json(const json& j) {
  Policy p;
  if (!j.is_object()) return bad("a policy must be a JSON object");
  for (const auto& [raw, v] : j.items()) {
    const std::string key = normalize_key(raw);
    auto num = [&](double* out, double lo, double hi) -> Status {
      if (!v.is_number()) return bad(fmt::format("policy key '{}' must be a number", raw));
      const double x = v.get<double>();
      if (!(x >= lo && x <= hi)) {
        return bad(fmt::format("policy key '{}' must be between {} and {}", raw, lo, hi));
      }
      *out = x;
      return Status();
    };
    if (key == "equivalence") {
      if (!v.is_string()) return bad("policy key 'equivalence' must be a string");
      p.equivalence = v.get<std::string>();
      if (p.equivalence != "bit-exact" && p.equivalence != "token-exact" &&
          p.equivalence != "lossy") {
        return bad("equivalence must be bit-exact, token-exact or lossy");
      }
    } else if (key == "idle_gate") {
      if (!v.is_string() || (v != "flag" && v != "refuse")) {
        return bad("policy key 'idle_gate' must be flag or refuse");
      }
      p.idle_gate = v.get<std::string>();
    } else if (key == "bootstrap_seed") {
      try {
        p.bootstrap_seed = v.is_string() ? std::stoull(v.get<std::string>()) : v.get<uint64_t>();
      } catch (const std::exception&) {
        return bad(
            "policy key 'bootstrap_seed' must be an unsigned integer (or its decimal string)");
      }
    } else if (key == "bootstrap_resamples") {
      if (!v.is_number_integer() || v.get<int64_t>() < 100 || v.get<int64_t>() > 1000000) {
        return bad("policy key 'bootstrap_resamples' must be an integer from 100 to 1000000");
      }
      p.bootstrap_resamples = v.get<int>();
    } else if (key == "min_gain") {
      POWER_RETURN_IF_ERROR(num(&p.min_gain, 0, 10));
    } else if (key == "noise_multiple") {
      POWER_RETURN_IF_ERROR(num(&p.noise_multiple, 0, 100));
    } else if (key == "ci_level") {
      POWER_RETURN_IF_ERROR(num(&p.ci_level, 0.5, 0.999));
    } else if (key == "max_p99_token_latency_increase") {
      POWER_RETURN_IF_ERROR(num(&p.max_p99_token_latency_increase, 0, 100));
    } else if (key == "max_ttft_increase") {
      POWER_RETURN_IF_ERROR(num(&p.max_ttft_increase, 0, 100));
    } else if (key == "max_prefix_hit_rate_diff_pp") {
      POWER_RETURN_IF_ERROR(num(&p.max_prefix_hit_rate_diff_pp, 0, 100));
    } else if (key == "max_mean_kld") {
      POWER_RETURN_IF_ERROR(num(&p.max_mean_kld, 0, 100));
    } else if (key == "min_same_top1_pct") {
      POWER_RETURN_IF_ERROR(num(&p.min_same_top1_pct, 0, 100));
    } else if (key == "max_flip_rate") {
      POWER_RETURN_IF_ERROR(num(&p.max_flip_rate, 0, 1));
    } else if (key == "noninferiority_margin") {
      POWER_RETURN_IF_ERROR(num(&p.noninferiority_margin, 0, 1));
    } else if (key == "mcnemar_alpha") {
      POWER_RETURN_IF_ERROR(num(&p.mcnemar_alpha, 0, 1));
    } else if (key == "max_other_cpu_fraction") {
      POWER_RETURN_IF_ERROR(num(&p.max_other_cpu_fraction, 0, 1024));
    } else {
      return bad(fmt::format("unknown policy key '{}'", raw));
    }
  }
  return p;
}

static Result<json> derive_impl(const json& ev) {
  if (!ev.is_object() || !ev.contains("policy") || !ev.contains("runs") || !ev["runs"].is_array()) {
    return Status(StatusCode::kCorrupt, "evidence lacks policy or runs");
  }
  POWER_ASSIGN_OR_RETURN(Policy p, policy_from_json(ev["policy"]));
  const json& runs = ev["runs"];

  // Pair the runs of each phase by (round, order): the ratio is B's speed over A's.
  struct PhaseRatios {
    std::vector<double> ab, ba;
  };
  std::map<std::string, std::map<std::pair<int64_t, std::string>, std::pair<double, double>>>
      pairs;  // phase -> (round, order) -> (speed A, speed B)
  std::vector<double> p99[2], ttft[2];
  int64_t prompt[2] = {0, 0}, cached[2] = {0, 0};
  std::set<std::string> token_digests[2], logits_digests[2];
  int64_t busy_runs = 0;
  json busy = json::array();
  for (const auto& r : runs) {
    if (!r.is_object()) return Status(StatusCode::kCorrupt, "a run is not an object");
    const std::string phase = text(r, "phase");
    const std::string order = text(r, "order");
    const std::string arm = text(r, "arm");
    if ((phase != "aa" && phase != "ab") || (order != "AB" && order != "BA") ||
        (arm != "A" && arm != "B")) {
      return Status(StatusCode::kCorrupt, "a run lacks phase aa|ab, order AB|BA or arm A|B");
    }
    auto& slot = pairs[phase][{integer(r, "round", -1), order}];
    (arm == "A" ? slot.first : slot.second) = speed(r);
    const double other = number(member(r, "idle"), "other_cpu_s");
    const double wall = number(r, "wall_s");
    if (wall > 0 && other / wall > p.max_other_cpu_fraction) {
      ++busy_runs;
      busy.push_back(integer(r, "index", -1));
    }
    // Output digests of every run, the A/A control's too (both its arms are the baseline).
    const int setting = phase == "ab" && arm == "B" ? 1 : 0;
    token_digests[setting].insert(text(r, "token_digest"));
    logits_digests[setting].insert(text(r, "logits_digest"));
    if (phase != "ab") continue;
    const int side = arm == "A" ? 0 : 1;  // in the A/B phase, A is the baseline
    p99[side].push_back(number(r, "token_latency_p99_ms"));
    ttft[side].push_back(number(r, "ttft_median_ms"));
    prompt[side] += integer(r, "prompt_tokens", 0);
    cached[side] += integer(r, "cached_prompt_tokens", 0);
  }
  auto ratios = [&](const std::string& phase) {
    PhaseRatios out;
    for (const auto& [key, sp] : pairs[phase]) {
      if (sp.first <= 0 || sp.second <= 0) continue;  // an unpaired or empty run
      (key.second == "AB" ? out.ab : out.ba).push_back(sp.second / sp.first);
    }
    return out;
  };
  const PhaseRatios aa = ratios("aa"), ab = ratios("ab");
  if (ab.ab.empty() || ab.ba.empty()) {
    return Status(StatusCode::kCorrupt, "evidence has no complete A/B round in both orders");
  }
  std::vector<Reason> fail_output, fail_speed;

  json d;
  const OrderScore aas = order_score(aa.ab, aa.ba);
  const double noise = aa.ab.empty() || aa.ba.empty()
                           ? 0.0
                           : std::max(std::fabs(aas.median_ab - 1), std::fabs(aas.median_ba - 1));
  d["aa"] = {{"ratios_ab", aa.ab},
             {"ratios_ba", aa.ba},
             {"median_ab", aas.median_ab},
             {"median_ba", aas.median_ba},
             {"noise_floor", noise}};
  const OrderScore s = order_score(ab.ab, ab.ba);
  const Interval ci =
      bootstrap_score_interval(ab.ab, ab.ba, p.bootstrap_resamples, p.bootstrap_seed, p.ci_level);
  d["speed"] = {{"ratios_ab", ab.ab},       {"ratios_ba", ab.ba}, {"median_ab", s.median_ab},
                {"median_ba", s.median_ba}, {"score", s.score},   {"ci_low", ci.low},
                {"ci_high", ci.high}};
  if (s.median_ab < 1 + p.min_gain || s.median_ba < 1 + p.min_gain) {
    fail_speed.push_back({"speed.order_median_below_min_gain",
                          fmt::format("order medians {:.4f} (AB) and {:.4f} (BA); both must be "
                                      ">= {:.4f}",
                                      s.median_ab, s.median_ba, 1 + p.min_gain)});
  }
  if (!(s.score - 1 > p.noise_multiple * noise)) {
    fail_speed.push_back({"speed.within_noise",
                          fmt::format("score gain {:.4f} is not above {} x the A/A noise floor "
                                      "{:.4f}",
                                      s.score - 1, p.noise_multiple, noise)});
  }
  if (!(ci.low > 1.0)) {
    fail_speed.push_back({"speed.interval_includes_1",
                          fmt::format("{:.0f}% interval [{:.4f}, {:.4f}] does not lie above 1",
                                      p.ci_level * 100, ci.low, ci.high)});
  }

  // Latency and prefix cache: candidate medians against baseline medians.
  const double p99_ratio = median(p99[0]) > 0 ? median(p99[1]) / median(p99[0]) : 1.0;
  const double ttft_ratio = median(ttft[0]) > 0 ? median(ttft[1]) / median(ttft[0]) : 1.0;
  const double hit[2] = {prompt[0] ? 100.0 * cached[0] / prompt[0] : 0.0,
                         prompt[1] ? 100.0 * cached[1] / prompt[1] : 0.0};
  d["latency"] = {{"p99_token_ms_baseline", median(p99[0])},
                  {"p99_token_ms_candidate", median(p99[1])},
                  {"p99_token_ratio", p99_ratio},
                  {"ttft_ms_baseline", median(ttft[0])},
                  {"ttft_ms_candidate", median(ttft[1])},
                  {"ttft_ratio", ttft_ratio}};
  d["prefix_cache"] = {{"hit_rate_pct_baseline", hit[0]},
                       {"hit_rate_pct_candidate", hit[1]},
                       {"diff_pp", std::fabs(hit[1] - hit[0])}};
  if (p99_ratio > 1 + p.max_p99_token_latency_increase) {
    fail_speed.push_back(
        {"latency.p99_token", fmt::format("p99 per-token latency x{:.3f} (allowed x{:.3f})",
                                          p99_ratio, 1 + p.max_p99_token_latency_increase)});
  }
  if (ttft_ratio > 1 + p.max_ttft_increase) {
    fail_speed.push_back({"latency.ttft", fmt::format("TTFT x{:.3f} (allowed x{:.3f})", ttft_ratio,
                                                      1 + p.max_ttft_increase)});
  }
  if (std::fabs(hit[1] - hit[0]) > p.max_prefix_hit_rate_diff_pp) {
    fail_speed.push_back({"prefix_cache.hit_rate",
                          fmt::format("hit rate {:.2f}% vs {:.2f}% (allowed difference {} pp)",
                                      hit[1], hit[0], p.max_prefix_hit_rate_diff_pp)});
  }

  // Output: timed runs against the untimed reference pass of the same setting, then the
  // equivalence level between the settings.
  const json ref = member(ev, "reference");
  const std::string ref_tokens[2] = {text(member(ref, "baseline"), "token_digest"),
                                     text(member(ref, "candidate"), "token_digest")};
  const std::string ref_logits[2] = {text(member(ref, "baseline"), "logits_digest"),
                                     text(member(ref, "candidate"), "logits_digest")};
  json out;
  out["timed_equals_untimed"] = true;
  for (int side = 0; side < 2; ++side) {
    const char* name = side == 0 ? "baseline" : "candidate";
    if (token_digests[side].size() != 1 || *token_digests[side].begin() != ref_tokens[side]) {
      out["timed_equals_untimed"] = false;
      fail_output.push_back({"output.timed_differs_from_untimed",
                             fmt::format("the {}'s timed runs gave {} distinct token digests; "
                                         "the untimed pass gave {}",
                                         name, token_digests[side].size(), ref_tokens[side])});
    }
  }
  const bool same_tokens = ref_tokens[0] == ref_tokens[1];
  const bool same_logits = ref_logits[0] == ref_logits[1] && logits_digests[0].size() == 1 &&
                           logits_digests[1].size() == 1 &&
                           *logits_digests[0].begin() == *logits_digests[1].begin() &&
                           !ref_logits[0].empty();
  out["same_tokens"] = same_tokens;
  out["same_logits"] = same_logits;
  const json quality = member(ev, "quality");
  if (p.equivalence == "bit-exact") {
    if (!same_tokens) fail_output.push_back({"output.tokens_differ", "token-id digests differ"});
    if (!same_logits) {
      fail_output.push_back(
          {"output.logits_differ", "logits digests differ across runs or settings"});
    }
  } else if (p.equivalence == "token-exact") {
    if (!same_tokens) fail_output.push_back({"output.tokens_differ", "greedy tokens differ"});
    const json kl = member(quality, "teacher_forced");
    if (kl.empty()) {
      fail_output.push_back({"quality.missing", "token-exact needs the teacher-forced KL record"});
    } else {
      const double mean_kld = number(kl, "mean_kld"), same_top = number(kl, "same_top1_pct");
      out["mean_kld"] = mean_kld;
      out["same_top1_pct"] = same_top;
      if (mean_kld > p.max_mean_kld) {
        fail_output.push_back({"quality.kld", fmt::format("mean KL divergence {:.6f} > {}",
                                                          mean_kld, p.max_mean_kld)});
      }
      if (same_top < p.min_same_top1_pct) {
        fail_output.push_back({"quality.top1", fmt::format("same top-1 {:.3f}% < {}%", same_top,
                                                           p.min_same_top1_pct)});
      }
    }
  } else {  // lossy: per-task correctness of each setting
    const json tasks = member(quality, "tasks");
    if (!tasks.contains("baseline") || !tasks.contains("candidate") ||
        !tasks["baseline"].is_array() || !tasks["candidate"].is_array() ||
        tasks["baseline"].size() != tasks["candidate"].size() || tasks["baseline"].empty()) {
      fail_output.push_back({"quality.missing", "lossy needs per-task results of both settings"});
    } else {
      int64_t b = 0, c = 0, ok_base = 0, ok_cand = 0;
      const int64_t n = static_cast<int64_t>(tasks["baseline"].size());
      for (int64_t i = 0; i < n; ++i) {
        const bool x = tasks["baseline"][i] == true, y = tasks["candidate"][i] == true;
        ok_base += x;
        ok_cand += y;
        b += x && !y;
        c += !x && y;
      }
      const double pval = mcnemar_exact_p(b, c);
      const double flips = static_cast<double>(b + c) / static_cast<double>(n);
      const double acc_b = static_cast<double>(ok_base) / n,
                   acc_c = static_cast<double>(ok_cand) / n;
      out["tasks"] = {{"n", n},
                      {"baseline_correct", ok_base},
                      {"candidate_correct", ok_cand},
                      {"only_baseline", b},
                      {"only_candidate", c},
                      {"mcnemar_p", pval},
                      {"flip_rate", flips}};
      if (flips > p.max_flip_rate) {
        fail_output.push_back(
            {"quality.flips", fmt::format("{} of {} answers flipped ({:.2f}% > {:.2f}%)", b + c, n,
                                          100 * flips, 100 * p.max_flip_rate)});
      }
      if (acc_c < acc_b - p.noninferiority_margin) {
        fail_output.push_back(
            {"quality.inferior", fmt::format("accuracy {:.4f} vs {:.4f}: more than {} below", acc_c,
                                             acc_b, p.noninferiority_margin)});
      }
      if (pval < p.mcnemar_alpha && b > c) {
        fail_output.push_back({"quality.mcnemar", fmt::format("McNemar exact p = {:.4g} < {} with "
                                                              "{} losses against {} wins",
                                                              pval, p.mcnemar_alpha, b, c)});
      }
    }
  }
  d["output"] = out;
  d["idle"] = {{"busy_runs", busy_runs}, {"busy_run_indices", busy}};

  std::string decision;
  std::vector<Reason> reasons;
  if (!fail_output.empty()) {
    decision = "rejected";
    reasons = fail_output;
  } else if (busy_runs > 0 && p.idle_gate == "refuse") {
    decision = "baseline-retained";
    reasons.push_back({"idle.busy", fmt::format("{} runs saw other processes use more than {} "
                                                "CPU per wall second",
                                                busy_runs, p.max_other_cpu_fraction)});
  } else if (!fail_speed.empty()) {
    decision = "baseline-retained";
    reasons = fail_speed;
  } else {
    decision = "candidate-selected";
  }
  json rj = json::array();
  for (const auto& r : reasons) rj.push_back({{"code", r.code}, {"detail", r.detail}});
  return json{{"derived", d}, {"decision", {{"result", decision}, {"reasons", rj}}}};
}

Result<json> derive(const json& ev) {
  try {
    return derive_impl(ev);
  } catch (const json::exception& e) {
    return Status(StatusCode::kCorrupt, fmt::format("evidence: {}", e.what()));
  }
}

Result<std::string> sign_evidence(json evidence, const receipt::SigningKey& key) {
  evidence.erase("signature");
  POWER_ASSIGN_OR_RETURN(std::string body, receipt::canonical_json(evidence));
  POWER_ASSIGN_OR_RETURN(auto sig, key.sign(body));
  evidence["signature"] = {{"alg", "ed25519"},
                           {"public_key", key.public_key_hex()},
                           {"value", to_hex(sig.data(), sig.size())}};
  return receipt::canonical_json(evidence);
}

Status verify_evidence(const std::string& file_text, const std::string& expected_public_key_hex) {
  POWER_ASSIGN_OR_RETURN(json ev, receipt::parse_json_strict(file_text));
  {
    // The file is the canonical form (one trailing newline allowed): no byte of it can change
    // without changing what is signed.
    std::string_view body = file_text;
    if (!body.empty() && body.back() == '\n') body.remove_suffix(1);
    POWER_ASSIGN_OR_RETURN(std::string canonical, receipt::canonical_json(ev));
    if (canonical != body) {
      return Status(StatusCode::kCorrupt, "evidence is not in canonical JSON form");
    }
  }
  if (!ev.is_object() || text(ev, "schema") != "power.ab-evidence.v1") {
    return Status(StatusCode::kCorrupt, "not a power.ab-evidence.v1 file");
  }
  const json sig = member(ev, "signature");
  if (text(sig, "alg") != "ed25519") {
    return Status(StatusCode::kIntegrity, "signature: missing or not ed25519");
  }
  POWER_ASSIGN_OR_RETURN(receipt::PublicKey pk,
                         receipt::parse_public_key_hex(text(sig, "public_key")));
  if (!expected_public_key_hex.empty()) {
    POWER_ASSIGN_OR_RETURN(receipt::PublicKey want,
                           receipt::parse_public_key_hex(expected_public_key_hex));
    if (want != pk) return Status(StatusCode::kIntegrity, "signature: signed by another key");
  }
  std::array<uint8_t, 64> value{};
  const std::string hex = text(sig, "value");
  if (hex.size() != 128 || !receipt::decode_hex(hex, value.data(), value.size()).ok()) {
    return Status(StatusCode::kIntegrity, "signature: value is not 128 hex digits");
  }
  json body = ev;
  body.erase("signature");
  POWER_ASSIGN_OR_RETURN(std::string canonical, receipt::canonical_json(body));
  if (Status st = receipt::verify_signature(pk, canonical, value); !st.ok()) {
    return Status(StatusCode::kIntegrity, "signature: does not match the evidence");
  }
  POWER_ASSIGN_OR_RETURN(json again, derive(ev));
  for (const char* name : {"derived", "decision"}) {
    POWER_ASSIGN_OR_RETURN(std::string want, receipt::canonical_json(again[name]));
    POWER_ASSIGN_OR_RETURN(std::string have,
                           receipt::canonical_json(ev.contains(name) ? ev[name] : json()));
    if (want != have) {
      return Status(
          StatusCode::kIntegrity,
          fmt::format("{}: re-derived from the raw runs, it differs from the file's", name));
    }
  }
  return Status();
}

}  // namespace power::validate
