// Attestation evidence from the TEE this process runs in (the server side of RA-TLS): asks the
// guest kernel for a report whose REPORT_DATA is the caller's 64 bytes.
//
//   configfs-tsm  /sys/kernel/config/tsm/report (Linux 6.7+): mkdir a report directory, write
//                 inblob, read outblob (SEV-SNP report or TDX quote) and, for SEV-SNP, auxblob
//                 (the host's certificate table); `provider` says sev_guest or tdx_guest.
//   /dev/sev-guest  SNP_GET_EXT_REPORT (report + certificate table), falling back to
//                 SNP_GET_REPORT (report only) when the host offers no certificates.
//
// SEV-SNP evidence must carry a VCEK (the verifier has no network); when the host supplies
// none, TeeEvidenceOptions::snp_vcek_file names one fetched from AMD's KDS.
// Thread-safety: each call uses its own configfs directory / ioctl; calls may run concurrently.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace power::attest {

inline constexpr const char* kTsmReportDirDefault = "/sys/kernel/config/tsm/report";
inline constexpr const char* kSevGuestDeviceDefault = "/dev/sev-guest";

enum class TeeKind { kSevSnp, kTdx };

struct TeeEvidenceOptions {
  // Where to look; tests point these at directories that do not exist.
  std::string tsm_report_dir = kTsmReportDirDefault;
  std::string sev_guest_device = kSevGuestDeviceDefault;
  // A VCEK (PEM or DER) used when the host's certificate table has none.
  std::string snp_vcek_file;
  // SEV-SNP VMPL requested; unset: configfs's privlevel_floor, or 0 through /dev/sev-guest.
  std::optional<uint32_t> snp_vmpl;
};

// Which TEE this machine offers, probing in the order configfs-tsm, /dev/sev-guest. The error
// (kUnsupported) names every place looked at.
Result<TeeKind> detect_tee(const TeeEvidenceOptions& options);

// Evidence JSON for the RA-TLS certificate extension and /v1/attestation:
//   SEV-SNP: SnpEvidence::to_json() ({"type":"sev-snp","report":b64,"vcek":b64,...})
//   TDX:     {"type":"tdx","quote":b64}
Result<nlohmann::json> tee_evidence(TeeKind kind, const std::array<uint8_t, 64>& report_data,
                                    const TeeEvidenceOptions& options);

// The SEV-SNP certificate table (GHCB spec v2, "SNP Extended Guest Request"): 24-byte entries
// {GUID (16 bytes, RFC 4122 byte order), offset u32 LE, length u32 LE} ended by an all-zero
// entry; offsets are from the start of the table and point past the entries. Untrusted bytes.
struct SnpCertTable {
  std::vector<uint8_t> vcek;
  std::vector<uint8_t> vlek;
  std::vector<uint8_t> ask;
  std::vector<uint8_t> ark;
};
// An empty or all-zero blob is an empty table. Unknown GUIDs are skipped; a repeated known GUID,
// a missing terminator, or an entry outside the blob or overlapping the entries is kCorrupt.
Result<SnpCertTable> parse_snp_cert_table(std::span<const uint8_t> blob);

}  // namespace power::attest
