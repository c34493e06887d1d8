// Verifier for AMD SEV-SNP attestation evidence (the client side of RA-TLS, `power attest
// verify`), plus the report_data binding that the server side computes with the same function.
//
// verify_snp() runs these checks in this order and stops at the first failure; each has a
// stable name (snp_check::k*), reported in SnpVerification::failed_check and in the Status's
// "check" context:
//   report_format   the report is 1184 bytes, version 2..5, ECDSA P-384 SHA-384 (snp_report.h)
//   ark_root        the ARK's DER SHA-256 is a pinned root (built-in Milan/Genoa/Turin, or the
//                   policy's trusted_ark_sha256, which then replaces the built-ins)
//   ark_signature   the ARK is self-signed with RSASSA-PSS SHA-384
//   ask_signature   the ASK (ASVK for a VLEK) is issued and RSASSA-PSS-SHA-384-signed by the ARK
//   vcek_chain      the VCEK (or VLEK) is issued and RSASSA-PSS-SHA-384-signed by the ASK/ASVK
//   cert_validity   ARK, ASK and VCEK are within notBefore..notAfter at the policy's time
//   signing_key     the report's SIGNING_KEY names the kind of key given (VCEK: "SEV-VCEK"
//                   under "SEV-<product>"; VLEK: "SEV-VLEK" under "SEV-VLEK-<product>"), and that
//                   key is ECDSA P-384
//   report_signature  ECDSA P-384 SHA-384 over report bytes [0, 0x2A0) with the VCEK's key
//   tcb             the VCEK's AMD extensions (blSPL, teeSPL, snpSPL, ucodeSPL, Turin fmcSPL)
//                   equal the report's REPORTED_TCB
//   chip_id         the VCEK's hwID equals the report's CHIP_ID (skipped for a VLEK, which is
//                   not chip-specific, and when the report has MASK_CHIP_KEY set)
//   debug_policy    guest policy bit 19 (DEBUG) is clear unless the policy allows debug
//   vmpl            the report's VMPL <= max_vmpl
//   min_tcb         current, committed and reported TCB are each >= min_tcb, per component
//   measurement     the launch measurement is one of the pinned measurements
//   host_data, id_key_digest   equal the pinned values
//   report_data     REPORT_DATA equals the expected 64 bytes (the key binding)
// A check with nothing to compare (a policy value left unset, chip_id for a VLEK or a masked
// chip id) is listed in checks_skipped rather than checks_passed.
//
// Thread-safety: pure functions over values. Ownership: SnpEvidence owns its bytes.
#pragma once

#include <array>
#include <cstdint>
#include <ctime>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "attest/snp_report.h"
#include "base/status.h"

namespace power::attest {

namespace snp_check {
inline constexpr std::string_view kReportFormat = "report_format";
inline constexpr std::string_view kArkRoot = "ark_root";
inline constexpr std::string_view kArkSignature = "ark_signature";
inline constexpr std::string_view kAskSignature = "ask_signature";
inline constexpr std::string_view kVcekChain = "vcek_chain";
inline constexpr std::string_view kCertValidity = "cert_validity";
inline constexpr std::string_view kSigningKey = "signing_key";
inline constexpr std::string_view kReportSignature = "report_signature";
inline constexpr std::string_view kTcb = "tcb";
inline constexpr std::string_view kChipId = "chip_id";
inline constexpr std::string_view kDebugPolicy = "debug_policy";
inline constexpr std::string_view kVmpl = "vmpl";
inline constexpr std::string_view kMinTcb = "min_tcb";
inline constexpr std::string_view kMeasurement = "measurement";
inline constexpr std::string_view kHostData = "host_data";
inline constexpr std::string_view kIdKeyDigest = "id_key_digest";
inline constexpr std::string_view kReportData = "report_data";
}  // namespace snp_check

// The RA-TLS key binding, computed identically by the server (into the report request) and by
// the client (into SnpPolicy::report_data):
//   bytes  0..31 = SHA-256(DER SubjectPublicKeyInfo of the TLS key)
//   bytes 32..63 = SHA-256(nonce), or 32 zero bytes when the nonce is empty (no nonce)
// Hashing the nonce makes any nonce length fit and keeps the two halves independent.
std::array<uint8_t, 64> ratls_report_data(std::span<const uint8_t> spki_der,
                                          std::span<const uint8_t> nonce);

// What the verifier is given: the raw report and DER certificates. `ask` and `ark` may be
// empty, and then the built-in ones for the VCEK's product are used (VCEK only: a VLEK's ASVK is
// not built in).
struct SnpEvidence {
  std::vector<uint8_t> report;  // 1184 bytes
  std::vector<uint8_t> vcek;    // VCEK, or VLEK when the report's SIGNING_KEY is 1; DER
  std::vector<uint8_t> ask;     // ASK (ASVK for a VLEK); DER; may be empty
  std::vector<uint8_t> ark;     // ARK; DER; may be empty

