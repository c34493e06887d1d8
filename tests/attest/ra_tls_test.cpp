// RA-TLS (src/attest/ra_tls.h, ra_tls_client.h): the server identity's certificate and its
// evidence extension, the verifier's checks by name (development refused by default, the key
// binding, the nonce binding, tampered or missing evidence), genuine published SEV-SNP evidence
// inside a test certificate and against a stated binding, the "no TEE" refusal, the SEV-SNP
// certificate table parser on hostile bytes, and a TLS round trip over a unix socket and TCP.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attest/ra_tls.h"
#include "attest/ra_tls_client.h"
#include "attest/tee_evidence.h"
#include "ra_tls_test_server.h"
#include "snp_test_data.h"
#include "test_util.h"

namespace power::attest {
namespace {

using nlohmann::json;
using testing::attest_data;
using testing::load_evidence;
using testing::snp_case;
using testing::snp_cases;
using testing::test_policy;

RaTlsIdentity development_identity() {
  auto id = RaTlsIdentity::create(RaTlsMode::kDevelopment);
  EXPECT_TRUE(id.ok()) << id.status().to_string();
  return std::move(id).value();
}

// An identity whose certificate carries whatever `evidence` is, whatever key it was made for.
RaTlsIdentity identity_with(json evidence) {
  RaTlsOptions options;
  options.evidence_provider = [evidence](const std::array<uint8_t, 64>&) -> Result<json> {
    return evidence;
  };
  auto id = RaTlsIdentity::create(RaTlsMode::kSevSnp, options);
  EXPECT_TRUE(id.ok()) << id.status().to_string();
  return std::move(id).value();
}

RaTlsVerifyOptions allow_development() {
  RaTlsVerifyOptions o;
  o.allow_development = true;
  return o;
}

RaTlsVerifyOptions snp_options(const testing::SnpCase& c) {
  RaTlsVerifyOptions o;
  o.snp_policy = test_policy(c);
  return o;
}

bool passed(const RaTlsVerification& v, std::string_view check) {
  return std::find(v.checks_passed.begin(), v.checks_passed.end(), check) != v.checks_passed.end();
}

TeeEvidenceOptions no_tee() {
  TeeEvidenceOptions o;
  o.tsm_report_dir = "/nonexistent/power-test/tsm/report";
  o.sev_guest_device = "/nonexistent/power-test/sev-guest";
  return o;
}

TEST(RaTlsMode, ParsesTheFourNames) {
  for (RaTlsMode m :
       {RaTlsMode::kAuto, RaTlsMode::kSevSnp, RaTlsMode::kTdx, RaTlsMode::kDevelopment}) {
    auto parsed = parse_ra_tls_mode(ra_tls_mode_name(m));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, m);
  }
  EXPECT_FALSE(parse_ra_tls_mode("dev").ok());
  EXPECT_FALSE(parse_ra_tls_mode("").ok());
  EXPECT_FALSE(parse_ra_tls_mode("SEV-SNP").ok());
}

TEST(RaTlsIdentity, RefusesWithoutATeeNamingWhereItLooked) {
  RaTlsOptions options;
  options.tee = no_tee();
  for (RaTlsMode m : {RaTlsMode::kAuto, RaTlsMode::kSevSnp, RaTlsMode::kTdx}) {
    auto id = RaTlsIdentity::create(m, options);
    ASSERT_FALSE(id.ok()) << ra_tls_mode_name(m);
    const std::string msg = id.status().to_string();
    EXPECT_NE(msg.find("/nonexistent/power-test/tsm/report"), std::string::npos) << msg;
    if (m != RaTlsMode::kTdx) {
      EXPECT_NE(msg.find("/nonexistent/power-test/sev-guest"), std::string::npos) << msg;
      EXPECT_NE(msg.find("development"), std::string::npos) << msg;
    }
  }
  auto kind = detect_tee(no_tee());
  ASSERT_FALSE(kind.ok());
  EXPECT_EQ(kind.status().code(), StatusCode::kUnsupported);
}

TEST(RaTlsIdentity, DevelopmentCertificateCarriesTheBindingInItsExtension) {
  RaTlsIdentity id = development_identity();
  ASSERT_NE(id.certificate(), nullptr);
  ASSERT_NE(id.private_key(), nullptr);
  EXPECT_TRUE(id.development());
  EXPECT_EQ(id.cert_pem().rfind("-----BEGIN CERTIFICATE-----", 0), 0u);

  auto spki = ra_tls_certificate_spki(id.cert_der());
  ASSERT_TRUE(spki.ok()) << spki.status().to_string();
  EXPECT_EQ(*spki, id.spki_der());
  auto from_pem = ra_tls_certificate_spki(
      std::span(reinterpret_cast<const uint8_t*>(id.cert_pem().data()), id.cert_pem().size()));
  ASSERT_TRUE(from_pem.ok());
  EXPECT_EQ(*from_pem, id.spki_der());

  auto evidence = ra_tls_certificate_evidence(id.cert_der());
  ASSERT_TRUE(evidence.ok()) << evidence.status().to_string();
  EXPECT_EQ(*evidence, id.evidence_json());
  EXPECT_EQ((*evidence)["type"], "development");
  EXPECT_EQ((*evidence)["report_data"], snp_hex(ratls_report_data(id.spki_der(), {})));

  // Two identities never share a key.
  RaTlsIdentity other = development_identity();
  EXPECT_NE(other.spki_der(), id.spki_der());
}

TEST(RaTlsVerify, DevelopmentIsRefusedByDefaultAndAcceptedWhenAllowed) {
  RaTlsIdentity id = development_identity();
  RaTlsVerification v = verify_ra_tls_certificate(id.cert_der(), {});
  EXPECT_FALSE(v.ok());
  EXPECT_EQ(v.failed_check, "development");
  EXPECT_NE(v.status.to_string().find("check=development"), std::string::npos);

  v = verify_ra_tls_certificate(id.cert_der(), allow_development());
  ASSERT_TRUE(v.ok()) << v.status.to_string();
  EXPECT_EQ(v.evidence_type, "development");
  EXPECT_TRUE(passed(v, "key_binding"));
  EXPECT_TRUE(v.to_json()["verified"].get<bool>());
}

TEST(RaTlsVerify, EvidenceBindingAnotherKeyFailsKeyBinding) {
  const std::vector<uint8_t> someone_else = {1, 2, 3};
  RaTlsIdentity id =
      identity_with(ra_tls_development_evidence(ratls_report_data(someone_else, {})));
  RaTlsVerification v = verify_ra_tls_certificate(id.cert_der(), allow_development());
  EXPECT_EQ(v.failed_check, "key_binding") << v.status.to_string();

  // The right key but a nonce in a certificate's evidence: not what a certificate binds.
  const std::vector<uint8_t> nonce = {9};
  RaTlsIdentity dev = development_identity();
  v = verify_ra_tls_evidence(ra_tls_development_evidence(ratls_report_data(dev.spki_der(), nonce)),
                             ratls_report_data(dev.spki_der(), {}), allow_development());
  EXPECT_EQ(v.failed_check, "key_binding");
}

TEST(RaTlsVerify, MissingAndUnparseableCertificates) {
  // A genuine certificate without Power's extension (a VCEK).
  RaTlsVerification v = verify_ra_tls_certificate(
      ::power::testing::read_bytes(attest_data("milan-virtee/vcek.der")), allow_development());
  EXPECT_EQ(v.failed_check, "evidence_missing") << v.status.to_string();

  const std::vector<uint8_t> garbage = {0x30, 0x03, 0x02, 0x01, 0x00};
  v = verify_ra_tls_certificate(garbage, allow_development());
  EXPECT_EQ(v.failed_check, "certificate");
  v = verify_ra_tls_certificate({}, allow_development());
  EXPECT_EQ(v.failed_check, "certificate");
}

// Replaces the first occurrence of `from` in the DER by `to` (same length), so the certificate
// still parses but its extension says something else.
std::vector<uint8_t> patched(std::vector<uint8_t> der, std::string_view from, std::string_view to) {
  auto it = std::search(der.begin(), der.end(), from.begin(), from.end());
  EXPECT_NE(it, der.end()) << from;
  if (it != der.end()) std::copy(to.begin(), to.end(), it);
  return der;
}

TEST(RaTlsVerify, TamperedExtensionFailsWithAClearError) {
  RaTlsIdentity id = development_identity();
  const std::string text = id.evidence_json().dump();

  RaTlsVerification v = verify_ra_tls_certificate(
      patched(id.cert_der(), "\"development\"", "\"developmenX\""), allow_development());
  EXPECT_EQ(v.failed_check, "evidence_format");
  EXPECT_NE(v.status.to_string().find("unknown evidence type"), std::string::npos);

  v = verify_ra_tls_certificate(patched(id.cert_der(), "{\"", "[\""), allow_development());
  EXPECT_EQ(v.failed_check, "evidence_format");
  EXPECT_NE(v.status.to_string().find("not JSON"), std::string::npos) << v.status.to_string();

  // The UTF8String's tag (0x0C) and length precede the JSON.
  std::vector<uint8_t> der = id.cert_der();
  auto at = std::search(der.begin(), der.end(), text.begin(), text.end());
  ASSERT_NE(at, der.end());
  // Long-form length (0x81 n) for JSON over 127 bytes.
  const auto tag = *(at - 2) == 0x81 ? at - 3 : at - 2;
  ASSERT_EQ(*tag, 0x0C);
  *tag = 0x04;  // OCTET STRING instead
  v = verify_ra_tls_certificate(der, allow_development());
  EXPECT_EQ(v.failed_check, "evidence_format");
  EXPECT_NE(v.status.to_string().find("UTF8String"), std::string::npos) << v.status.to_string();

  // Every one-bit change of the evidence text is refused, even with development allowed.
  const size_t offset = static_cast<size_t>(at - der.begin());
  for (size_t i = 0; i < text.size(); ++i) {
    std::vector<uint8_t> flipped = id.cert_der();
    flipped[offset + i] ^= 0x01;
    v = verify_ra_tls_certificate(flipped, allow_development());
    EXPECT_FALSE(v.ok()) << "byte " << i << " ('" << text[i] << "')";
  }
}

TEST(RaTlsVerify, TdxEvidenceFailsClosedAsUnsupported) {
  RaTlsIdentity id = identity_with({{"type", "tdx"}, {"quote", "AAAA"}});
  EXPECT_EQ(id.evidence_type(), "tdx");
  RaTlsVerification v = verify_ra_tls_certificate(id.cert_der(), allow_development());
  EXPECT_EQ(v.failed_check, "unsupported_evidence");
}

TEST(RaTlsVerify, ProviderReturningUnknownTypeIsRefusedAtCreate) {
  RaTlsOptions options;
  options.evidence_provider = [](const std::array<uint8_t, 64>&) -> Result<json> {
    return json{{"type", "sgx"}};
  };
  EXPECT_FALSE(RaTlsIdentity::create(RaTlsMode::kAuto, options).ok());
}

// Genuine evidence in a certificate made here binds someone else's key: everything about the
// report verifies, and the binding is what fails.
TEST(RaTlsVerify, GenuineSnpEvidenceInAnotherCertificateFailsKeyBinding) {
  for (const testing::SnpCase& c : snp_cases()) {
    SCOPED_TRACE(c.name);
    RaTlsIdentity id = identity_with(load_evidence(c).to_json());
    EXPECT_EQ(id.evidence_type(), "sev-snp");
    RaTlsVerification v = verify_ra_tls_certificate(id.cert_der(), snp_options(c));
    EXPECT_EQ(v.failed_check, "key_binding") << v.status.to_string();
    EXPECT_TRUE(passed(v, "report_signature"));
    EXPECT_TRUE(passed(v, "vcek_chain"));
    ASSERT_TRUE(v.snp_report.has_value());
  }
}

TEST(RaTlsVerify, GenuineSnpEvidenceVerifiesAgainstItsStatedBinding) {
  for (const testing::SnpCase& c : snp_cases()) {
    SCOPED_TRACE(c.name);
    const SnpEvidence e = load_evidence(c);
    auto report = parse_snp_report(e.report);
    ASSERT_TRUE(report.ok());
    RaTlsVerification v = verify_ra_tls_evidence(e.to_json(), report->report_data, snp_options(c));
    ASSERT_TRUE(v.ok()) << v.status.to_string();
    EXPECT_TRUE(passed(v, "key_binding"));
    EXPECT_EQ(v.evidence_type, "sev-snp");

    // The development switch never lets SEV-SNP evidence skip a check.
    std::array<uint8_t, 64> wrong = report->report_data;
    wrong[17] ^= 0x04;
    RaTlsVerifyOptions lax = snp_options(c);
    lax.allow_development = true;
    EXPECT_EQ(verify_ra_tls_evidence(e.to_json(), wrong, lax).failed_check, "key_binding");
    // A nonce half that differs is named as such when a nonce was asked for.
    wrong = report->report_data;
    wrong[40] ^= 0x80;
    EXPECT_EQ(verify_ra_tls_evidence(e.to_json(), wrong, snp_options(c), true).failed_check,
              "nonce_binding");
  }
}

TEST(RaTlsVerify, FlippedBitsInGenuineEvidenceFailWithTheCheckNamed) {
  const testing::SnpCase& c = snp_case("milan-virtee");
  const SnpEvidence good = load_evidence(c);
  auto report = parse_snp_report(good.report);
  ASSERT_TRUE(report.ok());
  const auto rd = report->report_data;
  auto check = [&](const SnpEvidence& e, const RaTlsVerifyOptions& o) {
    return verify_ra_tls_evidence(e.to_json(), rd, o).failed_check;
  };
  SnpEvidence e = good;
  e.report[0x90] ^= 0x01;  // measurement
  EXPECT_EQ(check(e, snp_options(c)), "report_signature");
  e = good;
  e.report[0x50] ^= 0x01;  // report_data itself: the signature covers it
  EXPECT_EQ(check(e, snp_options(c)), "report_signature");
  e = good;
  e.report[kSnpSignatureOffset + 5] ^= 0x01;  // r
  EXPECT_EQ(check(e, snp_options(c)), "report_signature");
  e = good;
  e.vcek[e.vcek.size() / 2] ^= 0x01;
  EXPECT_EQ(check(e, snp_options(c)), "vcek_chain");
  e = good;
  e.vcek[e.vcek.size() - 10] ^= 0x01;  // the VCEK's own signature
  EXPECT_EQ(check(e, snp_options(c)), "vcek_chain");

  RaTlsVerifyOptions pinned = snp_options(c);
  std::array<uint8_t, 48> wrong_measurement = report->measurement;
  wrong_measurement[0] ^= 0x01;
  pinned.snp_policy.measurements = {wrong_measurement};
  EXPECT_EQ(check(good, pinned), "measurement");
  pinned.snp_policy.measurements = {report->measurement};
  EXPECT_EQ(check(good, pinned), "");
}

TEST(RaTlsVerify, EvidenceJsonThatIsNotEvidence) {
  const std::array<uint8_t, 64> rd{};
  for (const json& j :
       {json(nullptr), json::array(), json{{"kind", "sev-snp"}}, json{{"type", 5}},
        json{{"type", "sev-snp"}}, json{{"type", "sev-snp"}, {"report", "!!"}, {"vcek", ""}},
        json{{"type", "development"}}, json{{"type", "development"}, {"report_data", "00"}},
        json{{"type", "development"}, {"report_data", snp_hex(rd)}, {"x", 1}}}) {
    RaTlsVerification v = verify_ra_tls_evidence(j, rd, allow_development());
    EXPECT_EQ(v.failed_check, "evidence_format") << j.dump();
  }
}

TEST(RaTlsIdentity, FreshEvidenceBindsKeyAndNonce) {
  RaTlsIdentity id = development_identity();
  const std::vector<uint8_t> nonce = {0xde, 0xad, 0xbe, 0xef};
  auto answer = id.fresh_evidence(nonce);
  ASSERT_TRUE(answer.ok()) << answer.status().to_string();
  EXPECT_EQ((*answer)["type"], "development");
  EXPECT_EQ((*answer)["nonce"], "deadbeef");
  EXPECT_EQ((*answer)["certificate"], id.cert_pem());
  EXPECT_EQ((*answer)["report_data"], snp_hex(ratls_report_data(id.spki_der(), nonce)));

  RaTlsVerification v = verify_attestation_response(*answer, id.cert_der(), nonce, {});
  EXPECT_EQ(v.failed_check, "development");
  v = verify_attestation_response(*answer, id.cert_der(), nonce, allow_development());
  ASSERT_TRUE(v.ok()) << v.status.to_string();
  EXPECT_TRUE(passed(v, "nonce_binding"));

  const std::vector<uint8_t> other_nonce = {0xde, 0xad, 0xbe, 0xee};
  v = verify_attestation_response(*answer, id.cert_der(), other_nonce, allow_development());
  EXPECT_EQ(v.failed_check, "nonce_binding");
  // An answer echoing the right nonce over evidence bound to another one.
  json replayed = *answer;
  replayed["evidence"] = ra_tls_development_evidence(ratls_report_data(id.spki_der(), other_nonce));
  v = verify_attestation_response(replayed, id.cert_der(), nonce, allow_development());
  EXPECT_EQ(v.failed_check, "nonce_binding");
  // The answer of another server, relayed over this TLS session.
  RaTlsIdentity other = development_identity();
  auto other_answer = other.fresh_evidence(nonce);
  ASSERT_TRUE(other_answer.ok());
  v = verify_attestation_response(*other_answer, id.cert_der(), nonce, allow_development());
  EXPECT_EQ(v.failed_check, "key_binding");
  other_answer->erase("certificate");
  v = verify_attestation_response(*other_answer, id.cert_der(), nonce, allow_development());
  EXPECT_EQ(v.failed_check, "key_binding");

  EXPECT_FALSE(id.fresh_evidence({}).ok());
  EXPECT_FALSE(id.fresh_evidence(std::vector<uint8_t>(kRaTlsNonceMaxBytes + 1)).ok());
  EXPECT_TRUE(id.fresh_evidence(std::vector<uint8_t>(kRaTlsNonceMaxBytes)).ok());
}

TEST(RaTlsIdentity, NonceHexIsBounded) {
  EXPECT_TRUE(parse_ra_tls_nonce("00").ok());
  EXPECT_TRUE(parse_ra_tls_nonce(std::string(128, 'a')).ok());
  EXPECT_FALSE(parse_ra_tls_nonce("").ok());
  EXPECT_FALSE(parse_ra_tls_nonce("abc").ok());
  EXPECT_FALSE(parse_ra_tls_nonce("zz").ok());
  EXPECT_FALSE(parse_ra_tls_nonce(std::string(130, 'a')).ok());
}

// ---- SEV-SNP certificate table (configfs-tsm auxblob, SNP_GET_EXT_REPORT) ----

constexpr std::array<uint8_t, 16> kVcekGuid = {0x63, 0xda, 0x75, 0x8d, 0xe6, 0x64, 0x45, 0x64,
                                               0xad, 0xc5, 0xf4, 0xb9, 0x3b, 0xe8, 0xac, 0xcd};
constexpr std::array<uint8_t, 16> kAskGuid = {0x4a, 0xb7, 0xb3, 0x79, 0xbb, 0xac, 0x4f, 0xe4,
                                              0xa0, 0x2f, 0x05, 0xae, 0xf3, 0x27, 0xc7, 0x82};
constexpr std::array<uint8_t, 16> kArkGuid = {0xc0, 0xb4, 0x06, 0xa4, 0xa8, 0x03, 0x49, 0x52,
                                              0x97, 0x43, 0x3f, 0xb6, 0x01, 0x4c, 0xd0, 0xae};
constexpr std::array<uint8_t, 16> kOtherGuid = {1, 2,  3,  4,  5,  6,  7,  8,
                                                9, 10, 11, 12, 13, 14, 15, 16};

struct TableEntry {
  std::array<uint8_t, 16> guid;
  std::vector<uint8_t> data;
};

void put_le32(std::vector<uint8_t>& out, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) out[at + i] = static_cast<uint8_t>(v >> (8 * i));
}

