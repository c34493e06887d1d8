// The RA-TLS verifier: evidence out of the certificate, its type, SEV-SNP's checks, and the
// binding of the evidence to the certificate's key (and a nonce). Fails closed: anything not
// positively verified is a failure with the check named.
#include <openssl/asn1.h>
#include <openssl/x509.h>

#include <algorithm>

#include <fmt/format.h>

#include "attest/ra_tls.h"
#include "attest/ra_tls_client.h"
#include "attest/x509_util.h"

namespace power::attest {
namespace {

using nlohmann::json;

struct Utf8Free {
  void operator()(ASN1_UTF8STRING* s) const { ASN1_UTF8STRING_free(s); }
};

RaTlsVerification fail(RaTlsVerification v, std::string_view check, Status status) {
  v.failed_check = std::string(check);
  v.status = std::move(status).with("check", check);
  return v;
}

RaTlsVerification fail(RaTlsVerification v, std::string_view check, std::string_view message) {
  return fail(std::move(v), check, Status(StatusCode::kIntegrity, std::string(message)));
}

// Compares the report data the evidence carries with what the certificate (and nonce) demand.
RaTlsVerification check_binding(RaTlsVerification v, std::span<const uint8_t, 64> got,
                                const std::array<uint8_t, 64>& want, bool nonce_bound) {
  const bool key_ok = std::equal(got.begin(), got.begin() + 32, want.begin());
  const bool tail_ok = std::equal(got.begin() + 32, got.end(), want.begin() + 32);
  if (!key_ok || (!tail_ok && !nonce_bound)) {
    return fail(std::move(v), ratls_check::kKeyBinding,
                make_error(StatusCode::kIntegrity,
                           "the evidence's report data is not the expected key binding")
                    .with("report_data", snp_hex(got))
                    .with("expected", snp_hex(want)));
  }
  v.checks_passed.emplace_back(ratls_check::kKeyBinding);
  if (nonce_bound) {
    if (!tail_ok) {
      return fail(std::move(v), ratls_check::kNonceBinding,
                  make_error(StatusCode::kIntegrity,
                             "the evidence's report data does not bind the nonce asked for")
                      .with("report_data", snp_hex(got))
                      .with("expected", snp_hex(want)));
    }
    v.checks_passed.emplace_back(ratls_check::kNonceBinding);
  }
  return v;
}

Status strict_keys(const json& j, std::initializer_list<std::string_view> allowed,
                   std::string_view what) {
  for (const auto& [key, value] : j.items()) {
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      return make_error(StatusCode::kCorrupt, "{} evidence has an unknown key", what)
          .with("key", key);
    }
  }
  return Status();
}

RaTlsVerification verify_evidence(RaTlsVerification v, const json& evidence,
                                  const std::array<uint8_t, 64>& want,
                                  const RaTlsVerifyOptions& options, bool nonce_bound) {
  if (!evidence.is_object() || !evidence.contains("type") || !evidence["type"].is_string()) {
    return fail(std::move(v), ratls_check::kEvidenceFormat,
                Status(StatusCode::kCorrupt, "evidence is not a JSON object with a \"type\""));
  }
  const std::string type = evidence["type"].get<std::string>();
  if (type == "development") {
    Status keys = strict_keys(evidence, {"type", "report_data"}, "development");
    std::array<uint8_t, 64> stated{};
    if (keys.ok() && !evidence.contains("report_data")) {
      keys = Status(StatusCode::kCorrupt, "development evidence lacks \"report_data\"");
    }
    if (keys.ok() && !evidence["report_data"].is_string()) {
      keys = Status(StatusCode::kCorrupt, "development evidence \"report_data\" is not a string");
    }
    if (keys.ok()) {
      keys = parse_snp_hex(evidence["report_data"].get<std::string>(), stated, "report_data");
    }
    if (!keys.ok()) return fail(std::move(v), ratls_check::kEvidenceFormat, std::move(keys));
    v.evidence_type = type;
    v.checks_passed.emplace_back(ratls_check::kEvidenceFormat);
    // Nothing vouches for development evidence: only a caller who asked for it accepts it.
    if (!options.allow_development) {
      return fail(std::move(v), ratls_check::kDevelopment,
                  Status(StatusCode::kPolicyRefused,
                         "the server's certificate is an unattested development certificate "
                         "(--ra-tls development); refused unless development is allowed"));
    }
    v.checks_passed.emplace_back(ratls_check::kDevelopment);
    return check_binding(std::move(v), stated, want, nonce_bound);
  }
  if (type == "tdx") {
    v.evidence_type = type;
    v.checks_passed.emplace_back(ratls_check::kEvidenceFormat);
    return fail(std::move(v), ratls_check::kUnsupportedEvidence,
                Status(StatusCode::kUnsupported,
                       "TDX quotes are served but this verifier does not verify them"));
  }
  if (type != "sev-snp") {
    return fail(std::move(v), ratls_check::kEvidenceFormat,
                make_error(StatusCode::kUnsupported, "unknown evidence type").with("type", type));
  }
  auto snp = SnpEvidence::from_json(evidence);
  if (!snp.ok()) return fail(std::move(v), ratls_check::kEvidenceFormat, snp.status());
  v.evidence_type = type;
  v.checks_passed.emplace_back(ratls_check::kEvidenceFormat);
  SnpVerification s = verify_snp(*snp, options.snp_policy);
  v.checks_passed.insert(v.checks_passed.end(), s.checks_passed.begin(), s.checks_passed.end());
  v.checks_skipped = s.checks_skipped;
  v.snp_report = s.report;
  if (!s.ok()) {
    v.failed_check = s.failed_check;
    v.status = s.status;
    return v;
  }
  return check_binding(std::move(v), s.report->report_data, want, nonce_bound);
}

Result<detail::X509Ptr> parse_cert(std::span<const uint8_t> cert_der) {
  return detail::parse_certificate_der(cert_der, "server");
}

}  // namespace