  // Certificates given as PEM or DER (converted to DER).
  static Result<SnpEvidence> from_parts(std::span<const uint8_t> report,
                                        std::span<const uint8_t> vcek_pem_or_der,
                                        std::span<const uint8_t> ask_pem_or_der = {},
                                        std::span<const uint8_t> ark_pem_or_der = {});
  // {"type":"sev-snp","report":"<base64>","vcek":"<base64 DER or PEM>","ask":..., "ark":...}
  // "ask" and "ark" are optional; unknown keys are errors (strict, like the policy).
  static Result<SnpEvidence> from_json(const nlohmann::json& j);
  static Result<SnpEvidence> from_json_text(std::string_view text);
  // The compact form: base64 of DER, "ask"/"ark" omitted when empty. Its dump() is what the
  // server puts in the certificate extension and in GET /v1/attestation.
  nlohmann::json to_json() const;
  std::string to_json_text() const;
};

// Minimum TCB, per component (a component left 0 accepts anything).
struct SnpMinTcb {
  uint8_t bootloader = 0;
  uint8_t tee = 0;
  uint8_t snp = 0;
  uint8_t microcode = 0;
  uint8_t fmc = 0;  // Turin only; ignored for Milan/Genoa
};

// The caller's acceptance policy. Defaults accept any genuine, non-debug report; pin what the
// deployment knows (measurement, report_data at least).
struct SnpPolicy {
  // Accept when the measurement is any of these; empty pins nothing.
  std::vector<std::array<uint8_t, 48>> measurements;
  // The expected REPORT_DATA (ratls_report_data() for RA-TLS).
  std::optional<std::array<uint8_t, 64>> report_data;
  bool allow_debug = false;
  std::optional<uint32_t> max_vmpl;
  std::optional<SnpMinTcb> min_tcb;
  std::optional<std::array<uint8_t, 32>> host_data;
  std::optional<std::array<uint8_t, 48>> id_key_digest;
  // SHA-256 of trusted ARK DER certificates. Empty: the built-in AMD roots. Non-empty: exactly
  // these (the built-ins are then not trusted unless listed).
  std::vector<std::array<uint8_t, 32>> trusted_ark_sha256;
  // Certificate dates are checked at verify_time_unix, or at the current time when unset.
  bool check_cert_validity = true;
  std::optional<int64_t> verify_time_unix;

  // Strict JSON: unknown keys and wrong types are errors. Keys (all optional):
  //   "type": "sev-snp", "measurements": [hex96...], "report_data": hex128,
  //   "allow_debug": bool, "max_vmpl": 0..3, "min_tcb": {"bootloader","tee","snp","microcode",
  //   "fmc": 0..255}, "host_data": hex64, "id_key_digest": hex96, "trusted_ark_sha256": [hex64],
  //   "check_cert_validity": bool, "verify_time_unix": int
  static Result<SnpPolicy> from_json(const nlohmann::json& j);
  static Result<SnpPolicy> from_json_text(std::string_view text);
};

struct SnpVerification {
  Status status;                              // ok, or the first failed check's error
  std::string failed_check;                   // empty when ok; a snp_check name
  std::vector<std::string> checks_passed;     // in the order run
  std::vector<std::string> checks_skipped;    // nothing to compare (see the header comment)
  std::optional<SnpReport> report;            // once report_format passed
  SnpProduct product = SnpProduct::kUnknown;  // once the chain is established

  bool ok() const { return status.ok(); }
};

SnpVerification verify_snp(const SnpEvidence& evidence, const SnpPolicy& policy);
// Only the policy checks (debug_policy through report_data) over a report whose signature and
// chain the caller has already established; verify_snp() runs exactly these after its own.
SnpVerification check_snp_policy(const SnpReport& report, SnpProduct product,
                                 const SnpPolicy& policy);

// The AMD extensions of a VCEK/VLEK certificate (OID arc 1.3.6.1.4.1.3704.1).
struct SnpCertTcb {
  std::optional<uint8_t> bootloader;  // .3.1 blSPL
  std::optional<uint8_t> tee;         // .3.2 teeSPL
  std::optional<uint8_t> snp;         // .3.3 snpSPL
  std::optional<uint8_t> microcode;   // .3.8 ucodeSPL
  std::optional<uint8_t> fmc;         // .3.9 fmcSPL (Turin)
  std::vector<uint8_t> hw_id;         // .4 hwID: 64 bytes (Milan, Genoa) or 8 (Turin); VCEK only
  std::string product_name;           // .2 productName, e.g. "Milan-B0", "Genoa"
};
Result<SnpCertTcb> read_snp_cert_tcb(std::span<const uint8_t> cert_der);
// The "tcb" check: every SPL the product defines is present and equals REPORTED_TCB's.
Status check_snp_tcb(const SnpReport& report, const SnpCertTcb& cert, SnpProduct product);
// The "chip_id" check for a VCEK: hw_id equals the first hw_id.size() bytes of CHIP_ID (all 64
// on Milan/Genoa; Turin's hwID is 8 bytes).
Status check_snp_chip_id(const SnpReport& report, const SnpCertTcb& cert);

// Hex helpers for policies and messages (lowercase out; either case in).
std::string snp_hex(std::span<const uint8_t> bytes);
Status parse_snp_hex(std::string_view hex, std::span<uint8_t> out, std::string_view what);

}  // namespace power::attest
