#include "attest/x509_util.h"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/objects.h>
#include <openssl/pem.h>

#include <cstring>

namespace power::attest::detail {

// OpenSSL leaves reasons on a thread-local queue; a failed parse must not leave them for an
// unrelated later caller to misreport, so every failure path drains the queue into the message.
std::string drain_openssl_errors() {
  std::string out;
  unsigned long e = 0;
  while ((e = ERR_get_error()) != 0) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "no OpenSSL detail" : out;
}

namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct MdCtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
struct EcdsaSigFree {
  void operator()(ECDSA_SIG* s) const { ECDSA_SIG_free(s); }
};
struct BnFree {
  void operator()(BIGNUM* b) const { BN_free(b); }
};
struct ObjFree {
  void operator()(ASN1_OBJECT* o) const { ASN1_OBJECT_free(o); }
};

bool looks_like_pem(std::span<const uint8_t> bytes) {
  static constexpr std::string_view kBegin = "-----BEGIN";
  size_t i = 0;
  while (i < bytes.size() &&
         (bytes[i] == ' ' || bytes[i] == '\n' || bytes[i] == '\r' || bytes[i] == '\t')) {
    ++i;
  }
  return bytes.size() - i >= kBegin.size() &&
         std::memcmp(bytes.data() + i, kBegin.data(), kBegin.size()) == 0;
}

}  // namespace

Result<std::vector<uint8_t>> certificate_der(std::span<const uint8_t> pem_or_der,
                                             std::string_view what) {
  if (pem_or_der.empty()) {
    return make_error(StatusCode::kInvalidArgument, "{} certificate is empty", what);
  }
  if (!looks_like_pem(pem_or_der)) {
    return std::vector<uint8_t>(pem_or_der.begin(), pem_or_der.end());
  }
  std::unique_ptr<BIO, BioFree> bio(
      BIO_new_mem_buf(pem_or_der.data(), static_cast<int>(pem_or_der.size())));
  if (!bio) return make_error(StatusCode::kInternal, "BIO_new_mem_buf failed");
  X509Ptr cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (!cert) {
    return make_error(StatusCode::kCorrupt, "{} certificate PEM does not parse", what)
        .with("openssl", drain_openssl_errors());
  }
  const int len = i2d_X509(cert.get(), nullptr);
  if (len <= 0) return make_error(StatusCode::kInternal, "i2d_X509 failed");
  std::vector<uint8_t> der(static_cast<size_t>(len));
  uint8_t* p = der.data();
  i2d_X509(cert.get(), &p);
  return der;
}

Result<X509Ptr> parse_certificate_der(std::span<const uint8_t> der, std::string_view what) {
  const uint8_t* p = der.data();
  X509Ptr cert(d2i_X509(nullptr, &p, static_cast<long>(der.size())));
  if (!cert) {
    return make_error(StatusCode::kCorrupt, "{} certificate DER does not parse", what)
        .with("bytes", der.size())
        .with("openssl", drain_openssl_errors());
  }
  if (p != der.data() + der.size()) {
    return make_error(StatusCode::kCorrupt, "{} certificate has trailing bytes", what)
        .with("der_bytes", p - der.data())
        .with("total_bytes", der.size());
  }
  return cert;
}

namespace {

std::string common_name(const X509_NAME* name) {
  const int idx = X509_NAME_get_index_by_NID(name, NID_commonName, -1);
  if (idx < 0) return {};
  const ASN1_STRING* s = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, idx));
  return std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                     static_cast<size_t>(ASN1_STRING_length(s)));
}

}  // namespace

std::string subject_common_name(const X509* cert) {
  return common_name(X509_get_subject_name(cert));
}

std::string issuer_common_name(const X509* cert) {
  return common_name(X509_get_issuer_name(cert));
}

