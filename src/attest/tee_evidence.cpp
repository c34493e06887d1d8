#include "attest/tee_evidence.h"

#include <fcntl.h>
#include <linux/sev-guest.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>

#include <fmt/format.h>

#include "attest/snp_report.h"
#include "attest/snp_verify.h"
#include "attest/x509_util.h"

namespace power::attest {
namespace {

constexpr size_t kCertTableEntrySize = 24;

// GUIDs of the GHCB certificate table, in RFC 4122 (string) byte order as the table stores them.
constexpr std::array<uint8_t, 16> kGuidVcek = {0x63, 0xda, 0x75, 0x8d, 0xe6, 0x64, 0x45, 0x64,
                                               0xad, 0xc5, 0xf4, 0xb9, 0x3b, 0xe8, 0xac, 0xcd};
constexpr std::array<uint8_t, 16> kGuidVlek = {0xa8, 0x07, 0x4b, 0xc2, 0xa2, 0x5a, 0x48, 0x3e,
                                               0xaa, 0xe6, 0x39, 0xc0, 0x45, 0xa0, 0xb8, 0xa1};
constexpr std::array<uint8_t, 16> kGuidAsk = {0x4a, 0xb7, 0xb3, 0x79, 0xbb, 0xac, 0x4f, 0xe4,
                                              0xa0, 0x2f, 0x05, 0xae, 0xf3, 0x27, 0xc7, 0x82};
constexpr std::array<uint8_t, 16> kGuidArk = {0xc0, 0xb4, 0x06, 0xa4, 0xa8, 0x03, 0x49, 0x52,
                                              0x97, 0x43, 0x3f, 0xb6, 0x01, 0x4c, 0xd0, 0xae};

uint32_t load_le32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

bool path_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

Status errno_error(std::string_view what, const std::string& path, int err) {
  return make_error(StatusCode::kIo, "{} failed: {}", what, std::strerror(err)).with("path", path);
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

Result<std::vector<uint8_t>> read_whole(const std::string& path, bool missing_ok) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    if (missing_ok && errno == ENOENT) return std::vector<uint8_t>();
    return errno_error("open", path, errno);
  }
  std::vector<uint8_t> out;
  uint8_t buf[16384];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_error("read", path, errno);
    }
    if (n == 0) break;
    out.insert(out.end(), buf, buf + n);
    // configfs blobs are a few KiB (SNP report + certificates, a TDX quote); refuse runaway.
    if (out.size() > (size_t{1} << 24)) {
      return make_error(StatusCode::kResourceExhausted, "TEE blob over 16 MiB").with("path", path);
    }
  }
  return out;
}

// configfs attributes take one write(): a partial write would leave a truncated value.
Status write_once(const std::string& path, std::span<const uint8_t> bytes) {
  Fd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (fd.get() < 0) return errno_error("open", path, errno);
  const ssize_t n = ::write(fd.get(), bytes.data(), bytes.size());
  if (n < 0) return errno_error("write", path, errno);
  if (static_cast<size_t>(n) != bytes.size()) {
    return make_error(StatusCode::kIo, "short write").with("path", path).with("bytes", n);
  }
  return Status();
}

std::string trimmed_text(const std::vector<uint8_t>& bytes) {
  std::string s(bytes.begin(), bytes.end());
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\0')) s.pop_back();
  return s;
}

// A report directory of our own: mkdir'ed with a name no other process or thread uses, removed
// on every path out (the kernel keeps the report until rmdir).
class TsmReportDir {
 public:
  static Result<TsmReportDir> make(const std::string& root) {
    static std::atomic<uint64_t> counter{0};
    std::random_device rd;
    const std::string path = fmt::format("{}/power-{}-{}-{:08x}", root, ::getpid(),
                                         counter.fetch_add(1), static_cast<uint32_t>(rd()));
    if (::mkdir(path.c_str(), 0700) != 0) return errno_error("mkdir (configfs-tsm)", path, errno);
    return TsmReportDir(path);
  }
  TsmReportDir(TsmReportDir&& o) noexcept : path_(std::move(o.path_)) { o.path_.clear(); }
  TsmReportDir& operator=(TsmReportDir&&) = delete;
  TsmReportDir(const TsmReportDir&) = delete;
  ~TsmReportDir() {
    if (!path_.empty()) ::rmdir(path_.c_str());
  }
  std::string file(std::string_view name) const { return fmt::format("{}/{}", path_, name); }

