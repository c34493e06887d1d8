#include "attest/snp_verify.h"

#include <algorithm>
#include <cstring>
#include <ctime>

#include <fmt/format.h>

#include "attest/amd_roots.h"
#include "attest/x509_util.h"
#include "base/sha256.h"

namespace power::attest {
namespace {

using detail::X509Ptr;

// AMD's VCEK/VLEK extension OIDs (AMD "Versioned Chip Endorsement Key (VCEK) Certificate and
// KDS Interface Specification", table "VCEK Certificate Extensions").
constexpr const char* kOidProductName = "1.3.6.1.4.1.3704.1.2";
constexpr const char* kOidBlSpl = "1.3.6.1.4.1.3704.1.3.1";
constexpr const char* kOidTeeSpl = "1.3.6.1.4.1.3704.1.3.2";
constexpr const char* kOidSnpSpl = "1.3.6.1.4.1.3704.1.3.3";
constexpr const char* kOidUcodeSpl = "1.3.6.1.4.1.3704.1.3.8";
constexpr const char* kOidFmcSpl = "1.3.6.1.4.1.3704.1.3.9";
constexpr const char* kOidHwId = "1.3.6.1.4.1.3704.1.4";

// An SPL extension holds a DER INTEGER 0..255 (e.g. 02 01 73, or 02 02 00 d9 when the high bit
// is set). Decoded by hand: the shape is fixed and tiny, and anything else is refused.
Result<uint8_t> decode_spl(const std::vector<uint8_t>& v, const char* oid) {
  auto bad = [&] {
    return make_error(StatusCode::kCorrupt, "VCEK extension {} is not a DER INTEGER 0..255", oid)
        .with("hex", snp_hex(v));
  };
  if (v.size() < 3 || v[0] != 0x02 || v[1] != v.size() - 2 || v[1] > 2) return bad();
  if ((v[2] & 0x80) != 0) return bad();  // negative
  if (v[1] == 2) {
    // Minimal DER: a leading zero only when the next byte has its high bit set.
    if (v[2] != 0 || (v[3] & 0x80) == 0) return bad();
    return v[3];
  }
  return v[2];
}

Result<std::optional<uint8_t>> read_spl(const X509* cert, const char* oid) {
  POWER_ASSIGN_OR_RETURN(auto raw, detail::extension_value(cert, oid));
  if (!raw) return std::optional<uint8_t>();
  POWER_ASSIGN_OR_RETURN(uint8_t value, decode_spl(*raw, oid));
  return std::optional<uint8_t>(value);
}

Result<SnpCertTcb> read_cert_tcb(const X509* cert) {
  SnpCertTcb out;
  POWER_ASSIGN_OR_RETURN(out.bootloader, read_spl(cert, kOidBlSpl));
  POWER_ASSIGN_OR_RETURN(out.tee, read_spl(cert, kOidTeeSpl));
  POWER_ASSIGN_OR_RETURN(out.snp, read_spl(cert, kOidSnpSpl));
  POWER_ASSIGN_OR_RETURN(out.microcode, read_spl(cert, kOidUcodeSpl));
  POWER_ASSIGN_OR_RETURN(out.fmc, read_spl(cert, kOidFmcSpl));
  POWER_ASSIGN_OR_RETURN(auto hw_id, detail::extension_value(cert, kOidHwId));
  if (hw_id) {
    // KDS writes the chip id as the raw extension value; accept a DER OCTET STRING wrapper too
    // in case a future certificate encodes it properly.
    std::vector<uint8_t> id = std::move(*hw_id);
    if (id.size() != 64 && id.size() != 8 && id.size() >= 2 && id[0] == 0x04 &&
        id[1] == id.size() - 2) {
      id.erase(id.begin(), id.begin() + 2);
    }
    if (id.size() != 64 && id.size() != 8) {
      return make_error(StatusCode::kCorrupt, "VCEK hwID extension has an unexpected length")
          .with("bytes", id.size());
    }
    out.hw_id = std::move(id);
  }
  POWER_ASSIGN_OR_RETURN(auto product, detail::extension_value(cert, kOidProductName));
  // productName is a DER IA5String (0x16 len chars); keep the characters only.
  if (product && product->size() >= 2 && (*product)[0] == 0x16 &&
      (*product)[1] == product->size() - 2) {
    out.product_name.assign(product->begin() + 2, product->end());
  }
  return out;
}

// "SEV-Milan" -> Milan, "SEV-VLEK-Genoa" -> Genoa, "ARK-Turin" -> Turin.
SnpProduct product_from_cn(std::string_view cn) {
  for (std::string_view prefix : {"SEV-VLEK-", "SEV-", "ARK-"}) {
    if (cn.substr(0, prefix.size()) == prefix) {
      return snp_product_from_name(cn.substr(prefix.size()));
    }
  }
  return SnpProduct::kUnknown;
}

std::vector<uint8_t> pem_to_der_or_empty(std::string_view pem) {
  auto der = detail::certificate_der(
      std::span(reinterpret_cast<const uint8_t*>(pem.data()), pem.size()), "built-in");
  return der.ok() ? std::move(der).value() : std::vector<uint8_t>();
}

// Runs the checks in order, recording each; fail() stamps the check name on the Status.
class Verifier {
 public:
  Verifier(const SnpEvidence& evidence, const SnpPolicy& policy)
      : evidence_(evidence), policy_(policy) {}