std::vector<uint8_t> make_table(const std::vector<TableEntry>& entries, size_t padding = 0) {
  const size_t header = (entries.size() + 1) * 24;
  std::vector<uint8_t> out(header);
  for (size_t i = 0; i < entries.size(); ++i) {
    std::copy(entries[i].guid.begin(), entries[i].guid.end(), out.begin() + i * 24);
    put_le32(out, i * 24 + 16, static_cast<uint32_t>(out.size()));
    put_le32(out, i * 24 + 20, static_cast<uint32_t>(entries[i].data.size()));
    out.insert(out.end(), entries[i].data.begin(), entries[i].data.end());
  }
  out.resize(out.size() + padding);  // the kernel hands back whole pages
  return out;
}

TEST(SnpCertTable, ParsesVcekAskArkAndSkipsOthers) {
  const std::vector<uint8_t> vcek(100, 0xAA), ask(50, 0xBB), ark(70, 0xCC), other(9, 0xDD);
  auto t = parse_snp_cert_table(
      make_table({{kArkGuid, ark}, {kOtherGuid, other}, {kVcekGuid, vcek}, {kAskGuid, ask}}, 4000));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->vcek, vcek);
  EXPECT_EQ(t->ask, ask);
  EXPECT_EQ(t->ark, ark);
  EXPECT_TRUE(t->vlek.empty());

  auto empty = parse_snp_cert_table({});
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->vcek.empty());
  auto zeros = parse_snp_cert_table(std::vector<uint8_t>(4096));
  ASSERT_TRUE(zeros.ok());
  EXPECT_TRUE(zeros->vcek.empty());
}