 private:
  explicit TsmReportDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

struct TsmReport {
  std::vector<uint8_t> outblob;
  std::vector<uint8_t> auxblob;
};

Result<std::string> tsm_provider(const std::string& root) {
  POWER_ASSIGN_OR_RETURN(TsmReportDir dir, TsmReportDir::make(root));
  POWER_ASSIGN_OR_RETURN(auto provider, read_whole(dir.file("provider"), false));
  return trimmed_text(provider);
}

Result<TsmReport> tsm_report(const std::string& root, std::string_view want_provider,
                             const std::array<uint8_t, 64>& report_data,
                             std::optional<uint32_t> vmpl) {
  POWER_ASSIGN_OR_RETURN(TsmReportDir dir, TsmReportDir::make(root));
  POWER_ASSIGN_OR_RETURN(auto provider_bytes, read_whole(dir.file("provider"), false));
  const std::string provider = trimmed_text(provider_bytes);
  if (provider != want_provider) {
    return make_error(StatusCode::kUnsupported, "configfs-tsm provider is not {}", want_provider)
        .with("provider", provider)
        .with("path", root);
  }
  if (want_provider == "sev_guest") {
    // A guest under an SVSM runs above VMPL0 and may only ask for its own level or higher.
    POWER_ASSIGN_OR_RETURN(auto floor_bytes, read_whole(dir.file("privlevel_floor"), true));
    uint32_t level = vmpl.value_or(0);
    if (!vmpl && !floor_bytes.empty()) {
      level = static_cast<uint32_t>(std::strtoul(trimmed_text(floor_bytes).c_str(), nullptr, 10));
    }
    if (level != 0) {
      const std::string text = std::to_string(level);
      POWER_RETURN_IF_ERROR(
          write_once(dir.file("privlevel"),
                     std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size())));
    }
  }
  POWER_RETURN_IF_ERROR(write_once(dir.file("inblob"), report_data));
  POWER_ASSIGN_OR_RETURN(auto generation_before, read_whole(dir.file("generation"), false));
  TsmReport out;
  POWER_ASSIGN_OR_RETURN(out.outblob, read_whole(dir.file("outblob"), false));
  POWER_ASSIGN_OR_RETURN(out.auxblob, read_whole(dir.file("auxblob"), true));
  POWER_ASSIGN_OR_RETURN(auto generation_after, read_whole(dir.file("generation"), false));
  // The directory is ours alone, but the kernel's generation counter is the documented way to
  // know outblob answers our inblob; a change means someone else wrote to it.
  if (generation_before != generation_after) {
    return make_error(StatusCode::kInternal, "configfs-tsm report changed while it was read")
        .with("path", root);
  }
  if (out.outblob.empty()) {
    return make_error(StatusCode::kIo, "configfs-tsm returned an empty report").with("path", root);
  }
  return out;
}

struct SevGuestReport {
  std::vector<uint8_t> report;
  std::vector<uint8_t> cert_table;
};

// MSG_REPORT_RSP (SEV-SNP firmware ABI): status u32, report_size u32, 24 reserved bytes, report.
Result<std::vector<uint8_t>> report_from_response(const snp_report_resp& resp) {
  const uint32_t status = load_le32(resp.data);
  const uint32_t size = load_le32(resp.data + 4);
  if (status != 0) {
    return make_error(StatusCode::kIo, "SEV-SNP firmware refused the report request")
        .with("status", status);
  }
  if (size < kSnpReportSize || size > sizeof(resp.data) - 0x20) {
    return make_error(StatusCode::kCorrupt, "SEV-SNP report response has a bad size")
        .with("report_size", size);
  }
  return std::vector<uint8_t>(resp.data + 0x20, resp.data + 0x20 + kSnpReportSize);
}

