// The server side of RA-TLS (`power serve --ra-tls MODE`, docs/CONFIDENTIAL.md): a TLS
// identity whose certificate proves which TEE holds its private key.
//
// RaTlsIdentity::create() makes a fresh ECDSA P-256 key that never leaves this process, asks
// the TEE for evidence whose REPORT_DATA is ratls_report_data(SPKI DER of that key, no nonce),
// and self-signs an X.509 v3 certificate (CN=power-ra-tls, SAN DNS:localhost and IP
// 127.0.0.1, valid from an hour ago for 30 days) carrying the evidence in a non-critical
// extension, OID kRaTlsEvidenceOid, whose value is a DER UTF8String holding the compact
// evidence JSON (tee_evidence.h; development: {"type":"development","report_data":hex}).
// Trust comes from the evidence, not from a CA: clients check it with ra_tls_client.h.
//
// Modes: kAuto takes whichever TEE is present (configfs-tsm, then /dev/sev-guest) and fails
// with the places it looked when there is none; kDevelopment makes the same certificate with
// unattested evidence, which every verifier rejects unless told to accept it.
//
// Thread-safety: an identity is immutable after create(); fresh_evidence() may be called from
// any number of threads (each call asks the TEE anew). Ownership: the identity owns its key
// and certificate; the raw pointers stay valid while it lives (cpp-httplib's SSLServer
// up-references them, so the server may outlive the identity).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "attest/tee_evidence.h"
#include "base/status.h"

// OpenSSL's handle types, declared as OpenSSL does so this header needs none of its headers.
typedef struct x509_st X509;          // NOLINT(modernize-use-using)
typedef struct evp_pkey_st EVP_PKEY;  // NOLINT(modernize-use-using)

namespace power::attest {

// Power's RA-TLS evidence extension: 2.25.<UUID as an integer> (ITU-T X.667 allows anyone to
// mint an OID from a UUID without registration); the UUID 3dc921ba-5574-4c18-96fb-52cc9a77c613
// was generated once for this purpose and names nothing else.
inline constexpr const char* kRaTlsEvidenceOid = "2.25.82127243493847337342101207149241157139";
inline constexpr const char* kRaTlsCommonName = "power-ra-tls";
inline constexpr int64_t kRaTlsValiditySeconds = 30LL * 24 * 3600;
// A /v1/attestation nonce is 1..64 bytes (2..128 hex digits): enough for any freshness scheme,
// small enough that a request cannot make the server hash much.
inline constexpr size_t kRaTlsNonceMaxBytes = 64;

enum class RaTlsMode { kAuto, kSevSnp, kTdx, kDevelopment };
// "auto", "sev-snp", "tdx", "development".
Result<RaTlsMode> parse_ra_tls_mode(std::string_view text);
std::string_view ra_tls_mode_name(RaTlsMode mode);

// Produces evidence JSON (the shapes above) whose report data is the given 64 bytes.
using RaTlsEvidenceProvider =
    std::function<Result<nlohmann::json>(const std::array<uint8_t, 64>& report_data)>;

struct RaTlsOptions {
  TeeEvidenceOptions tee;
  // Replaces the TEE (kAuto/kSevSnp/kTdx) as the source of evidence: for tests, which have no
  // TEE, and for embedders with another route to the same evidence. Whatever it returns is put
  // in the certificate as is, and verifiers check it exactly like a TEE's. Must be thread-safe.
  RaTlsEvidenceProvider evidence_provider;
};

class RaTlsIdentity {
 public:
  static Result<RaTlsIdentity> create(RaTlsMode mode, const RaTlsOptions& options = {});

  RaTlsIdentity(RaTlsIdentity&&) noexcept;
  RaTlsIdentity& operator=(RaTlsIdentity&&) noexcept;
  RaTlsIdentity(const RaTlsIdentity&) = delete;
  RaTlsIdentity& operator=(const RaTlsIdentity&) = delete;
  ~RaTlsIdentity();

  // For httplib::SSLServer(X509*, EVP_PKEY*); owned by the identity.
  X509* certificate() const { return cert_.get(); }
  EVP_PKEY* private_key() const { return key_.get(); }
  const std::string& cert_pem() const { return cert_pem_; }
  const std::vector<uint8_t>& cert_der() const { return cert_der_; }
  const std::vector<uint8_t>& spki_der() const { return spki_der_; }
  // The evidence in the certificate (no nonce).
  const nlohmann::json& evidence_json() const { return evidence_; }
  // "sev-snp", "tdx" or "development".
  const std::string& evidence_type() const { return evidence_type_; }
  bool development() const { return evidence_type_ == "development"; }

  // GET /v1/attestation?nonce=HEX: new evidence with REPORT_DATA = ratls_report_data(SPKI,
  // nonce), as {"type", "evidence", "certificate": PEM, "nonce": hex, "report_data": hex}.
  // The nonce must be 1..kRaTlsNonceMaxBytes bytes (kInvalidArgument otherwise).
  Result<nlohmann::json> fresh_evidence(std::span<const uint8_t> nonce) const;

 private:
  struct X509Free {
    void operator()(X509* x) const;
  };
  struct PkeyFree {
    void operator()(EVP_PKEY* k) const;
  };
  RaTlsIdentity() = default;

  std::unique_ptr<EVP_PKEY, PkeyFree> key_;
  std::unique_ptr<X509, X509Free> cert_;
  std::string cert_pem_;
  std::vector<uint8_t> cert_der_;
  std::vector<uint8_t> spki_der_;
  nlohmann::json evidence_;
  std::string evidence_type_;
  RaTlsEvidenceProvider provider_;  // resolved at create(): TEE, override or development
};

// The nonce of GET /v1/attestation?nonce=HEX: 2..128 hex digits, either case.
Result<std::vector<uint8_t>> parse_ra_tls_nonce(std::string_view hex);

// The development "evidence": the report data, stated and unsigned.
nlohmann::json ra_tls_development_evidence(const std::array<uint8_t, 64>& report_data);

}  // namespace power::attest