TEST(SnpCertTable, RefusesMalformedTables) {
  const std::vector<uint8_t> vcek(100, 0xAA);
  const std::vector<uint8_t> good = make_table({{kVcekGuid, vcek}});

  std::vector<uint8_t> no_terminator(good.begin(), good.begin() + 24);
  EXPECT_FALSE(parse_snp_cert_table(no_terminator).ok());

  std::vector<uint8_t> bad = good;
  put_le32(bad, 16, 10);  // inside the entries
  EXPECT_FALSE(parse_snp_cert_table(bad).ok());
  bad = good;
  put_le32(bad, 20, 101);  // one past the end
  EXPECT_FALSE(parse_snp_cert_table(bad).ok());
  bad = good;
  put_le32(bad, 16, 0xFFFFFFF0u);  // offset + length wraps 32 bits
  put_le32(bad, 20, 0x20);
  EXPECT_FALSE(parse_snp_cert_table(bad).ok());
  bad = good;
  put_le32(bad, 20, 0);
  EXPECT_FALSE(parse_snp_cert_table(bad).ok());
  EXPECT_FALSE(parse_snp_cert_table(make_table({{kVcekGuid, vcek}, {kVcekGuid, vcek}})).ok());

  // Every truncation and every single-bit flip of a valid table parses or is refused, without
  // reading outside the bytes (the sanitizer stage runs this).
  const std::vector<uint8_t> full =
      make_table({{kVcekGuid, vcek}, {kAskGuid, std::vector<uint8_t>(30, 1)}});
  for (size_t n = 0; n < full.size(); ++n) {
    (void)parse_snp_cert_table(std::span(full.data(), n));
  }
  for (size_t i = 0; i < 72; ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<uint8_t> f = full;
      f[i] ^= static_cast<uint8_t>(1 << bit);
      auto t = parse_snp_cert_table(f);
      if (t.ok()) {
        EXPECT_LE(t->vcek.size() + t->ask.size(), full.size());
      }
    }
  }
}