Result<SevGuestReport> sev_guest_report(const std::string& device,
                                        const std::array<uint8_t, 64>& report_data, uint32_t vmpl) {
  Fd fd(::open(device.c_str(), O_RDWR | O_CLOEXEC));
  if (fd.get() < 0) return errno_error("open", device, errno);
  // The kernel takes whole pages for the certificate buffer, up to 16 KiB at first; a host with
  // more certificates answers "invalid length" with the size it needs.
  std::vector<uint8_t> certs(16384);
  for (int attempt = 0; attempt < 2; ++attempt) {
    snp_ext_report_req req{};
    std::memcpy(req.data.user_data, report_data.data(), report_data.size());
    req.data.vmpl = vmpl;
    req.certs_address = reinterpret_cast<uintptr_t>(certs.data());
    req.certs_len = static_cast<uint32_t>(certs.size());
    snp_report_resp resp{};
    snp_guest_request_ioctl io{};
    io.msg_version = 1;
    io.req_data = reinterpret_cast<uintptr_t>(&req);
    io.resp_data = reinterpret_cast<uintptr_t>(&resp);
    if (::ioctl(fd.get(), SNP_GET_EXT_REPORT, &io) == 0) {
      POWER_ASSIGN_OR_RETURN(auto report, report_from_response(resp));
      return SevGuestReport{std::move(report), std::move(certs)};
    }
    const uint32_t vmm_error = static_cast<uint32_t>(io.exitinfo2 >> 32);
    if (vmm_error == SNP_GUEST_VMM_ERR_INVALID_LEN && attempt == 0 && req.certs_len > 0 &&
        req.certs_len <= (1u << 20)) {
      certs.assign(req.certs_len, 0);
      continue;
    }
    break;
  }
  // The host keeps no certificates (or the extended request is unsupported): report only; the
  // VCEK must then come from TeeEvidenceOptions::snp_vcek_file.
  snp_report_req req{};
  std::memcpy(req.user_data, report_data.data(), report_data.size());
  req.vmpl = vmpl;
  snp_report_resp resp{};
  snp_guest_request_ioctl io{};
  io.msg_version = 1;
  io.req_data = reinterpret_cast<uintptr_t>(&req);
  io.resp_data = reinterpret_cast<uintptr_t>(&resp);
  if (::ioctl(fd.get(), SNP_GET_REPORT, &io) != 0) {
    return errno_error("SNP_GET_REPORT ioctl", device, errno)
        .with("fw_error", static_cast<uint32_t>(io.exitinfo2))
        .with("vmm_error", static_cast<uint32_t>(io.exitinfo2 >> 32));
  }
  POWER_ASSIGN_OR_RETURN(auto report, report_from_response(resp));
  return SevGuestReport{std::move(report), {}};
}

Result<nlohmann::json> snp_evidence_json(std::vector<uint8_t> report,
                                         std::span<const uint8_t> cert_table_bytes,
                                         const std::array<uint8_t, 64>& report_data,
                                         const TeeEvidenceOptions& options) {
  POWER_ASSIGN_OR_RETURN(SnpReport parsed, parse_snp_report(report));
  if (parsed.report_data != report_data) {
    return make_error(StatusCode::kInternal, "SEV-SNP report does not carry the report data asked");
  }
  POWER_ASSIGN_OR_RETURN(SnpCertTable table, parse_snp_cert_table(cert_table_bytes));
  std::vector<uint8_t> vcek = parsed.signing_key == SnpSigningKey::kVlek ? table.vlek : table.vcek;
  if (vcek.empty() && !options.snp_vcek_file.empty()) {
    POWER_ASSIGN_OR_RETURN(vcek, read_whole(options.snp_vcek_file, false));
  }
  if (vcek.empty()) {
    return make_error(StatusCode::kNotFound,
                      "the host supplied no VCEK with the SEV-SNP report, and verifiers have no "
                      "network to fetch one: give a VCEK file from AMD's KDS "
                      "(https://kdsintf.amd.com/vcek/v1/<product>/<chip id>?...)");
  }
  POWER_ASSIGN_OR_RETURN(SnpEvidence evidence,
                         SnpEvidence::from_parts(report, vcek, table.ask, table.ark));
  return evidence.to_json();
}

}  // namespace