json RaTlsVerification::to_json() const {
  json j = {{"verified", ok()},
            {"failed_check", ok() ? json(nullptr) : json(failed_check)},
            {"checks_passed", checks_passed},
            {"checks_skipped", checks_skipped},
            {"evidence_type", evidence_type}};
  if (!ok()) j["error"] = status.to_string();
  if (snp_report) {
    j["measurement"] = snp_hex(snp_report->measurement);
    j["report_data"] = snp_hex(snp_report->report_data);
  }
  return j;
}

Result<std::vector<uint8_t>> ra_tls_certificate_spki(std::span<const uint8_t> cert_pem_or_der) {
  POWER_ASSIGN_OR_RETURN(std::vector<uint8_t> cert_der,
                         detail::certificate_der(cert_pem_or_der, "server"));
  POWER_ASSIGN_OR_RETURN(detail::X509Ptr cert, parse_cert(cert_der));
  unsigned char* der = nullptr;
  const int len = i2d_X509_PUBKEY(X509_get_X509_PUBKEY(cert.get()), &der);
  if (len <= 0) {
    return make_error(StatusCode::kCorrupt, "certificate public key does not encode")
        .with("openssl", detail::drain_openssl_errors());
  }
  std::vector<uint8_t> out(der, der + len);
  OPENSSL_free(der);
  return out;
}

