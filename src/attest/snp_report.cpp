#include "attest/snp_report.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace power::attest {
namespace {

// Offsets of ATTESTATION_REPORT fields (Firmware ABI spec, table "ATTESTATION_REPORT
// Structure"). One table so the parser reads like the spec.
constexpr size_t kOffVersion = 0x00;
constexpr size_t kOffGuestSvn = 0x04;
constexpr size_t kOffPolicy = 0x08;
constexpr size_t kOffFamilyId = 0x10;
constexpr size_t kOffImageId = 0x20;
constexpr size_t kOffVmpl = 0x30;
constexpr size_t kOffSignatureAlgo = 0x34;
constexpr size_t kOffCurrentTcb = 0x38;
constexpr size_t kOffPlatformInfo = 0x40;
constexpr size_t kOffKeyInfo = 0x48;  // bit 0 AUTHOR_KEY_EN, 1 MASK_CHIP_KEY, 4:2 SIGNING_KEY
constexpr size_t kOffReportData = 0x50;
constexpr size_t kOffMeasurement = 0x90;
constexpr size_t kOffHostData = 0xC0;
constexpr size_t kOffIdKeyDigest = 0xE0;
constexpr size_t kOffAuthorKeyDigest = 0x110;
constexpr size_t kOffReportId = 0x140;
constexpr size_t kOffReportIdMa = 0x160;
constexpr size_t kOffReportedTcb = 0x180;
constexpr size_t kOffCpuidFamId = 0x188;
constexpr size_t kOffCpuidModId = 0x189;
constexpr size_t kOffCpuidStep = 0x18A;
constexpr size_t kOffChipId = 0x1A0;
constexpr size_t kOffCommittedTcb = 0x1E0;
constexpr size_t kOffCurrentBuild = 0x1E8;
constexpr size_t kOffCurrentMinor = 0x1E9;
constexpr size_t kOffCurrentMajor = 0x1EA;
constexpr size_t kOffCommittedBuild = 0x1EC;
constexpr size_t kOffCommittedMinor = 0x1ED;
constexpr size_t kOffCommittedMajor = 0x1EE;
constexpr size_t kOffLaunchTcb = 0x1F0;
constexpr size_t kOffSignatureR = kSnpSignatureOffset;
constexpr size_t kOffSignatureS = kSnpSignatureOffset + kSnpSignatureComponentSize;

uint32_t load_u32(std::span<const uint8_t> b, size_t off) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | b[off + static_cast<size_t>(i)];
  return v;
}

uint64_t load_u64(std::span<const uint8_t> b, size_t off) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | b[off + static_cast<size_t>(i)];
  return v;
}

template <size_t N>
void load_bytes(std::span<const uint8_t> b, size_t off, std::array<uint8_t, N>& out) {
  std::memcpy(out.data(), b.data() + off, N);
}

}  // namespace

std::string_view snp_product_name(SnpProduct product) {
  switch (product) {
    case SnpProduct::kMilan:
      return "Milan";
    case SnpProduct::kGenoa:
      return "Genoa";
    case SnpProduct::kTurin:
      return "Turin";
    case SnpProduct::kUnknown:
      break;
  }
  return "unknown";
}

SnpProduct snp_product_from_name(std::string_view name) {
  if (name == "Milan") return SnpProduct::kMilan;
  if (name == "Genoa") return SnpProduct::kGenoa;
  if (name == "Turin") return SnpProduct::kTurin;
  return SnpProduct::kUnknown;
}

SnpProduct snp_product_from_cpuid(uint8_t family, uint8_t model) {
  if (family == 0x19) {
    if (model <= 0x0F) return SnpProduct::kMilan;
    if ((model >= 0x10 && model <= 0x1F) || (model >= 0xA0 && model <= 0xAF)) {
      return SnpProduct::kGenoa;
    }
  }
  if (family == 0x1A) return SnpProduct::kTurin;
  return SnpProduct::kUnknown;
}

Result<SnpTcb> decode_snp_tcb(uint64_t raw, SnpProduct product) {
  auto byte = [raw](int i) { return static_cast<uint8_t>(raw >> (8 * i)); };
  SnpTcb tcb;
  switch (product) {
    case SnpProduct::kMilan:
    case SnpProduct::kGenoa:
      tcb.bootloader = byte(0);
      tcb.tee = byte(1);
      tcb.snp = byte(6);
      tcb.microcode = byte(7);
      return tcb;
    case SnpProduct::kTurin:
      tcb.fmc = byte(0);
      tcb.bootloader = byte(1);
      tcb.tee = byte(2);
      tcb.snp = byte(3);
      tcb.microcode = byte(7);
      tcb.has_fmc = true;
      return tcb;
    case SnpProduct::kUnknown:
      break;
  }
  return make_error(StatusCode::kUnsupported,
                    "TCB_VERSION layout is unknown for this processor (product not identified)")
      .with("tcb_raw", fmt::format("{:#018x}", raw));
}