  SnpVerification run() {
    run_checks();
    return std::move(out_);
  }

  // The policy checks alone, over a report the caller has already authenticated.
  SnpVerification run_policy(const SnpReport& report, SnpProduct product) {
    out_.report = report;
    out_.product = product;
    check_policy();
    return std::move(out_);
  }

 private:
  void pass(std::string_view check) { out_.checks_passed.emplace_back(check); }
  void skip(std::string_view check) { out_.checks_skipped.emplace_back(check); }
  bool fail(std::string_view check, const Status& st) {
    std::string message = fmt::format("SEV-SNP check {} failed: {}", check, st.message());
    if (!st.context().empty()) message += fmt::format(" ({})", st.context());
    out_.status = Status(st.code(), std::move(message)).with("check", check);
    out_.failed_check = std::string(check);
    return false;
  }
  bool fail(std::string_view check, StatusCode code, std::string message) {
    return fail(check, Status(code, std::move(message)));
  }

  void run_checks() {
    if (!check_report_format()) return;
    if (!load_chain()) return;
    if (!check_chain()) return;
    if (!check_cert_validity()) return;
    if (!check_signing_key()) return;
    if (!check_report_signature()) return;
    if (!check_tcb_and_chip()) return;
    if (!check_policy()) return;
  }

  bool check_report_format() {
    auto report = parse_snp_report(evidence_.report);
    if (!report.ok()) return fail(snp_check::kReportFormat, report.status());
    out_.report = std::move(report).value();
    pass(snp_check::kReportFormat);
    return true;
  }

  // Parses VCEK, ASK and ARK, filling absent ASK/ARK from the built-in roots for the product
  // the VCEK's issuer names. Parse failures are attributed to the check the certificate serves.
  bool load_chain() {
    auto vcek = detail::parse_certificate_der(evidence_.vcek, "VCEK");
    if (!vcek.ok()) return fail(snp_check::kVcekChain, vcek.status());
    vcek_ = std::move(vcek).value();
    const std::string issuer_cn = detail::issuer_common_name(vcek_.get());
    const SnpProduct named = product_from_cn(issuer_cn);
    const AmdRoot* builtin = find_amd_root(named);
    const bool vlek = issuer_cn.starts_with("SEV-VLEK-");

    std::vector<uint8_t> ask_der = evidence_.ask;
    if (ask_der.empty()) {
      if (builtin == nullptr || vlek) {
        return fail(snp_check::kAskSignature, StatusCode::kNotFound,
                    fmt::format("evidence carries no {} and none is built in for issuer '{}'",
                                vlek ? "ASVK" : "ASK", issuer_cn));
      }
      ask_der = pem_to_der_or_empty(builtin->ask_pem);
    }
    std::vector<uint8_t> ark_der = evidence_.ark;
    if (ark_der.empty()) {
      if (builtin == nullptr) {
        return fail(
            snp_check::kArkRoot, StatusCode::kNotFound,
            fmt::format("evidence carries no ARK and none is built in for issuer '{}'", issuer_cn));
      }
      ark_der = pem_to_der_or_empty(builtin->ark_pem);
    }
    ark_sha256_ = sha256(ark_der.data(), ark_der.size());
    auto ark = detail::parse_certificate_der(ark_der, "ARK");
    if (!ark.ok()) return fail(snp_check::kArkRoot, ark.status());
    ark_ = std::move(ark).value();
    auto ask = detail::parse_certificate_der(ask_der, vlek ? "ASVK" : "ASK");
    if (!ask.ok()) return fail(snp_check::kAskSignature, ask.status());
    ask_ = std::move(ask).value();
    vlek_ = vlek;
    return true;
  }