Status verify_rsa_pss_sha384(const X509* child, const X509* issuer, std::string_view child_name,
                             std::string_view issuer_name) {
  if (X509_NAME_cmp(X509_get_issuer_name(child), X509_get_subject_name(issuer)) != 0) {
    return make_error(StatusCode::kIntegrity, "{} was not issued by {} (issuer name differs)",
                      child_name, issuer_name)
        .with("issuer_cn_expected", subject_common_name(issuer));
  }
  // Pin the algorithm before verifying: a chain that verifies under a weaker scheme than AMD
  // uses is not AMD's chain.
  if (X509_get_signature_nid(child) != NID_rsassaPss) {
    return make_error(StatusCode::kIntegrity, "{} signature algorithm is not RSASSA-PSS",
                      child_name)
        .with("algorithm", OBJ_nid2sn(X509_get_signature_nid(child)));
  }
  int md_nid = NID_undef;
  int pk_nid = NID_undef;
  int sec_bits = 0;
  uint32_t flags = 0;
  if (X509_get_signature_info(const_cast<X509*>(child), &md_nid, &pk_nid, &sec_bits, &flags) != 1 ||
      md_nid != NID_sha384) {
    drain_openssl_errors();
    return make_error(StatusCode::kIntegrity, "{} RSASSA-PSS signature does not use SHA-384",
                      child_name)
        .with("digest", md_nid == NID_undef ? "unknown" : OBJ_nid2sn(md_nid));
  }
  EVP_PKEY* key = X509_get0_pubkey(issuer);
  if (key == nullptr || (EVP_PKEY_get_base_id(key) != EVP_PKEY_RSA &&
                         EVP_PKEY_get_base_id(key) != EVP_PKEY_RSA_PSS)) {
    drain_openssl_errors();
    return make_error(StatusCode::kIntegrity, "{} public key is not an RSA key", issuer_name);
  }
  if (X509_verify(const_cast<X509*>(child), key) != 1) {
    return make_error(StatusCode::kIntegrity, "{} signature does not verify under {}'s key",
                      child_name, issuer_name)
        .with("openssl", drain_openssl_errors());
  }
  return Status();
}

Status check_validity(const X509* cert, std::string_view what, time_t now) {
  time_t t = now;
  const int before = X509_cmp_time(X509_get0_notBefore(cert), &t);
  const int after = X509_cmp_time(X509_get0_notAfter(cert), &t);
  if (before == 0 || after == 0) {
    drain_openssl_errors();
    return make_error(StatusCode::kCorrupt, "{} certificate has an unreadable validity time", what);
  }
  if (before > 0) {
    return make_error(StatusCode::kIntegrity, "{} certificate is not yet valid", what)
        .with("now_unix", static_cast<int64_t>(now));
  }
  if (after < 0) {
    return make_error(StatusCode::kIntegrity, "{} certificate has expired", what)
        .with("now_unix", static_cast<int64_t>(now));
  }
  return Status();
}

Status check_ec_p384_key(const X509* cert, std::string_view what) {
  EVP_PKEY* key = X509_get0_pubkey(cert);
  if (key == nullptr || EVP_PKEY_get_base_id(key) != EVP_PKEY_EC) {
    drain_openssl_errors();
    return make_error(StatusCode::kIntegrity, "{} public key is not an EC key", what);
  }
  char group[64] = {};
  size_t len = 0;
  if (EVP_PKEY_get_group_name(key, group, sizeof(group), &len) != 1 ||
      std::string_view(group, len) != "secp384r1") {
    drain_openssl_errors();
    return make_error(StatusCode::kIntegrity, "{} public key is not on curve P-384", what)
        .with("curve", std::string_view(group, len));
  }
  return Status();
}

