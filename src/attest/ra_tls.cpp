#include "attest/ra_tls.h"

#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/evp.h>
#include <openssl/objects.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <fmt/format.h>

#include "attest/snp_verify.h"
#include "attest/x509_util.h"

namespace power::attest {
namespace {

using detail::drain_openssl_errors;

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct ExtFree {
  void operator()(X509_EXTENSION* e) const { X509_EXTENSION_free(e); }
};
struct ObjFree {
  void operator()(ASN1_OBJECT* o) const { ASN1_OBJECT_free(o); }
};
struct OctetFree {
  void operator()(ASN1_OCTET_STRING* s) const { ASN1_OCTET_STRING_free(s); }
};
struct Utf8Free {
  void operator()(ASN1_UTF8STRING* s) const { ASN1_UTF8STRING_free(s); }
};
struct BnFree {
  void operator()(BIGNUM* b) const { BN_free(b); }
};

Status openssl_error(std::string_view what) {
  return make_error(StatusCode::kInternal, "{} failed", what)
      .with("openssl", drain_openssl_errors());
}

Status add_conf_extension(X509* cert, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, cert, cert, nullptr, nullptr, 0);
  std::unique_ptr<X509_EXTENSION, ExtFree> ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value));
  if (!ext || X509_add_ext(cert, ext.get(), -1) != 1) return openssl_error(value);
  return Status();
}

// extnValue = DER UTF8String of the compact JSON: X.509 wants DER inside the OCTET STRING, and a
// string type lets generic tools (openssl x509 -text) show the evidence readably.
Status add_evidence_extension(X509* cert, const std::string& json_text) {
  std::unique_ptr<ASN1_UTF8STRING, Utf8Free> text(ASN1_UTF8STRING_new());
  if (!text ||
      ASN1_STRING_set(text.get(), json_text.data(), static_cast<int>(json_text.size())) != 1) {
    return openssl_error("ASN1_STRING_set");
  }
  unsigned char* der = nullptr;
  const int der_len = i2d_ASN1_UTF8STRING(text.get(), &der);
  if (der_len <= 0) return openssl_error("i2d_ASN1_UTF8STRING");
  std::unique_ptr<ASN1_OCTET_STRING, OctetFree> value(ASN1_OCTET_STRING_new());
  const int set = value ? ASN1_OCTET_STRING_set(value.get(), der, der_len) : 0;
  OPENSSL_free(der);
  if (set != 1) return openssl_error("ASN1_OCTET_STRING_set");
  std::unique_ptr<ASN1_OBJECT, ObjFree> oid(OBJ_txt2obj(kRaTlsEvidenceOid, 1));
  if (!oid) return openssl_error("OBJ_txt2obj");
  std::unique_ptr<X509_EXTENSION, ExtFree> ext(
      X509_EXTENSION_create_by_OBJ(nullptr, oid.get(), /*crit=*/0, value.get()));
  if (!ext || X509_add_ext(cert, ext.get(), -1) != 1) return openssl_error("X509_add_ext");
  return Status();
}

Result<std::vector<uint8_t>> spki_of(EVP_PKEY* key) {
  unsigned char* der = nullptr;
  const int len = i2d_PUBKEY(key, &der);
  if (len <= 0) return openssl_error("i2d_PUBKEY");
  std::vector<uint8_t> out(der, der + len);
  OPENSSL_free(der);
  return out;
}

Status set_random_serial(X509* cert) {
  // 128 random bits, top bit cleared so the INTEGER is positive (RFC 5280 4.1.2.2).
  uint8_t bytes[16];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) return openssl_error("RAND_bytes");
  bytes[0] &= 0x7F;
  bytes[0] |= 0x01 << 6;  // never a leading zero octet
  std::unique_ptr<BIGNUM, BnFree> bn(BN_bin2bn(bytes, sizeof(bytes), nullptr));
  if (!bn || BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(cert)) == nullptr) {
    return openssl_error("serial number");
  }
  return Status();
}

