// `power attest verify`: decides whether a server's RA-TLS identity is trustworthy
// (src/attest/ra_tls_client.h, docs/CONFIDENTIAL.md "Attestation (RA-TLS) and its verifier").
//
//   power attest verify TARGET [--policy P.json] [--allow-development] [--nonce HEX | --fresh]
//   power attest verify --evidence E.json (--cert C.pem | --report-data HEX) [--policy P.json]
//
// TARGET is https://HOST:PORT or unix:///path.sock. The second form checks evidence offline
// against the binding the caller states. Exit codes: 0 verified, 1 usage or an error before a
// verdict (unreachable server, unreadable file), 3 verification failed (the check is named).
#include <openssl/rand.h>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "attest/ra_tls.h"
#include "attest/ra_tls_client.h"
#include "base/file.h"
#include "cli/cli_util.h"
#include "cli/commands.h"

namespace power::cli {
namespace {

// A verdict of "no" is not an error of the tool: scripts tell the two apart by exit code.
constexpr int kExitVerificationFailed = 3;

struct AttestArgs {
  std::string target;
  std::string policy_file;
  bool allow_development = false;
  std::string nonce_hex;
  bool fresh = false;
  bool json = false;
  std::string evidence_file;
  std::string cert_file;
  std::string report_data_hex;
  std::string api_key;
};

Result<attest::RaTlsVerifyOptions> verify_options(const AttestArgs& a) {
  attest::RaTlsVerifyOptions o;
  o.allow_development = a.allow_development;
  if (!a.policy_file.empty()) {
    POWER_ASSIGN_OR_RETURN(std::string text, read_file_text(a.policy_file));
    auto policy = attest::SnpPolicy::from_json_text(text);
    if (!policy.ok()) return Status(policy.status()).with("policy", a.policy_file);
    o.snp_policy = std::move(*policy);
  }
  return o;
}

Result<std::optional<std::vector<uint8_t>>> nonce_of(const AttestArgs& a) {
  if (a.fresh) {
    std::vector<uint8_t> nonce(32);
    if (RAND_bytes(nonce.data(), static_cast<int>(nonce.size())) != 1) {
      return Status(StatusCode::kInternal, "RAND_bytes failed");
    }
    return std::optional<std::vector<uint8_t>>(std::move(nonce));
  }
  if (a.nonce_hex.empty()) return std::optional<std::vector<uint8_t>>();
  POWER_ASSIGN_OR_RETURN(auto nonce, attest::parse_ra_tls_nonce(a.nonce_hex));
  return std::optional<std::vector<uint8_t>>(std::move(nonce));
}

// Prints the verdict; the exit code says it too.
void report(const AttestArgs& a, const std::vector<attest::RaTlsVerification>& steps,
            const std::vector<std::string>& labels) {
  bool ok = true;
  nlohmann::json j = {{"verified", true}, {"failed_check", nullptr}};
  nlohmann::json passed = nlohmann::json::array();
  for (size_t i = 0; i < steps.size(); ++i) {
    const auto& v = steps[i];
    for (const std::string& c : v.checks_passed) passed.push_back(c);
    j[labels[i]] = v.to_json();
    if (!v.ok()) {
      ok = false;
      j["verified"] = false;
      j["failed_check"] = v.failed_check;
      j["error"] = v.status.to_string();
      if (!a.json) {
        std::fprintf(stderr, "power: NOT VERIFIED (%s): check %s failed: %s\n", labels[i].c_str(),
                     v.failed_check.c_str(), v.status.to_string().c_str());
      }
      break;
    }
    if (!a.json) {
      std::string list;
      for (const std::string& c : v.checks_passed) list += (list.empty() ? "" : ", ") + c;
      std::printf("%s: verified (%s evidence): %s\n", labels[i].c_str(), v.evidence_type.c_str(),
                  list.c_str());
      if (v.snp_report) {
        std::printf("  measurement %s\n", attest::snp_hex(v.snp_report->measurement).c_str());
      }
      if (!v.checks_skipped.empty()) {
        std::string skipped;
        for (const std::string& c : v.checks_skipped) skipped += (skipped.empty() ? "" : ", ") + c;
        std::printf("  not pinned by the policy: %s\n", skipped.c_str());
      }
    }
  }
  j["checks_passed"] = passed;
  if (a.json) std::printf("%s\n", j.dump(2).c_str());
  set_exit_code(ok ? 0 : kExitVerificationFailed);
}

void run_online(const AttestArgs& a) {
  auto options = verify_options(a);
  if (!options.ok()) return report_error(options.status());
  auto nonce = nonce_of(a);
  if (!nonce.ok()) return report_error(nonce.status());
  attest::RaTlsFetchOptions fetch;
  fetch.nonce = *nonce;
  fetch.api_key = a.api_key;
  auto peer = attest::fetch_peer_certificate(a.target, fetch);
  if (!peer.ok()) return report_error(peer.status());
  std::vector<attest::RaTlsVerification> steps;
  std::vector<std::string> labels = {"certificate"};
  steps.push_back(attest::verify_ra_tls_certificate(peer->cert_der, *options));
  if (steps.back().ok() && peer->attestation) {
    labels.push_back("attestation");
    steps.push_back(
        attest::verify_attestation_response(*peer->attestation, peer->cert_der, **nonce, *options));
  }
  report(a, steps, labels);
}

void run_offline(const AttestArgs& a) {
  if (a.cert_file.empty() == a.report_data_hex.empty()) {
    return report_error(Status(StatusCode::kInvalidArgument,
                               "--evidence needs exactly one of --cert (the certificate the "
                               "evidence must bind) or --report-data (the expected 128 hex "
                               "digits)"));
  }
  auto options = verify_options(a);
  if (!options.ok()) return report_error(options.status());
  auto text = read_file_text(a.evidence_file);
  if (!text.ok()) return report_error(text.status());
  const nlohmann::json evidence = nlohmann::json::parse(*text, nullptr, false);
  if (evidence.is_discarded()) {
    return report_error(
        Status(StatusCode::kCorrupt, "evidence file is not JSON").with("path", a.evidence_file));
  }
  std::array<uint8_t, 64> expected{};
  bool nonce_bound = false;
  if (!a.report_data_hex.empty()) {
    Status st = attest::parse_snp_hex(a.report_data_hex, expected, "--report-data");
    if (!st.ok()) return report_error(st);
  } else {
    auto cert = read_file(a.cert_file);
    if (!cert.ok()) return report_error(cert.status());
    auto nonce = nonce_of(a);
    if (!nonce.ok()) return report_error(nonce.status());
    auto spki = attest::ra_tls_certificate_spki(*cert);
    if (!spki.ok()) return report_error(spki.status());
    nonce_bound = nonce->has_value();
    expected = attest::ratls_report_data(
        *spki, nonce_bound ? std::span<const uint8_t>(**nonce) : std::span<const uint8_t>());
  }
  report(a, {attest::verify_ra_tls_evidence(evidence, expected, *options, nonce_bound)},
         {"evidence"});
}

}  // namespace

void add_attest_commands(CLI::App& app) {
  static AttestArgs a;
  auto* attest = app.add_subcommand("attest", "RA-TLS attestation (docs/CONFIDENTIAL.md)");
  attest->require_subcommand(1);
  auto* verify = attest->add_subcommand(
      "verify",
      "Verify a server's RA-TLS certificate (or offline evidence): exit 0 verified, 3 a check "
      "failed, 1 error");
  verify->add_option("target", a.target, "https://HOST:PORT or unix:///path.sock");
  verify->add_option("--policy", a.policy_file,
                     "SEV-SNP policy JSON: pinned measurements, minimum TCB, ... (SnpPolicy)");
  verify->add_flag("--allow-development", a.allow_development,
                   "Accept an unattested development certificate (testing only)");
  auto* nonce = verify->add_option("--nonce", a.nonce_hex,
                                   "Also fetch /v1/attestation for this nonce (hex, 1..64 bytes); "
                                   "with --evidence/--cert: the nonce the evidence binds");
  auto* fresh = verify->add_flag("--fresh", a.fresh,
                                 "Also fetch /v1/attestation for a random nonce (freshness)");
  nonce->excludes(fresh);
  verify->add_flag("--json", a.json, "Print the verdict as JSON");
  verify->add_option("--api-key", a.api_key, "Bearer key for /v1/attestation, if it needs one");
  auto* evidence = verify->add_option("--evidence", a.evidence_file,
                                      "Offline: evidence JSON (the certificate extension's form)");
  verify->add_option("--cert", a.cert_file, "Offline: the certificate (PEM/DER) it must bind")
      ->needs(evidence);
  verify
      ->add_option("--report-data", a.report_data_hex,
                   "Offline: the REPORT_DATA it must carry (128 hex digits)")
      ->needs(evidence);
  verify->callback([] {
    if (!a.evidence_file.empty()) {
      if (!a.target.empty() || a.fresh) {
        return report_error(Status(StatusCode::kInvalidArgument,
                                   "--evidence verifies offline: give no TARGET or --fresh"));
      }
      return run_offline(a);
    }
    if (a.target.empty()) {
      return report_error(
          Status(StatusCode::kInvalidArgument, "give a TARGET, or --evidence to verify offline"));
    }
    run_online(a);
  });
}

}  // namespace power::cli