  bool check_chain() {
    // ark_root: pinned by DER digest, so a re-signed or re-encoded ARK is a different root.
    const AmdRoot* root = find_amd_root(ark_sha256_);
    if (policy_.trusted_ark_sha256.empty()) {
      if (root == nullptr) {
        return fail(snp_check::kArkRoot,
                    make_error(StatusCode::kIntegrity, "ARK is not one of AMD's built-in roots")
                        .with("ark_sha256", to_hex(ark_sha256_))
                        .with("ark_cn", detail::subject_common_name(ark_.get())));
      }
    } else {
      const bool trusted =
          std::any_of(policy_.trusted_ark_sha256.begin(), policy_.trusted_ark_sha256.end(),
                      [&](const std::array<uint8_t, 32>& d) { return d == ark_sha256_; });
      if (!trusted) {
        return fail(snp_check::kArkRoot,
                    make_error(StatusCode::kIntegrity, "ARK is not one of the policy's roots")
                        .with("ark_sha256", to_hex(ark_sha256_))
                        .with("ark_cn", detail::subject_common_name(ark_.get())));
      }
    }
    out_.product =
        root != nullptr ? root->product : product_from_cn(detail::subject_common_name(ark_.get()));
    pass(snp_check::kArkRoot);

    Status st = detail::verify_rsa_pss_sha384(ark_.get(), ark_.get(), "ARK", "ARK");
    if (!st.ok()) return fail(snp_check::kArkSignature, st);
    pass(snp_check::kArkSignature);

    const char* ask_name = vlek_ ? "ASVK" : "ASK";
    st = detail::verify_rsa_pss_sha384(ask_.get(), ark_.get(), ask_name, "ARK");
    if (!st.ok()) return fail(snp_check::kAskSignature, st);
    pass(snp_check::kAskSignature);

    st = detail::verify_rsa_pss_sha384(vcek_.get(), ask_.get(), vlek_ ? "VLEK" : "VCEK", ask_name);
    if (!st.ok()) return fail(snp_check::kVcekChain, st);
    pass(snp_check::kVcekChain);
    return true;
  }

  bool check_cert_validity() {
    if (!policy_.check_cert_validity) {
      skip(snp_check::kCertValidity);
      return true;
    }
    const time_t now = policy_.verify_time_unix ? static_cast<time_t>(*policy_.verify_time_unix)
                                                : std::time(nullptr);
    for (const auto& [cert, name] :
         {std::pair{ark_.get(), "ARK"}, std::pair{ask_.get(), vlek_ ? "ASVK" : "ASK"},
          std::pair{vcek_.get(), vlek_ ? "VLEK" : "VCEK"}}) {
      Status st = detail::check_validity(cert, name, now);
      if (!st.ok()) return fail(snp_check::kCertValidity, st);
    }
    pass(snp_check::kCertValidity);
    return true;
  }

  bool check_signing_key() {
    const SnpReport& r = *out_.report;
    const std::string cn = detail::subject_common_name(vcek_.get());
    const std::string ask_cn = detail::subject_common_name(ask_.get());
    const std::string product(snp_product_name(out_.product));
    if (r.signing_key == SnpSigningKey::kNone) {
      return fail(snp_check::kSigningKey, StatusCode::kIntegrity,
                  "report says it is unsigned (SIGNING_KEY = 7)");
    }
    const bool want_vlek = r.signing_key == SnpSigningKey::kVlek;
    const std::string want_cn = want_vlek ? "SEV-VLEK" : "SEV-VCEK";
    const std::string want_ask_cn = (want_vlek ? "SEV-VLEK-" : "SEV-") + product;
    if (cn != want_cn || ask_cn != want_ask_cn) {
      return fail(snp_check::kSigningKey,
                  make_error(StatusCode::kIntegrity,
                             "report's SIGNING_KEY does not match the certificate given")
                      .with("signing_key", want_vlek ? "VLEK" : "VCEK")
                      .with("cert_cn", cn)
                      .with("issuer_cn", ask_cn)
                      .with("expected", fmt::format("{} under {}", want_cn, want_ask_cn)));
    }
    Status st = detail::check_ec_p384_key(vcek_.get(), want_cn);
    if (!st.ok()) return fail(snp_check::kSigningKey, st);
    pass(snp_check::kSigningKey);
    return true;
  }

