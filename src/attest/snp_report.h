// AMD SEV-SNP ATTESTATION_REPORT: the 0x4A0-byte structure of AMD's "SEV Secure Nested Paging
// Firmware ABI Specification" (table "ATTESTATION_REPORT Structure"), parsed from untrusted bytes.
//
// Contract: parse_snp_report() never aborts; it rejects a wrong size, an unknown report version
// and an unknown signature algorithm. It does not check the signature (snp_verify.h does). All
// multi-byte integers in the report are little-endian; byte arrays are kept as they appear.
// Reserved fields are not checked for zero: the spec has reused reserved space in later versions
// (cpuid fields in v3, mitigation vectors in v5), and every byte below 0x2A0 is covered by the
// signature anyway.
// Thread-safety: values and pure functions.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "base/status.h"

namespace power::attest {

inline constexpr size_t kSnpReportSize = 0x4A0;
// The signature covers bytes [0, 0x2A0); r and s follow at 0x2A0 and 0x2E8.
inline constexpr size_t kSnpSignedSize = 0x2A0;
inline constexpr size_t kSnpSignatureOffset = 0x2A0;
// r and s are each 72 bytes, little-endian, zero-padded above the 48 bytes of a P-384 scalar.
inline constexpr size_t kSnpSignatureComponentSize = 72;
inline constexpr uint32_t kSnpSignatureAlgoEcdsaP384Sha384 = 1;
// Report versions this parser knows (2: first SNP release; 3 adds cpuid fields; 5 adds
// mitigation vectors in reserved space).
inline constexpr uint32_t kSnpReportVersionMin = 2;
inline constexpr uint32_t kSnpReportVersionMax = 5;
// Guest policy bit 19: the hypervisor may debug the guest (read and write its memory).
inline constexpr uint64_t kSnpPolicyDebugBit = uint64_t{1} << 19;

// The processor generation: it decides the TCB_VERSION layout and the AMD root of trust.
enum class SnpProduct : uint8_t { kUnknown, kMilan, kGenoa, kTurin };
std::string_view snp_product_name(SnpProduct product);
// "Milan", "Genoa", "Turin" (case-sensitive, as in AMD's certificate names); else kUnknown.
SnpProduct snp_product_from_name(std::string_view name);
// From the report's CPUID fields (version >= 3 only): family 0x19 models 0x00-0x0F Milan,
// 0x10-0x1F and 0xA0-0xAF Genoa; family 0x1A Turin. kUnknown otherwise.
SnpProduct snp_product_from_cpuid(uint8_t family, uint8_t model);

// Which key signed the report (the report's SIGNING_KEY field).
enum class SnpSigningKey : uint8_t { kVcek = 0, kVlek = 1, kNone = 7 };

// A decoded TCB_VERSION. Milan and Genoa: byte 0 boot loader, 1 TEE, 2-5 reserved, 6 SNP,
// 7 microcode. Turin moved the fields and added FMC: byte 0 FMC, 1 boot loader, 2 TEE, 3 SNP,
// 4-6 reserved, 7 microcode. has_fmc says whether fmc is meaningful.
struct SnpTcb {
  uint8_t bootloader = 0;
  uint8_t tee = 0;
  uint8_t snp = 0;
  uint8_t microcode = 0;
  uint8_t fmc = 0;
  bool has_fmc = false;

  bool operator==(const SnpTcb&) const = default;
};
// kUnknown is refused (the layout is not known) rather than guessed.
Result<SnpTcb> decode_snp_tcb(uint64_t raw, SnpProduct product);
// "bootloader=3 tee=0 snp=8 microcode=115" (plus " fmc=N" for Turin).
std::string snp_tcb_string(const SnpTcb& tcb);

struct SnpReport {
  uint32_t version = 0;
  uint32_t guest_svn = 0;
  uint64_t policy = 0;
  std::array<uint8_t, 16> family_id{};
  std::array<uint8_t, 16> image_id{};
  uint32_t vmpl = 0;
  uint32_t signature_algo = 0;
  uint64_t current_tcb = 0;
  uint64_t platform_info = 0;
  bool author_key_en = false;
  bool mask_chip_key = false;  // chip_id is zero: the guest asked not to reveal it
  SnpSigningKey signing_key = SnpSigningKey::kVcek;
  std::array<uint8_t, 64> report_data{};
  std::array<uint8_t, 48> measurement{};
  std::array<uint8_t, 32> host_data{};
  std::array<uint8_t, 48> id_key_digest{};
  std::array<uint8_t, 48> author_key_digest{};
  std::array<uint8_t, 32> report_id{};
  std::array<uint8_t, 32> report_id_ma{};
  uint64_t reported_tcb = 0;
  // Version >= 3 only; zero in older reports.
  uint8_t cpuid_fam_id = 0;
  uint8_t cpuid_mod_id = 0;
  uint8_t cpuid_step = 0;
  std::array<uint8_t, 64> chip_id{};
  uint64_t committed_tcb = 0;
  uint8_t current_build = 0;
  uint8_t current_minor = 0;
  uint8_t current_major = 0;
  uint8_t committed_build = 0;
  uint8_t committed_minor = 0;
  uint8_t committed_major = 0;
  uint64_t launch_tcb = 0;
  // As stored: little-endian, 72 bytes each.
  std::array<uint8_t, kSnpSignatureComponentSize> signature_r{};
  std::array<uint8_t, kSnpSignatureComponentSize> signature_s{};

  bool debug_allowed() const { return (policy & kSnpPolicyDebugBit) != 0; }
};

Result<SnpReport> parse_snp_report(std::span<const uint8_t> bytes);

}  // namespace power::attest
