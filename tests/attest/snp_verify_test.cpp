// verify_snp over genuine published evidence: every case verifies; single-bit tampering of the
// report, its signature, the VCEK, ASK or ARK fails with the check named; policy pins (debug,
// vmpl, min TCB, measurement, report_data, host data, roots, dates) refuse what they should.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "attest/amd_roots.h"
#include "attest/snp_verify.h"
#include "base/sha256.h"
#include "snp_test_data.h"

namespace power::attest {
namespace {

using testing::attest_data;
using testing::load_evidence;
using testing::snp_case;
using testing::snp_cases;
using testing::test_policy;

bool contains(const std::vector<std::string>& v, std::string_view s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// Fails the test unless verification failed at `check`, and the message names it.
void expect_fails_at(const SnpVerification& v, std::string_view check, const std::string& what) {
  EXPECT_FALSE(v.ok()) << what;
  EXPECT_EQ(v.failed_check, check) << what << ": " << v.status.to_string();
  EXPECT_NE(v.status.to_string().find("check=" + std::string(check)), std::string::npos)
      << v.status.to_string();
}

TEST(SnpVerify, EveryPublishedReportVerifies) {
  for (const auto& c : snp_cases()) {
    SCOPED_TRACE(c.name);
    const SnpVerification v = verify_snp(load_evidence(c), test_policy(c));
    ASSERT_TRUE(v.ok()) << v.status.to_string();
    EXPECT_TRUE(v.failed_check.empty());
    EXPECT_EQ(v.product, c.product);
    for (std::string_view check :
         {snp_check::kReportFormat, snp_check::kArkRoot, snp_check::kArkSignature,
          snp_check::kAskSignature, snp_check::kVcekChain, snp_check::kCertValidity,
          snp_check::kSigningKey, snp_check::kReportSignature, snp_check::kTcb,
          snp_check::kDebugPolicy}) {
      EXPECT_TRUE(contains(v.checks_passed, check)) << check;
    }
    // A VLEK is not chip-specific, so there is no hwID to compare.
    EXPECT_EQ(contains(v.checks_passed, snp_check::kChipId), !c.vlek);
    EXPECT_EQ(contains(v.checks_skipped, snp_check::kChipId), c.vlek);
    EXPECT_TRUE(contains(v.checks_skipped, snp_check::kMeasurement));
  }
}

TEST(SnpVerify, BuiltInAskAndArkSufficeForVcekEvidence) {
  for (const std::string name : {"milan-virtee", "milan-trustee", "genoa-azure-trustee"}) {
    SCOPED_TRACE(name);
    SnpEvidence e = load_evidence(snp_case(name));
    e.ask.clear();
    e.ark.clear();
    const SnpVerification v = verify_snp(e, test_policy(snp_case(name)));
    EXPECT_TRUE(v.ok()) << v.status.to_string();
  }
}

TEST(SnpVerify, VlekEvidenceNeedsItsAsvk) {
  SnpEvidence e = load_evidence(snp_case("milan-vlek-trustee"));
  e.ask.clear();
  expect_fails_at(verify_snp(e, test_policy(snp_case("milan-vlek-trustee"))),
                  snp_check::kAskSignature, "VLEK without ASVK");
}

TEST(SnpVerify, DebugGuestIsRefusedUnlessAllowed) {
  const auto& c = snp_case("milan-go-sev-guest");
  SnpPolicy p = test_policy(c);
  p.allow_debug = false;
  const SnpVerification v = verify_snp(load_evidence(c), p);
  expect_fails_at(v, snp_check::kDebugPolicy, "debug guest, debug forbidden");
  EXPECT_EQ(v.status.code(), StatusCode::kPolicyRefused);
  // Everything cryptographic passed before the policy refused it.
  EXPECT_TRUE(contains(v.checks_passed, snp_check::kReportSignature));
  p.allow_debug = true;
  EXPECT_TRUE(verify_snp(load_evidence(c), p).ok());
}

TEST(SnpVerify, DebugBitOnAnAuthenticatedReportIsRefused) {
  SnpEvidence e = load_evidence(snp_case("milan-virtee"));
  auto report = parse_snp_report(e.report);
  ASSERT_TRUE(report.ok());
  SnpPolicy p;
  EXPECT_TRUE(check_snp_policy(*report, SnpProduct::kMilan, p).ok());
  report->policy |= kSnpPolicyDebugBit;
  expect_fails_at(check_snp_policy(*report, SnpProduct::kMilan, p), snp_check::kDebugPolicy,
                  "debug bit set");
  p.allow_debug = true;
  EXPECT_TRUE(check_snp_policy(*report, SnpProduct::kMilan, p).ok());
}

// Every byte of the signed area, one bit each: all fail. Where the flip makes the report
// unparseable (version above 255, another signature algorithm) it fails as report_format;
// everywhere else the signature catches it.
TEST(SnpVerify, EveryBitFlipInTheSignedReportFails) {
  const auto& c = snp_case("milan-virtee");
  const SnpEvidence good = load_evidence(c);
  const SnpPolicy p = test_policy(c);
  for (size_t off = 0; off < kSnpSignedSize; ++off) {
    SnpEvidence e = good;
    e.report[off] ^= 0x01;
    const SnpVerification v = verify_snp(e, p);
    const bool format = (off >= 1 && off <= 3) || (off >= 0x34 && off <= 0x37);
    expect_fails_at(v, format ? snp_check::kReportFormat : snp_check::kReportSignature,
                    "offset " + std::to_string(off));
  }
}

TEST(SnpVerify, FlippedMeasurementBitFailsReportSignature) {
  for (const auto& c : snp_cases()) {
    SnpEvidence e = load_evidence(c);
    e.report[0x90 + 5] ^= 0x10;  // measurement byte 5
    expect_fails_at(verify_snp(e, test_policy(c)), snp_check::kReportSignature, c.name);
  }
}

TEST(SnpVerify, FlippedSignatureBitsFail) {
  const auto& c = snp_case("genoa-azure-trustee");
  const SnpEvidence good = load_evidence(c);
  // r's lowest byte, r's top significant byte, s's middle, and r's zero padding (which makes r
  // exceed the group order).
  for (size_t off : {size_t{0x2A0}, size_t{0x2A0 + 47}, size_t{0x2E8 + 20}, size_t{0x2A0 + 60}}) {
    SnpEvidence e = good;
    e.report[off] ^= 0x04;
    expect_fails_at(verify_snp(e, test_policy(c)), snp_check::kReportSignature,
                    "signature offset " + std::to_string(off));
  }
}

TEST(SnpVerify, ReportWithAnotherChipsVcekFailsReportSignature) {
  // Genuine Milan report, genuine Milan VCEK and chain, but of another machine.
  SnpEvidence e = load_evidence(snp_case("milan-virtee"));
  e.vcek = load_evidence(snp_case("milan-trustee")).vcek;
  expect_fails_at(verify_snp(e, test_policy(snp_case("milan-virtee"))), snp_check::kReportSignature,
                  "swapped VCEK");
}

// Every bit-0 flip of the VCEK: whether it breaks the DER, the TBS or the signature, the chain
// check refuses it.
TEST(SnpVerify, EveryBitFlipInTheVcekFailsTheChain) {
  const auto& c = snp_case("milan-trustee");
  const SnpEvidence good = load_evidence(c);
  for (size_t off = 0; off < good.vcek.size(); ++off) {
    SnpEvidence e = good;
    e.vcek[off] ^= 0x01;
    const SnpVerification v = verify_snp(e, test_policy(c));
    ASSERT_FALSE(v.ok()) << off;
    EXPECT_EQ(v.failed_check, snp_check::kVcekChain)
        << "offset " << off << ": " << v.status.to_string();
  }
}

TEST(SnpVerify, FlippedVcekSignatureAndTbsNameTheCheck) {
  const auto& c = snp_case("genoa-azure-trustee");
  SnpEvidence e = load_evidence(c);
  e.vcek[e.vcek.size() - 10] ^= 0x80;  // inside the signature value
  SnpVerification v = verify_snp(e, test_policy(c));
  expect_fails_at(v, snp_check::kVcekChain, "VCEK signature");
  EXPECT_NE(v.status.message().find("does not verify"), std::string::npos) << v.status.to_string();
  e = load_evidence(c);
  e.vcek[300] ^= 0x01;  // inside the TBS (subject public key)
  expect_fails_at(verify_snp(e, test_policy(c)), snp_check::kVcekChain, "VCEK TBS");
}

TEST(SnpVerify, FlippedAskFailsAskSignature) {
  const auto& c = snp_case("milan-virtee");
  SnpEvidence e = load_evidence(c);
  e.ask[e.ask.size() - 3] ^= 0x01;
  expect_fails_at(verify_snp(e, test_policy(c)), snp_check::kAskSignature, "ASK signature");
  e = load_evidence(c);
  e.ask[400] ^= 0x01;
  expect_fails_at(verify_snp(e, test_policy(c)), snp_check::kAskSignature, "ASK TBS");
}

TEST(SnpVerify, FlippedArkFailsArkRoot) {
  const auto& c = snp_case("milan-virtee");
  for (size_t off : {size_t{200}, size_t{1000}}) {
    SnpEvidence e = load_evidence(c);
    e.ark[e.ark.size() - off] ^= 0x01;
    expect_fails_at(verify_snp(e, test_policy(c)), snp_check::kArkRoot, "ARK flip");
  }
}

TEST(SnpVerify, ADifferentRootFailsArkRoot) {
  const auto& c = snp_case("milan-virtee");
  // The caller trusts only Genoa's ARK: a Milan chain is refused at the root.
  SnpPolicy p = test_policy(c);
  p.trusted_ark_sha256 = {find_amd_root(SnpProduct::kGenoa)->ark_sha256};
  SnpVerification v = verify_snp(load_evidence(c), p);
  expect_fails_at(v, snp_check::kArkRoot, "policy root");
  EXPECT_NE(v.status.to_string().find("69d063b45344d26a"), std::string::npos)
      << v.status.to_string();
  // Trusting Milan's explicitly works.
  p.trusted_ark_sha256 = {find_amd_root(SnpProduct::kMilan)->ark_sha256};
  EXPECT_TRUE(verify_snp(load_evidence(c), p).ok());
  // A genuine but other AMD root (Genoa's) as the ARK: pinned, but it did not sign Milan's ASK.
  SnpEvidence e = load_evidence(c);
  e.ark = load_evidence(snp_case("genoa-azure-trustee")).ark;
  expect_fails_at(verify_snp(e, test_policy(c)), snp_check::kAskSignature, "Genoa ARK");
  // A self-signed certificate that is not an AMD root at all (the ASK is not self-signed, so
  // use it in the ARK's place).
  e = load_evidence(c);
  e.ark = e.ask;
  expect_fails_at(verify_snp(e, test_policy(c)), snp_check::kArkRoot, "ASK as ARK");
}

TEST(SnpVerify, BuiltInFingerprintsMatchTheShippedCertificates) {
  for (const AmdRoot& root : amd_builtin_roots()) {
    const std::string name(snp_product_name(root.product));
    std::string lower = name;
    lower[0] = static_cast<char>(lower[0] - 'A' + 'a');
    const auto file = ::power::testing::read_bytes(attest_data("amd/" + lower + "_ark.pem"));
    const std::string file_text(file.begin(), file.end());
    EXPECT_EQ(file_text, root.ark_pem) << name;
    auto e = SnpEvidence::from_parts({}, file);  // PEM -> DER
    ASSERT_TRUE(e.ok());
    EXPECT_EQ(to_hex(sha256(e->vcek.data(), e->vcek.size())), to_hex(root.ark_sha256)) << name;
  }
  // The values AMD's KDS chain hashes to (`openssl x509 -outform der | sha256sum`).
  EXPECT_EQ(to_hex(find_amd_root(SnpProduct::kMilan)->ark_sha256),
            "69d063b45344d26a2e94e1f4210de49ef555308287d4c174445c95639a540bcd");
  EXPECT_EQ(to_hex(find_amd_root(SnpProduct::kGenoa)->ark_sha256),
            "4c6598d19c18719c5dfd4a7d335f674e5bfe1d8f800cea2cf270c10d103db2f1");
}

TEST(SnpVerify, WrongPinnedMeasurementFails) {
  const auto& c = snp_case("milan-virtee");
  SnpPolicy p = test_policy(c);
  std::array<uint8_t, 48> good{};
  ASSERT_TRUE(parse_snp_hex("7a1e5c266c0108dbc9bb94fa926951320940915d0aafb42464bd88b579ea158d3e1"
                            "a0dc39b2c60bd95b9c480cd81841f",
                            good, "measurement")
                  .ok());
  std::array<uint8_t, 48> wrong = good;
  wrong[47] ^= 0x01;
  p.measurements = {wrong};
  const SnpVerification v = verify_snp(load_evidence(c), p);
  expect_fails_at(v, snp_check::kMeasurement, "wrong measurement");
  EXPECT_NE(v.status.to_string().find("7a1e5c266c0108db"), std::string::npos);
  p.measurements = {wrong, good};  // any of the pinned values
  const SnpVerification ok = verify_snp(load_evidence(c), p);
  EXPECT_TRUE(ok.ok()) << ok.status.to_string();
  EXPECT_TRUE(contains(ok.checks_passed, snp_check::kMeasurement));
}

TEST(SnpVerify, ReportDataIsTheKeyBinding) {
  const auto& c = snp_case("milan-vlek-trustee");
  SnpEvidence e = load_evidence(c);
  SnpPolicy p = test_policy(c);
  std::array<uint8_t, 64> expected{};
  std::copy_n(e.report.begin() + 0x50, 64, expected.begin());
  p.report_data = expected;
  SnpVerification v = verify_snp(e, p);
  EXPECT_TRUE(v.ok()) << v.status.to_string();
  EXPECT_TRUE(contains(v.checks_passed, snp_check::kReportData));
  // A different TLS key (one bit of the expected binding) is refused.
  (*p.report_data)[0] ^= 0x01;
  expect_fails_at(verify_snp(e, p), snp_check::kReportData, "wrong key binding");
  // And the binding cannot be moved in the report: that breaks the signature first.
  e.report[0x50] ^= 0x01;
  expect_fails_at(verify_snp(e, p), snp_check::kReportSignature, "edited report_data");
}

TEST(SnpVerify, HostDataIdKeyVmplAndMinTcb) {
  const auto& c = snp_case("milan-vlek-trustee");  // vmpl 1
  const SnpEvidence e = load_evidence(c);
  SnpPolicy p = test_policy(c);
  p.max_vmpl = 0;
  expect_fails_at(verify_snp(e, p), snp_check::kVmpl, "vmpl 1 > 0");
  p.max_vmpl = 1;
  EXPECT_TRUE(verify_snp(e, p).ok());

  // reported_tcb: bootloader 4, tee 0, snp 24, microcode 217 (current microcode 220).
  p.min_tcb = SnpMinTcb{4, 0, 24, 217, 0};
  SnpVerification v = verify_snp(e, p);
  EXPECT_TRUE(v.ok()) << v.status.to_string();
  p.min_tcb = SnpMinTcb{4, 0, 25, 0, 0};
  expect_fails_at(verify_snp(e, p), snp_check::kMinTcb, "snp 24 < 25");
  p.min_tcb = SnpMinTcb{0, 0, 0, 218, 0};
  v = verify_snp(e, p);
  expect_fails_at(v, snp_check::kMinTcb, "reported microcode 217 < 218");
  EXPECT_NE(v.status.to_string().find("reported_tcb"), std::string::npos);
  p.min_tcb.reset();

  p.host_data = std::array<uint8_t, 32>{};  // the report's host data is zero
  EXPECT_TRUE(verify_snp(e, p).ok());
  (*p.host_data)[31] = 1;
  expect_fails_at(verify_snp(e, p), snp_check::kHostData, "host_data");
  p.host_data.reset();
  p.id_key_digest = std::array<uint8_t, 48>{};
  p.id_key_digest->fill(0xAB);
  expect_fails_at(verify_snp(e, p), snp_check::kIdKeyDigest, "id_key_digest");
}

TEST(SnpVerify, CertificateDatesAreChecked) {
  const auto& c = snp_case("milan-vlek-trustee");
  SnpPolicy p = test_policy(c);
  p.verify_time_unix = 1767225600;  // 2026-01-01: the VLEK expired 2025-12-10
  SnpVerification v = verify_snp(load_evidence(c), p);
  expect_fails_at(v, snp_check::kCertValidity, "expired VLEK");
  EXPECT_NE(v.status.message().find("VLEK certificate has expired"), std::string::npos);
  p.verify_time_unix = 1577836800;  // 2020-01-01: before the ARK
  expect_fails_at(verify_snp(load_evidence(c), p), snp_check::kCertValidity, "not yet valid");
  p.check_cert_validity = false;
  v = verify_snp(load_evidence(c), p);
  EXPECT_TRUE(v.ok()) << v.status.to_string();
  EXPECT_TRUE(contains(v.checks_skipped, snp_check::kCertValidity));
}

TEST(SnpVerify, SigningKeyFieldMustMatchTheCertificate) {
  // A VCEK report presented with a VLEK chain: refused before any signature is trusted.
  SnpEvidence e = load_evidence(snp_case("milan-vlek-trustee"));
  e.report = load_evidence(snp_case("milan-virtee")).report;
  expect_fails_at(verify_snp(e, test_policy(snp_case("milan-virtee"))), snp_check::kSigningKey,
                  "VCEK report with VLEK");
}

TEST(SnpVerify, TcbComparisonAgainstVcekExtensions) {
  const auto& c = snp_case("milan-virtee");
  const SnpEvidence e = load_evidence(c);
  auto cert = read_snp_cert_tcb(e.vcek);
  ASSERT_TRUE(cert.ok()) << cert.status().to_string();
  EXPECT_EQ(cert->bootloader, 3);
  EXPECT_EQ(cert->tee, 0);
  EXPECT_EQ(cert->snp, 8);
  EXPECT_EQ(cert->microcode, 115);
  EXPECT_EQ(cert->product_name, "Milan-B0");
  ASSERT_EQ(cert->hw_id.size(), 64u);
  auto report = parse_snp_report(e.report);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(check_snp_tcb(*report, *cert, SnpProduct::kMilan).ok());
  EXPECT_TRUE(check_snp_chip_id(*report, *cert).ok());

  // Each component in turn raised by one in the report (bytes 0, 1, 6, 7 of TCB_VERSION).
  for (int byte : {0, 1, 6, 7}) {
    SnpReport r = *report;
    r.reported_tcb += uint64_t{1} << (8 * byte);
    Status st = check_snp_tcb(r, *cert, SnpProduct::kMilan);
    EXPECT_FALSE(st.ok()) << byte;
    EXPECT_NE(st.message().find("differs from the report's REPORTED_TCB"), std::string::npos);
  }
  // Reserved bytes do not take part.
  SnpReport r = *report;
  r.reported_tcb ^= uint64_t{0xFF} << 16;
  EXPECT_TRUE(check_snp_tcb(r, *cert, SnpProduct::kMilan).ok());
  // A certificate lacking an SPL is refused, not treated as zero.
  SnpCertTcb missing = *cert;
  missing.snp.reset();
  EXPECT_FALSE(check_snp_tcb(*report, missing, SnpProduct::kMilan).ok());
  // Another chip's id.
  r = *report;
  r.chip_id[63] ^= 0x01;
  EXPECT_FALSE(check_snp_chip_id(r, *cert).ok());
  // The VCEK of another machine with the same TCB (milan-trustee: also 3/0/8/115).
  auto other = read_snp_cert_tcb(load_evidence(snp_case("milan-trustee")).vcek);
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(check_snp_tcb(*report, *other, SnpProduct::kMilan).ok());
  EXPECT_FALSE(check_snp_chip_id(*report, *other).ok());
}

TEST(SnpVerify, TcbOfEveryCaseMatchesItsCertificate) {
  for (const auto& c : snp_cases()) {
    const SnpEvidence e = load_evidence(c);
    auto cert = read_snp_cert_tcb(e.vcek);
    ASSERT_TRUE(cert.ok()) << c.name;
    auto report = parse_snp_report(e.report);
    ASSERT_TRUE(report.ok()) << c.name;
    EXPECT_TRUE(check_snp_tcb(*report, *cert, c.product).ok()) << c.name;
    EXPECT_EQ(cert->hw_id.empty(), c.vlek) << c.name;
  }
}

TEST(SnpVerify, GarbageEvidenceFailsClosed) {
  const auto& c = snp_case("milan-virtee");
  SnpEvidence e = load_evidence(c);
  e.report.resize(100);
  expect_fails_at(verify_snp(e, test_policy(c)), snp_check::kReportFormat, "short report");
  e = load_evidence(c);
  e.vcek = {0x30, 0x03, 0x02, 0x01, 0x00};
  expect_fails_at(verify_snp(e, test_policy(c)), snp_check::kVcekChain, "garbage VCEK");
  e = load_evidence(c);
  e.vcek.push_back(0);
  expect_fails_at(verify_snp(e, test_policy(c)), snp_check::kVcekChain, "trailing byte");
  e = load_evidence(c);
  e.vcek.clear();
  expect_fails_at(verify_snp(e, test_policy(c)), snp_check::kVcekChain, "no VCEK");
  EXPECT_FALSE(verify_snp(SnpEvidence{}, SnpPolicy{}).ok());
}

}  // namespace
}  // namespace power::attest