  bool check_report_signature() {
    const SnpReport& r = *out_.report;
    Status st = detail::verify_ecdsa_p384_sha384_le(
        vcek_.get(), std::span(evidence_.report).first(kSnpSignedSize), r.signature_r,
        r.signature_s);
    if (!st.ok()) return fail(snp_check::kReportSignature, st);
    pass(snp_check::kReportSignature);
    return true;
  }

  bool check_tcb_and_chip() {
    auto cert_tcb = read_cert_tcb(vcek_.get());
    if (!cert_tcb.ok()) return fail(snp_check::kTcb, cert_tcb.status());
    Status st = check_snp_tcb(*out_.report, *cert_tcb, out_.product);
    if (!st.ok()) return fail(snp_check::kTcb, st);
    pass(snp_check::kTcb);
    if (vlek_ || out_.report->mask_chip_key) {
      skip(snp_check::kChipId);
    } else {
      st = check_snp_chip_id(*out_.report, *cert_tcb);
      if (!st.ok()) return fail(snp_check::kChipId, st);
      pass(snp_check::kChipId);
    }
    return true;
  }

  bool check_policy() {
    const SnpReport& r = *out_.report;
    if (r.debug_allowed() && !policy_.allow_debug) {
      return fail(snp_check::kDebugPolicy,
                  make_error(StatusCode::kPolicyRefused,
                             "guest policy allows debugging (bit 19) and the policy forbids it")
                      .with("guest_policy", fmt::format("{:#x}", r.policy)));
    }
    pass(snp_check::kDebugPolicy);

    if (policy_.max_vmpl) {
      if (r.vmpl > *policy_.max_vmpl) {
        return fail(snp_check::kVmpl, make_error(StatusCode::kPolicyRefused,
                                                 "report was requested from a less privileged VMPL")
                                          .with("vmpl", r.vmpl)
                                          .with("max_vmpl", *policy_.max_vmpl));
      }
      pass(snp_check::kVmpl);
    } else {
      skip(snp_check::kVmpl);
    }

    if (policy_.min_tcb) {
      if (!check_min_tcb()) return false;
      pass(snp_check::kMinTcb);
    } else {
      skip(snp_check::kMinTcb);
    }

    if (!policy_.measurements.empty()) {
      const bool found = std::find(policy_.measurements.begin(), policy_.measurements.end(),
                                   r.measurement) != policy_.measurements.end();
      if (!found) {
        return fail(snp_check::kMeasurement,
                    make_error(StatusCode::kPolicyRefused,
                               "launch measurement is not one of the pinned measurements")
                        .with("measurement", snp_hex(r.measurement))
                        .with("pinned", policy_.measurements.size()));
      }
      pass(snp_check::kMeasurement);
    } else {
      skip(snp_check::kMeasurement);
    }

    if (!check_equal(snp_check::kHostData, policy_.host_data, r.host_data)) return false;
    if (!check_equal(snp_check::kIdKeyDigest, policy_.id_key_digest, r.id_key_digest)) {
      return false;
    }
    return check_equal(snp_check::kReportData, policy_.report_data, r.report_data);
  }

  template <size_t N>
  bool check_equal(std::string_view check, const std::optional<std::array<uint8_t, N>>& want,
                   const std::array<uint8_t, N>& got) {
    if (!want) {
      skip(check);
      return true;
    }
    if (*want != got) {
      return fail(check, make_error(StatusCode::kPolicyRefused,
                                    "report's {} differs from the expected value", check)
                             .with("expected", snp_hex(*want))
                             .with("actual", snp_hex(got)));
    }
    pass(check);
    return true;
  }

  bool check_min_tcb() {
    const SnpReport& r = *out_.report;
    const SnpMinTcb& min = *policy_.min_tcb;
    for (const auto& [raw, name] :
         {std::pair{r.current_tcb, "current_tcb"}, std::pair{r.committed_tcb, "committed_tcb"},
          std::pair{r.reported_tcb, "reported_tcb"}}) {
      auto tcb = decode_snp_tcb(raw, out_.product);
      if (!tcb.ok()) return fail(snp_check::kMinTcb, tcb.status());
      const bool low = tcb->bootloader < min.bootloader || tcb->tee < min.tee ||
                       tcb->snp < min.snp || tcb->microcode < min.microcode ||
                       (tcb->has_fmc && tcb->fmc < min.fmc);
      if (low) {
        return fail(snp_check::kMinTcb,
                    make_error(StatusCode::kPolicyRefused, "{} is below the policy's minimum", name)
                        .with(name, snp_tcb_string(*tcb))
                        .with("min_tcb", fmt::format("bootloader={} tee={} snp={} microcode={} "
                                                     "fmc={}",
                                                     min.bootloader, min.tee, min.snp,
                                                     min.microcode, min.fmc)));
      }
    }
    return true;
  }