RaTlsEvidenceProvider tee_provider(TeeKind kind, TeeEvidenceOptions options) {
  return [kind, options = std::move(options)](const std::array<uint8_t, 64>& report_data) {
    return tee_evidence(kind, report_data, options);
  };
}

Result<std::string> evidence_type_of(const nlohmann::json& evidence) {
  if (!evidence.is_object() || !evidence.contains("type") || !evidence["type"].is_string()) {
    return make_error(StatusCode::kInternal, "evidence provider returned JSON without a type");
  }
  std::string type = evidence["type"].get<std::string>();
  if (type != "sev-snp" && type != "tdx" && type != "development") {
    return make_error(StatusCode::kInternal, "evidence provider returned an unknown type")
        .with("type", type);
  }
  return type;
}

}  // namespace

void RaTlsIdentity::X509Free::operator()(X509* x) const {
  X509_free(x);
}
void RaTlsIdentity::PkeyFree::operator()(EVP_PKEY* k) const {
  EVP_PKEY_free(k);
}

RaTlsIdentity::RaTlsIdentity(RaTlsIdentity&&) noexcept = default;
RaTlsIdentity& RaTlsIdentity::operator=(RaTlsIdentity&&) noexcept = default;
RaTlsIdentity::~RaTlsIdentity() = default;

Result<RaTlsMode> parse_ra_tls_mode(std::string_view text) {
  if (text == "auto") return RaTlsMode::kAuto;
  if (text == "sev-snp") return RaTlsMode::kSevSnp;
  if (text == "tdx") return RaTlsMode::kTdx;
  if (text == "development") return RaTlsMode::kDevelopment;
  return make_error(StatusCode::kInvalidArgument,
                    "RA-TLS mode must be auto, sev-snp, tdx or development")
      .with("mode", text);
}

std::string_view ra_tls_mode_name(RaTlsMode mode) {
  switch (mode) {
    case RaTlsMode::kAuto:
      return "auto";
    case RaTlsMode::kSevSnp:
      return "sev-snp";
    case RaTlsMode::kTdx:
      return "tdx";
    case RaTlsMode::kDevelopment:
      return "development";
  }
  return "unknown";
}

nlohmann::json ra_tls_development_evidence(const std::array<uint8_t, 64>& report_data) {
  return {{"type", "development"}, {"report_data", snp_hex(report_data)}};
}

Result<std::vector<uint8_t>> parse_ra_tls_nonce(std::string_view hex) {
  if (hex.empty() || hex.size() % 2 != 0 || hex.size() > 2 * kRaTlsNonceMaxBytes) {
    return make_error(StatusCode::kInvalidArgument,
                      "nonce must be 2 to {} hex digits (1 to {} bytes), an even number",
                      2 * kRaTlsNonceMaxBytes, kRaTlsNonceMaxBytes)
        .with("hex_digits", hex.size());
  }
  std::vector<uint8_t> out(hex.size() / 2);
  POWER_RETURN_IF_ERROR(parse_snp_hex(hex, out, "nonce"));
  return out;
}