std::string snp_tcb_string(const SnpTcb& tcb) {
  std::string s = fmt::format("bootloader={} tee={} snp={} microcode={}", tcb.bootloader, tcb.tee,
                              tcb.snp, tcb.microcode);
  if (tcb.has_fmc) s += fmt::format(" fmc={}", tcb.fmc);
  return s;
}

Result<SnpReport> parse_snp_report(std::span<const uint8_t> b) {
  // Exact size: a longer buffer could hide bytes a verifier never looked at, and the
  // signature's position is fixed relative to the start.
  if (b.size() != kSnpReportSize) {
    return make_error(StatusCode::kCorrupt, "SEV-SNP report has the wrong size")
        .with("expected_bytes", kSnpReportSize)
        .with("actual_bytes", b.size());
  }
  SnpReport r;
  r.version = load_u32(b, kOffVersion);
  if (r.version < kSnpReportVersionMin || r.version > kSnpReportVersionMax) {
    return make_error(StatusCode::kUnsupported, "SEV-SNP report version is not supported")
        .with("version", r.version)
        .with("supported", fmt::format("{}..{}", kSnpReportVersionMin, kSnpReportVersionMax));
  }
  r.signature_algo = load_u32(b, kOffSignatureAlgo);
  if (r.signature_algo != kSnpSignatureAlgoEcdsaP384Sha384) {
    return make_error(StatusCode::kUnsupported,
                      "SEV-SNP report signature algorithm is not ECDSA P-384 with SHA-384")
        .with("signature_algo", r.signature_algo)
        .with("offset", kOffSignatureAlgo);
  }
  const uint32_t key_info = load_u32(b, kOffKeyInfo);
  r.author_key_en = (key_info & 1u) != 0;
  r.mask_chip_key = (key_info & 2u) != 0;
  const uint32_t signing_key = (key_info >> 2) & 7u;
  if (signing_key != 0 && signing_key != 1 && signing_key != 7) {
    return make_error(StatusCode::kCorrupt, "SEV-SNP report SIGNING_KEY has a reserved value")
        .with("signing_key", signing_key)
        .with("offset", kOffKeyInfo);
  }
  r.signing_key = static_cast<SnpSigningKey>(signing_key);

  r.guest_svn = load_u32(b, kOffGuestSvn);
  r.policy = load_u64(b, kOffPolicy);
  load_bytes(b, kOffFamilyId, r.family_id);
  load_bytes(b, kOffImageId, r.image_id);
  r.vmpl = load_u32(b, kOffVmpl);
  r.current_tcb = load_u64(b, kOffCurrentTcb);
  r.platform_info = load_u64(b, kOffPlatformInfo);
  load_bytes(b, kOffReportData, r.report_data);
  load_bytes(b, kOffMeasurement, r.measurement);
  load_bytes(b, kOffHostData, r.host_data);
  load_bytes(b, kOffIdKeyDigest, r.id_key_digest);
  load_bytes(b, kOffAuthorKeyDigest, r.author_key_digest);
  load_bytes(b, kOffReportId, r.report_id);
  load_bytes(b, kOffReportIdMa, r.report_id_ma);
  r.reported_tcb = load_u64(b, kOffReportedTcb);
  if (r.version >= 3) {
    r.cpuid_fam_id = b[kOffCpuidFamId];
    r.cpuid_mod_id = b[kOffCpuidModId];
    r.cpuid_step = b[kOffCpuidStep];
  }
  load_bytes(b, kOffChipId, r.chip_id);
  r.committed_tcb = load_u64(b, kOffCommittedTcb);
  r.current_build = b[kOffCurrentBuild];
  r.current_minor = b[kOffCurrentMinor];
  r.current_major = b[kOffCurrentMajor];
  r.committed_build = b[kOffCommittedBuild];
  r.committed_minor = b[kOffCommittedMinor];
  r.committed_major = b[kOffCommittedMajor];
  r.launch_tcb = load_u64(b, kOffLaunchTcb);
  load_bytes(b, kOffSignatureR, r.signature_r);
  load_bytes(b, kOffSignatureS, r.signature_s);
  return r;
}

}  // namespace power::attest