  const SnpEvidence& evidence_;
  const SnpPolicy& policy_;
  SnpVerification out_;
  X509Ptr vcek_;
  X509Ptr ask_;
  X509Ptr ark_;
  Sha256Digest ark_sha256_{};
  bool vlek_ = false;
};

}  // namespace

std::array<uint8_t, 64> ratls_report_data(std::span<const uint8_t> spki_der,
                                          std::span<const uint8_t> nonce) {
  std::array<uint8_t, 64> out{};
  const Sha256Digest key = sha256(spki_der.data(), spki_der.size());
  std::copy(key.begin(), key.end(), out.begin());
  if (!nonce.empty()) {
    const Sha256Digest n = sha256(nonce.data(), nonce.size());
    std::copy(n.begin(), n.end(), out.begin() + 32);
  }
  return out;
}

SnpVerification verify_snp(const SnpEvidence& evidence, const SnpPolicy& policy) {
  return Verifier(evidence, policy).run();
}

SnpVerification check_snp_policy(const SnpReport& report, SnpProduct product,
                                 const SnpPolicy& policy) {
  static const SnpEvidence kNoEvidence;
  return Verifier(kNoEvidence, policy).run_policy(report, product);
}

Result<SnpCertTcb> read_snp_cert_tcb(std::span<const uint8_t> cert_der) {
  POWER_ASSIGN_OR_RETURN(X509Ptr cert, detail::parse_certificate_der(cert_der, "VCEK"));
  return read_cert_tcb(cert.get());
}

Status check_snp_tcb(const SnpReport& report, const SnpCertTcb& cert, SnpProduct product) {
  POWER_ASSIGN_OR_RETURN(SnpTcb tcb, decode_snp_tcb(report.reported_tcb, product));
  struct Component {
    const char* name;
    const std::optional<uint8_t>& cert;
    uint8_t report;
  };
  std::vector<Component> components = {{"bootloader (blSPL)", cert.bootloader, tcb.bootloader},
                                       {"tee (teeSPL)", cert.tee, tcb.tee},
                                       {"snp (snpSPL)", cert.snp, tcb.snp},
                                       {"microcode (ucodeSPL)", cert.microcode, tcb.microcode}};
  if (tcb.has_fmc) components.push_back({"fmc (fmcSPL)", cert.fmc, tcb.fmc});
  for (const Component& c : components) {
    if (!c.cert) {
      return make_error(StatusCode::kIntegrity, "VCEK lacks the {} extension", c.name);
    }
    if (*c.cert != c.report) {
      // The VCEK is derived from one TCB: a report whose REPORTED_TCB differs was either signed
      // by another key or is paired with the wrong certificate.
      return make_error(StatusCode::kIntegrity, "VCEK's {} differs from the report's REPORTED_TCB",
                        c.name)
          .with("vcek", static_cast<int>(*c.cert))
          .with("report", static_cast<int>(c.report))
          .with("reported_tcb", snp_tcb_string(tcb));
    }
  }
  return Status();
}

Status check_snp_chip_id(const SnpReport& report, const SnpCertTcb& cert) {
  if (cert.hw_id.empty()) {
    return make_error(StatusCode::kIntegrity, "VCEK has no hwID extension to match CHIP_ID");
  }
  if (cert.hw_id.size() > report.chip_id.size() ||
      !std::equal(cert.hw_id.begin(), cert.hw_id.end(), report.chip_id.begin())) {
    return make_error(StatusCode::kIntegrity, "VCEK's hwID differs from the report's CHIP_ID")
        .with("vcek_hwid", snp_hex(cert.hw_id))
        .with("chip_id", snp_hex(report.chip_id));
  }
  return Status();
}

std::string snp_hex(std::span<const uint8_t> bytes) {
  return to_hex(bytes.data(), bytes.size());
}

Status parse_snp_hex(std::string_view hex, std::span<uint8_t> out, std::string_view what) {
  if (hex.size() != out.size() * 2) {
    return make_error(StatusCode::kInvalidArgument, "{} must be {} hex characters", what,
                      out.size() * 2)
        .with("actual_chars", hex.size());
  }
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < out.size(); ++i) {
    const int hi = nibble(hex[2 * i]);
    const int lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      return make_error(StatusCode::kInvalidArgument, "{} is not hex", what).with("offset", 2 * i);
    }
    out[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return Status();
}

}  // namespace power::attest