Status verify_ecdsa_p384_sha384_le(const X509* cert, std::span<const uint8_t> message,
                                   std::span<const uint8_t> r_le, std::span<const uint8_t> s_le) {
  // The report stores r and s little-endian; OpenSSL wants them as integers, so read them with
  // BN_lebin2bn and let i2d_ECDSA_SIG produce the DER that EVP_DigestVerify expects.
  std::unique_ptr<BIGNUM, BnFree> r(
      BN_lebin2bn(r_le.data(), static_cast<int>(r_le.size()), nullptr));
  std::unique_ptr<BIGNUM, BnFree> s(
      BN_lebin2bn(s_le.data(), static_cast<int>(s_le.size()), nullptr));
  std::unique_ptr<ECDSA_SIG, EcdsaSigFree> sig(ECDSA_SIG_new());
  if (!r || !s || !sig) return make_error(StatusCode::kInternal, "BIGNUM allocation failed");
  if (BN_is_zero(r.get()) || BN_is_zero(s.get())) {
    return make_error(StatusCode::kIntegrity, "report signature is zero (unsigned report)");
  }
  ECDSA_SIG_set0(sig.get(), r.release(), s.release());  // sig owns r and s now
  uint8_t* der = nullptr;
  const int der_len = i2d_ECDSA_SIG(sig.get(), &der);
  if (der_len <= 0) return make_error(StatusCode::kInternal, "i2d_ECDSA_SIG failed");
  std::unique_ptr<uint8_t, void (*)(uint8_t*)> der_owner(der, [](uint8_t* p) { OPENSSL_free(p); });
  std::unique_ptr<EVP_MD_CTX, MdCtxFree> ctx(EVP_MD_CTX_new());
  EVP_PKEY* key = X509_get0_pubkey(cert);
  if (!ctx || key == nullptr ||
      EVP_DigestVerifyInit(ctx.get(), nullptr, EVP_sha384(), nullptr, key) != 1) {
    return make_error(StatusCode::kInternal, "EVP_DigestVerifyInit failed")
        .with("openssl", drain_openssl_errors());
  }
  if (EVP_DigestVerify(ctx.get(), der, static_cast<size_t>(der_len), message.data(),
                       message.size()) != 1) {
    drain_openssl_errors();
    return make_error(StatusCode::kIntegrity,
                      "report signature does not verify under the endorsement key (ECDSA P-384 "
                      "SHA-384 over bytes [0, 0x2A0))");
  }
  return Status();
}

Result<std::optional<std::vector<uint8_t>>> extension_value(const X509* cert, const char* oid) {
  std::unique_ptr<ASN1_OBJECT, ObjFree> obj(OBJ_txt2obj(oid, 1));
  if (!obj) return make_error(StatusCode::kInternal, "bad OID {}", oid);
  const int idx = X509_get_ext_by_OBJ(cert, obj.get(), -1);
  if (idx < 0) return std::optional<std::vector<uint8_t>>();
  if (X509_get_ext_by_OBJ(cert, obj.get(), idx) >= 0) {
    return make_error(StatusCode::kCorrupt, "certificate repeats extension {}", oid);
  }
  const ASN1_OCTET_STRING* data = X509_EXTENSION_get_data(X509_get_ext(cert, idx));
  const uint8_t* p = ASN1_STRING_get0_data(data);
  return std::optional<std::vector<uint8_t>>(std::vector<uint8_t>(p, p + ASN1_STRING_length(data)));
}

std::string base64_encode(std::span<const uint8_t> bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<uint8_t*>(out.data()), bytes.data(),
                                static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

Result<std::vector<uint8_t>> base64_decode(std::string_view text) {
  // EVP_DecodeBlock skips leading/trailing whitespace and ignores padding in its length, so
  // check the shape first and account for '=' ourselves.
  if (text.size() % 4 != 0) {
    return make_error(StatusCode::kCorrupt, "base64 length is not a multiple of 4")
        .with("chars", text.size());
  }
  size_t pad = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const bool alnum = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    if (c == '=') {
      if (i + 2 < text.size()) {
        return make_error(StatusCode::kCorrupt, "base64 padding in the middle").with("offset", i);
      }
      ++pad;
    } else if (!alnum && c != '+' && c != '/') {
      return make_error(StatusCode::kCorrupt, "base64 has a character outside its alphabet")
          .with("offset", i);
    } else if (pad != 0) {
      return make_error(StatusCode::kCorrupt, "base64 data after padding").with("offset", i);
    }
  }
  std::vector<uint8_t> out(text.size() / 4 * 3);
  const int n = EVP_DecodeBlock(out.data(), reinterpret_cast<const uint8_t*>(text.data()),
                                static_cast<int>(text.size()));
  if (n < 0) return make_error(StatusCode::kCorrupt, "base64 does not decode");
  out.resize(static_cast<size_t>(n) - pad);
  return out;
}

}  // namespace power::attest::detail