Result<json> ra_tls_certificate_evidence(std::span<const uint8_t> cert_der) {
  POWER_ASSIGN_OR_RETURN(detail::X509Ptr cert, parse_cert(cert_der));
  POWER_ASSIGN_OR_RETURN(auto raw, detail::extension_value(cert.get(), kRaTlsEvidenceOid));
  if (!raw) {
    return make_error(StatusCode::kNotFound,
                      "the certificate has no RA-TLS evidence extension (not an RA-TLS server?)")
        .with("oid", kRaTlsEvidenceOid);
  }
  const unsigned char* p = raw->data();
  std::unique_ptr<ASN1_UTF8STRING, Utf8Free> text(
      d2i_ASN1_UTF8STRING(nullptr, &p, static_cast<long>(raw->size())));
  if (!text || p != raw->data() + raw->size()) {
    detail::drain_openssl_errors();
    return make_error(StatusCode::kCorrupt,
                      "RA-TLS evidence extension is not exactly one DER UTF8String")
        .with("bytes", raw->size());
  }
  const auto* chars = reinterpret_cast<const char*>(ASN1_STRING_get0_data(text.get()));
  json j = json::parse(chars, chars + ASN1_STRING_length(text.get()), nullptr,
                       /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return make_error(StatusCode::kCorrupt, "RA-TLS evidence extension is not JSON");
  }
  return j;
}

RaTlsVerification verify_ra_tls_certificate(std::span<const uint8_t> cert_der,
                                            const RaTlsVerifyOptions& options) {
  RaTlsVerification v;
  auto spki = ra_tls_certificate_spki(cert_der);
  if (!spki.ok()) return fail(std::move(v), ratls_check::kCertificate, spki.status());
  v.checks_passed.emplace_back(ratls_check::kCertificate);
  auto evidence = ra_tls_certificate_evidence(cert_der);
  if (!evidence.ok()) {
    const bool missing = evidence.status().code() == StatusCode::kNotFound;
    return fail(std::move(v),
                missing ? ratls_check::kEvidenceMissing : ratls_check::kEvidenceFormat,
                evidence.status());
  }
  return verify_evidence(std::move(v), *evidence, ratls_report_data(*spki, {}), options,
                         /*nonce_bound=*/false);
}

RaTlsVerification verify_attestation_response(const json& response,
                                              std::span<const uint8_t> cert_der,
                                              std::span<const uint8_t> nonce,
                                              const RaTlsVerifyOptions& options) {
  RaTlsVerification v;
  auto spki = ra_tls_certificate_spki(cert_der);
  if (!spki.ok()) return fail(std::move(v), ratls_check::kCertificate, spki.status());
  if (!response.is_object() || !response.contains("evidence") || !response.contains("nonce") ||
      !response["nonce"].is_string()) {
    return fail(std::move(v), ratls_check::kEvidenceFormat,
                Status(StatusCode::kCorrupt,
                       "attestation answer lacks \"evidence\" or a string \"nonce\""));
  }
  // The answer must come from the key the TLS session is with: its "certificate" is only a
  // convenience, so a different one means a relay or a confused server, and is refused.
  if (response.contains("certificate")) {
    const json& c = response["certificate"];
    bool same = false;
    if (c.is_string()) {
      const std::string& pem = c.get_ref<const std::string&>();
      auto der = detail::certificate_der(
          std::span(reinterpret_cast<const uint8_t*>(pem.data()), pem.size()), "attestation");
      same = der.ok() && std::ranges::equal(*der, cert_der);
    }
    if (!same) {
      return fail(std::move(v), ratls_check::kKeyBinding,
                  "the attestation answer names a certificate other than the TLS peer's");
    }
  }
  v.checks_passed.emplace_back(ratls_check::kCertificate);
  if (response["nonce"].get<std::string>() != snp_hex(nonce)) {
    return fail(std::move(v), ratls_check::kNonceBinding,
                make_error(StatusCode::kIntegrity, "the attestation answer is for another nonce")
                    .with("nonce", response["nonce"].get<std::string>())
                    .with("expected", snp_hex(nonce)));
  }
  return verify_evidence(std::move(v), response["evidence"], ratls_report_data(*spki, nonce),
                         options, /*nonce_bound=*/true);
}

RaTlsVerification verify_ra_tls_evidence(const json& evidence,
                                         const std::array<uint8_t, 64>& expected_report_data,
                                         const RaTlsVerifyOptions& options, bool nonce_bound) {
  return verify_evidence(RaTlsVerification{}, evidence, expected_report_data, options, nonce_bound);
}

}  // namespace power::attest
