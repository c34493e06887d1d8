// OpenSSL helpers for the attestation verifier: RAII handles, certificate decoding (PEM or
// DER), AMD's RSA-PSS chain signatures, the report's ECDSA P-384 signature, AMD's X.509
// extensions, and base64. Private to power_attest (its public headers carry no OpenSSL types).
//
// Contract: every input is untrusted; functions return Status/Result and never abort.
// Thread-safety: pure functions; OpenSSL 3 is thread-safe for these calls.
#pragma once

#include <openssl/x509.h>

#include <cstdint>
#include <ctime>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace power::attest::detail {

struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
using X509Ptr = std::unique_ptr<X509, X509Free>;

// DER bytes of one certificate given as PEM ("-----BEGIN CERTIFICATE-----", the first one) or
// as DER. `what` names the certificate in errors ("VCEK", "ASK").
Result<std::vector<uint8_t>> certificate_der(std::span<const uint8_t> pem_or_der,
                                             std::string_view what);
// Parses exactly one DER certificate; trailing bytes are an error.
Result<X509Ptr> parse_certificate_der(std::span<const uint8_t> der, std::string_view what);
// The CN of the subject / issuer name; empty when absent.
std::string subject_common_name(const X509* cert);
std::string issuer_common_name(const X509* cert);
// Checks `child`'s signature with `issuer`'s public key: the algorithm must be RSASSA-PSS with
// SHA-384 (what AMD's KDS uses for ARK, ASK, ASVK, VCEK and VLEK) and the issuer name must be
// the issuer's subject.
Status verify_rsa_pss_sha384(const X509* child, const X509* issuer, std::string_view child_name,
                             std::string_view issuer_name);
// notBefore <= now <= notAfter.
Status check_validity(const X509* cert, std::string_view what, time_t now);
// The certificate's key must be ECDSA P-384 (the only key AMD issues for VCEK/VLEK).
Status check_ec_p384_key(const X509* cert, std::string_view what);
// ECDSA P-384 + SHA-384 over `message`; r and s little-endian (as in the SNP report).
Status verify_ecdsa_p384_sha384_le(const X509* cert, std::span<const uint8_t> message,
                                   std::span<const uint8_t> r_le, std::span<const uint8_t> s_le);
// The raw contents (extnValue) of the extension with dotted OID `oid`; nullopt when absent, an
// error when it appears twice.
Result<std::optional<std::vector<uint8_t>>> extension_value(const X509* cert, const char* oid);

// Empties OpenSSL's thread-local error queue into one line ("no OpenSSL detail" when empty), so
// a failure's reasons are reported with it and not left for an unrelated later caller.
std::string drain_openssl_errors();

std::string base64_encode(std::span<const uint8_t> bytes);
// Standard alphabet with padding; whitespace is not accepted.
Result<std::vector<uint8_t>> base64_decode(std::string_view text);

}  // namespace power::attest::detail