Result<RaTlsIdentity> RaTlsIdentity::create(RaTlsMode mode, const RaTlsOptions& options) {
  RaTlsIdentity id;
  // The evidence source is settled before the key exists: a machine without a TEE refuses now,
  // with the places it looked, rather than after serving anything.
  if (options.evidence_provider) {
    id.provider_ = options.evidence_provider;
  } else if (mode == RaTlsMode::kDevelopment) {
    id.provider_ = [](const std::array<uint8_t, 64>& rd) -> Result<nlohmann::json> {
      return ra_tls_development_evidence(rd);
    };
  } else {
    TeeKind kind = mode == RaTlsMode::kTdx ? TeeKind::kTdx : TeeKind::kSevSnp;
    if (mode == RaTlsMode::kAuto) {
      POWER_ASSIGN_OR_RETURN(kind, detect_tee(options.tee));
    }
    id.provider_ = tee_provider(kind, options.tee);
  }

  id.key_.reset(EVP_EC_gen("P-256"));
  if (!id.key_) return openssl_error("EVP_EC_gen(P-256)");
  POWER_ASSIGN_OR_RETURN(id.spki_der_, spki_of(id.key_.get()));
  POWER_ASSIGN_OR_RETURN(id.evidence_, id.provider_(ratls_report_data(id.spki_der_, {})));
  POWER_ASSIGN_OR_RETURN(id.evidence_type_, evidence_type_of(id.evidence_));

  id.cert_.reset(X509_new());
  X509* cert = id.cert_.get();
  if (!cert || X509_set_version(cert, 2) != 1) return openssl_error("X509_new");
  POWER_RETURN_IF_ERROR(set_random_serial(cert));
  // An hour of slack before now for clients whose clocks run behind.
  if (!X509_gmtime_adj(X509_getm_notBefore(cert), -3600) ||
      !X509_gmtime_adj(X509_getm_notAfter(cert), kRaTlsValiditySeconds)) {
    return openssl_error("X509_gmtime_adj");
  }
  X509_NAME* name = X509_get_subject_name(cert);
  if (X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                                 reinterpret_cast<const unsigned char*>(kRaTlsCommonName), -1, -1,
                                 0) != 1 ||
      X509_set_issuer_name(cert, name) != 1 || X509_set_pubkey(cert, id.key_.get()) != 1) {
    return openssl_error("certificate name/key");
  }
  POWER_RETURN_IF_ERROR(add_conf_extension(cert, NID_basic_constraints, "critical,CA:FALSE"));
  POWER_RETURN_IF_ERROR(add_conf_extension(cert, NID_key_usage, "critical,digitalSignature"));
  POWER_RETURN_IF_ERROR(add_conf_extension(cert, NID_ext_key_usage, "serverAuth"));
  POWER_RETURN_IF_ERROR(
      add_conf_extension(cert, NID_subject_alt_name, "DNS:localhost,IP:127.0.0.1"));
  POWER_RETURN_IF_ERROR(add_evidence_extension(cert, id.evidence_.dump()));
  if (X509_sign(cert, id.key_.get(), EVP_sha256()) <= 0) return openssl_error("X509_sign");

  unsigned char* der = nullptr;
  const int der_len = i2d_X509(cert, &der);
  if (der_len <= 0) return openssl_error("i2d_X509");
  id.cert_der_.assign(der, der + der_len);
  OPENSSL_free(der);
  std::unique_ptr<BIO, BioFree> bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509(bio.get(), cert) != 1) return openssl_error("PEM_write_bio_X509");
  char* pem = nullptr;
  const long pem_len = BIO_get_mem_data(bio.get(), &pem);
  id.cert_pem_.assign(pem, static_cast<size_t>(pem_len));
  return id;
}

Result<nlohmann::json> RaTlsIdentity::fresh_evidence(std::span<const uint8_t> nonce) const {
  if (nonce.empty() || nonce.size() > kRaTlsNonceMaxBytes) {
    return make_error(StatusCode::kInvalidArgument, "nonce must be 1 to {} bytes",
                      kRaTlsNonceMaxBytes)
        .with("bytes", nonce.size());
  }
  const std::array<uint8_t, 64> report_data = ratls_report_data(spki_der_, nonce);
  POWER_ASSIGN_OR_RETURN(nlohmann::json evidence, provider_(report_data));
  POWER_ASSIGN_OR_RETURN(std::string type, evidence_type_of(evidence));
  return nlohmann::json{{"type", type},
                        {"evidence", std::move(evidence)},
                        {"certificate", cert_pem_},
                        {"nonce", snp_hex(nonce)},
                        {"report_data", snp_hex(report_data)}};
}

}  // namespace power::attest
