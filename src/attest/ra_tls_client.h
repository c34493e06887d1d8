// The client side of RA-TLS (`power attest verify`, docs/CONFIDENTIAL.md): fetch a server's
// certificate (and optionally fresh evidence for a nonce) and decide whether to trust it.
//
// Trust comes from the evidence in the certificate's extension (ra_tls.h), never from a CA:
// the TLS handshake does not verify the chain. verify_ra_tls_certificate() runs, in order, and
// stops at the first failure, naming it (RaTlsVerification::failed_check):
//   certificate        the DER certificate parses
//   evidence_missing   the certificate has Power's evidence extension (kRaTlsEvidenceOid)
//   evidence_format    the extension is a UTF8String holding evidence JSON of a known type
//   development        unattested development evidence, refused unless allow_development
//   unsupported_evidence  TDX quotes are served but not verified here (fails closed)
//   (sev-snp)          every verify_snp() check, under the caller's policy (snp_verify.h)
//   key_binding        REPORT_DATA[0..31] is SHA-256 of the certificate's public key, and
//                      [32..63] is zero (no nonce in a certificate)
//   nonce_binding      (/v1/attestation answers) the answer echoes the nonce asked for and
//                      REPORT_DATA[32..63] is SHA-256 of it
// Thread-safety: pure functions; fetch_peer_certificate() uses its own connection.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "attest/snp_verify.h"
#include "base/status.h"

namespace power::attest {

namespace ratls_check {
inline constexpr std::string_view kCertificate = "certificate";
inline constexpr std::string_view kEvidenceMissing = "evidence_missing";
inline constexpr std::string_view kEvidenceFormat = "evidence_format";
inline constexpr std::string_view kDevelopment = "development";
inline constexpr std::string_view kUnsupportedEvidence = "unsupported_evidence";
inline constexpr std::string_view kKeyBinding = "key_binding";
inline constexpr std::string_view kNonceBinding = "nonce_binding";
}  // namespace ratls_check

struct RaTlsVerifyOptions {
  // Applied to SEV-SNP evidence. Its report_data, if pinned, is checked too (so it must equal
  // the binding); the binding itself is always checked as key_binding / nonce_binding.
  SnpPolicy snp_policy;
  bool allow_development = false;
};

struct RaTlsVerification {
  Status status;
  std::string failed_check;  // empty when ok; a ratls_check or snp_check name
  std::vector<std::string> checks_passed;
  std::vector<std::string> checks_skipped;
  std::string evidence_type;            // once evidence_format passed
  std::optional<SnpReport> snp_report;  // SEV-SNP, once its report parsed

  bool ok() const { return status.ok(); }
  nlohmann::json to_json() const;  // {"verified", "failed_check", "checks_passed", ...}
};

// The certificate a server presented, checked by nothing yet.
RaTlsVerification verify_ra_tls_certificate(std::span<const uint8_t> cert_der,
                                            const RaTlsVerifyOptions& options);

// A GET /v1/attestation answer received over a TLS connection whose peer certificate was
// `cert_der`: the answer's "certificate" must be that certificate, its nonce the one asked for,
// and its evidence must bind the certificate's key and the nonce.
RaTlsVerification verify_attestation_response(const nlohmann::json& response,
                                              std::span<const uint8_t> cert_der,
                                              std::span<const uint8_t> nonce,
                                              const RaTlsVerifyOptions& options);

// Evidence JSON checked against REPORT_DATA the caller states (offline `power attest verify
// --evidence`): any difference fails key_binding, or when `nonce_bound` a difference in bytes
// 32..63 fails nonce_binding.
RaTlsVerification verify_ra_tls_evidence(const nlohmann::json& evidence,
                                         const std::array<uint8_t, 64>& expected_report_data,
                                         const RaTlsVerifyOptions& options,
                                         bool nonce_bound = false);

// The DER SubjectPublicKeyInfo (the key the binding hashes) of a certificate, PEM or DER.
Result<std::vector<uint8_t>> ra_tls_certificate_spki(std::span<const uint8_t> cert_pem_or_der);
// The evidence JSON in a DER certificate's extension; kNotFound when absent, kCorrupt when the
// extension is not a UTF8String of JSON.
Result<nlohmann::json> ra_tls_certificate_evidence(std::span<const uint8_t> cert_der);

struct RaTlsFetchOptions {
  // When set, also GET /v1/attestation?nonce=HEX over the same connection.
  std::optional<std::vector<uint8_t>> nonce;
  std::string api_key;  // sent as "Authorization: Bearer" when not empty
  int timeout_ms = 30000;
};

struct RaTlsPeer {
  std::vector<uint8_t> cert_der;
  std::optional<nlohmann::json> attestation;  // the /v1/attestation answer, when asked
};

// target: "https://HOST:PORT" (HOST may be [IPv6]) or "unix:///path.sock" (TLS over a unix
// socket). The handshake accepts any certificate: verify what comes back.
Result<RaTlsPeer> fetch_peer_certificate(const std::string& target,
                                         const RaTlsFetchOptions& options = {});

}  // namespace power::attest