// ---- TLS round trip ----

TEST(RaTlsClient, FetchesThePeerCertificateOverAUnixSocketAndTcp) {
  RaTlsIdentity id = development_identity();
  const std::string dir = ::power::testing::make_temp_dir("power_ra_tls");
  const std::string path = dir + "/ra.sock";
  {
    testing::RaTlsTestServer server(id, path);
    ASSERT_TRUE(server.ok());
    auto peer = fetch_peer_certificate("unix://" + path);
    ASSERT_TRUE(peer.ok()) << peer.status().to_string();
    EXPECT_EQ(peer->cert_der, id.cert_der());
    EXPECT_FALSE(peer->attestation.has_value());
    EXPECT_EQ(verify_ra_tls_certificate(peer->cert_der, {}).failed_check, "development");
    EXPECT_TRUE(verify_ra_tls_certificate(peer->cert_der, allow_development()).ok());

    RaTlsFetchOptions with_nonce;
    with_nonce.nonce = std::vector<uint8_t>{1, 2, 3, 4, 5, 6, 7, 8};
    peer = fetch_peer_certificate("unix://" + path, with_nonce);
    ASSERT_TRUE(peer.ok()) << peer.status().to_string();
    ASSERT_TRUE(peer->attestation.has_value());
    RaTlsVerification v = verify_attestation_response(*peer->attestation, peer->cert_der,
                                                      *with_nonce.nonce, allow_development());
    ASSERT_TRUE(v.ok()) << v.status.to_string();
  }
  {
    testing::RaTlsTestServer server(id, "");
    ASSERT_TRUE(server.ok());
    RaTlsFetchOptions with_nonce;
    with_nonce.nonce = std::vector<uint8_t>{42};
    auto peer =
        fetch_peer_certificate("https://127.0.0.1:" + std::to_string(server.port()), with_nonce);
    ASSERT_TRUE(peer.ok()) << peer.status().to_string();
    EXPECT_EQ(peer->cert_der, id.cert_der());
    ASSERT_TRUE(peer->attestation.has_value());
    EXPECT_TRUE(verify_attestation_response(*peer->attestation, peer->cert_der, *with_nonce.nonce,
                                            allow_development())
                    .ok());
  }
  ::power::testing::remove_tree(dir);
}

TEST(RaTlsClient, RefusesBadTargets) {
  for (const char* t : {"http://127.0.0.1:1", "127.0.0.1:443", "unix://relative.sock", "https://",
                        "https://host:port", "https://[::1"}) {
    EXPECT_FALSE(fetch_peer_certificate(t).ok()) << t;
  }
  auto refused = fetch_peer_certificate("unix:///nonexistent/power-test/ra.sock");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kIo);
}

}  // namespace
}  // namespace power::attest