Result<SnpCertTable> parse_snp_cert_table(std::span<const uint8_t> blob) {
  SnpCertTable out;
  if (std::all_of(blob.begin(), blob.end(), [](uint8_t b) { return b == 0; })) return out;
  // Find the terminator first: every offset must point past the entries.
  size_t entries = 0;
  for (;; ++entries) {
    const size_t at = entries * kCertTableEntrySize;
    if (at + kCertTableEntrySize > blob.size()) {
      return make_error(StatusCode::kCorrupt, "SEV-SNP certificate table has no terminating entry")
          .with("bytes", blob.size());
    }
    if (std::all_of(blob.begin() + at, blob.begin() + at + kCertTableEntrySize,
                    [](uint8_t b) { return b == 0; })) {
      break;
    }
  }
  const size_t header_bytes = (entries + 1) * kCertTableEntrySize;
  for (size_t i = 0; i < entries; ++i) {
    const uint8_t* e = blob.data() + i * kCertTableEntrySize;
    const uint32_t offset = load_le32(e + 16);
    const uint32_t length = load_le32(e + 20);
    if (offset < header_bytes || uint64_t{offset} + length > blob.size() || length == 0) {
      return make_error(StatusCode::kCorrupt, "SEV-SNP certificate table entry out of bounds")
          .with("entry", i)
          .with("offset", offset)
          .with("length", length)
          .with("table_bytes", blob.size());
    }
    std::vector<uint8_t>* slot = nullptr;
    const std::span<const uint8_t> guid(e, 16);
    if (std::equal(guid.begin(), guid.end(), kGuidVcek.begin())) slot = &out.vcek;
    if (std::equal(guid.begin(), guid.end(), kGuidVlek.begin())) slot = &out.vlek;
    if (std::equal(guid.begin(), guid.end(), kGuidAsk.begin())) slot = &out.ask;
    if (std::equal(guid.begin(), guid.end(), kGuidArk.begin())) slot = &out.ark;
    if (slot == nullptr) continue;  // another certificate the host chose to add
    if (!slot->empty()) {
      return make_error(StatusCode::kCorrupt, "SEV-SNP certificate table repeats a GUID")
          .with("entry", i)
          .with("guid", snp_hex(guid));
    }
    slot->assign(blob.begin() + offset, blob.begin() + offset + length);
  }
  return out;
}

Result<TeeKind> detect_tee(const TeeEvidenceOptions& options) {
  std::string tsm_note;
  if (path_exists(options.tsm_report_dir)) {
    auto provider = tsm_provider(options.tsm_report_dir);
    if (provider.ok() && *provider == "sev_guest") return TeeKind::kSevSnp;
    if (provider.ok() && *provider == "tdx_guest") return TeeKind::kTdx;
    tsm_note = provider.ok()
                   ? fmt::format("{} has provider \"{}\"", options.tsm_report_dir, *provider)
                   : provider.status().to_string();
  } else {
    tsm_note = fmt::format("{} absent", options.tsm_report_dir);
  }
  if (path_exists(options.sev_guest_device)) return TeeKind::kSevSnp;
  return make_error(StatusCode::kUnsupported,
                    "no TEE: {} and {} absent; use --ra-tls development for an unattested "
                    "certificate",
                    tsm_note, options.sev_guest_device);
}

Result<nlohmann::json> tee_evidence(TeeKind kind, const std::array<uint8_t, 64>& report_data,
                                    const TeeEvidenceOptions& options) {
  const bool tsm = path_exists(options.tsm_report_dir);
  if (kind == TeeKind::kTdx) {
    if (!tsm) {
      return make_error(StatusCode::kUnsupported,
                        "TDX evidence needs configfs-tsm: {} absent (Linux 6.7+ with tdx_guest)",
                        options.tsm_report_dir);
    }
    POWER_ASSIGN_OR_RETURN(TsmReport r,
                           tsm_report(options.tsm_report_dir, "tdx_guest", report_data, {}));
    return nlohmann::json{{"type", "tdx"}, {"quote", detail::base64_encode(r.outblob)}};
  }
  Status tsm_status;
  if (tsm) {
    auto r = tsm_report(options.tsm_report_dir, "sev_guest", report_data, options.snp_vmpl);
    if (r.ok()) return snp_evidence_json(std::move(r->outblob), r->auxblob, report_data, options);
    tsm_status = r.status();
  }
  if (path_exists(options.sev_guest_device)) {
    POWER_ASSIGN_OR_RETURN(SevGuestReport r, sev_guest_report(options.sev_guest_device, report_data,
                                                              options.snp_vmpl.value_or(0)));
    return snp_evidence_json(std::move(r.report), r.cert_table, report_data, options);
  }
  if (!tsm_status.ok()) return tsm_status;
  return make_error(StatusCode::kUnsupported,
                    "no SEV-SNP guest: {} and {} absent; use --ra-tls development for an "
                    "unattested certificate",
                    options.tsm_report_dir, options.sev_guest_device);
}

}  // namespace power::attest
