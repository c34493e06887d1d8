// SnpEvidence JSON (what the server serves) round-trips and still verifies; SnpPolicy JSON is
// strict: unknown keys, wrong types, wrong hex lengths and out-of-range values are errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>

#include "attest/snp_verify.h"
#include "snp_test_data.h"

namespace power::attest {
namespace {

using testing::attest_data;
using testing::load_evidence;
using testing::snp_case;
using testing::snp_cases;
using testing::test_policy;

TEST(SnpEvidenceJson, RoundTripVerifies) {
  for (const auto& c : snp_cases()) {
    const SnpEvidence e = load_evidence(c);
    const std::string text = e.to_json_text();
    auto back = SnpEvidence::from_json_text(text);
    ASSERT_TRUE(back.ok()) << c.name << ": " << back.status().to_string();
    EXPECT_EQ(back->report, e.report);
    EXPECT_EQ(back->vcek, e.vcek);
    EXPECT_EQ(back->ask, e.ask);
    EXPECT_EQ(back->ark, e.ark);
    EXPECT_TRUE(verify_snp(*back, test_policy(c)).ok()) << c.name;
  }
}

TEST(SnpEvidenceJson, CompactFormOmitsAbsentCertificatesAndAcceptsPem) {
  SnpEvidence e = load_evidence(snp_case("genoa-azure-trustee"));
  e.ask.clear();
  e.ark.clear();
  nlohmann::json j = e.to_json();
  EXPECT_EQ(j["type"], "sev-snp");
  EXPECT_FALSE(j.contains("ask"));
  EXPECT_FALSE(j.contains("ark"));
  // The VCEK as PEM text, as an operator might paste it from AMD's KDS.
  const auto pem = ::power::testing::read_bytes(attest_data("genoa-azure-trustee/vcek.pem"));
  j["vcek"] = std::string(pem.begin(), pem.end());
  auto back = SnpEvidence::from_json(j);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->vcek, e.vcek);
  EXPECT_TRUE(verify_snp(*back, test_policy(snp_case("genoa-azure-trustee"))).ok());
}

TEST(SnpEvidenceJson, MalformedEvidenceIsRefused) {
  const nlohmann::json good = load_evidence(snp_case("milan-virtee")).to_json();
  auto refused = [](const nlohmann::json& j) { return !SnpEvidence::from_json(j).ok(); };
  nlohmann::json j = good;
  j["extra"] = 1;
  EXPECT_TRUE(refused(j));
  j = good;
  j["type"] = "tdx";
  EXPECT_TRUE(refused(j));
  j = good;
  j.erase("vcek");
  EXPECT_TRUE(refused(j));
  j = good;
  j["report"] = "not base64!";
  EXPECT_TRUE(refused(j));
  j = good;
  j["report"] = 7;
  EXPECT_TRUE(refused(j));
  j = good;
  j["vcek"] = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
  EXPECT_TRUE(refused(j));
  EXPECT_FALSE(SnpEvidence::from_json_text("{").ok());
  EXPECT_FALSE(SnpEvidence::from_json_text("[]").ok());
}

TEST(SnpPolicyJson, FullPolicyParses) {
  const std::string m1(96, 'a');
  const std::string m2(96, 'B');
  const std::string text = R"({"type": "sev-snp", "measurements": [")" + m1 + R"(", ")" + m2 +
                           R"("], "report_data": ")" + std::string(128, '0') +
                           R"(", "allow_debug": true, "max_vmpl": 2,
      "min_tcb": {"bootloader": 3, "tee": 0, "snp": 8, "microcode": 115, "fmc": 1},
      "host_data": ")" + std::string(64, 'f') +
                           R"(", "id_key_digest": ")" + std::string(96, '1') +
                           R"(", "trusted_ark_sha256": [")" + std::string(64, '2') +
                           R"("], "check_cert_validity": false, "verify_time_unix": 1748736000})";
  auto p = SnpPolicy::from_json_text(text);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  ASSERT_EQ(p->measurements.size(), 2u);
  EXPECT_EQ(p->measurements[0][0], 0xaa);
  EXPECT_EQ(p->measurements[1][47], 0xbb);
  ASSERT_TRUE(p->report_data);
  EXPECT_EQ((*p->report_data)[63], 0);
  EXPECT_TRUE(p->allow_debug);
  EXPECT_EQ(p->max_vmpl, 2u);
  ASSERT_TRUE(p->min_tcb);
  EXPECT_EQ(p->min_tcb->microcode, 115);
  EXPECT_EQ(p->min_tcb->fmc, 1);
  EXPECT_EQ((*p->host_data)[0], 0xff);
  EXPECT_EQ((*p->id_key_digest)[0], 0x11);
  ASSERT_EQ(p->trusted_ark_sha256.size(), 1u);
  EXPECT_EQ(p->trusted_ark_sha256[0][0], 0x22);
  EXPECT_FALSE(p->check_cert_validity);
  EXPECT_EQ(p->verify_time_unix, 1748736000);
}

TEST(SnpPolicyJson, EmptyPolicyIsTheDefaults) {
  auto p = SnpPolicy::from_json_text("{}");
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->allow_debug);
  EXPECT_TRUE(p->check_cert_validity);
  EXPECT_TRUE(p->measurements.empty());
  EXPECT_FALSE(p->report_data);
}

TEST(SnpPolicyJson, StrictParsingRefuses) {
  for (const char* text : {
           R"({"measurement": []})",                         // misspelt key
           R"({"type": "tdx"})",                             // other TEE
           R"({"measurements": "abcd"})",                    // not an array
           R"({"measurements": ["abcd"]})",                  // wrong length
           R"({"measurements": [7]})",                       // not a string
           R"({"report_data": "zz"})",                       // not 128 hex
           R"({"allow_debug": 1})",                          // not a bool
           R"({"max_vmpl": 4})",                             // out of range
           R"({"max_vmpl": -1})",                            // out of range
           R"({"max_vmpl": 1.5})",                           // not an integer
           R"({"min_tcb": {"snp": 256}})",                   // out of range
           R"({"min_tcb": {"sn": 1}})",                      // unknown component
           R"({"min_tcb": 3})",                              // not an object
           R"({"trusted_ark_sha256": []})",                  // empty root list
           R"({"verify_time_unix": 18446744073709551615})",  // beyond int64
           R"([])",
           R"(not json)",
       }) {
    auto p = SnpPolicy::from_json_text(text);
    EXPECT_FALSE(p.ok()) << text;
  }
  auto p = SnpPolicy::from_json_text(R"({"measurment": []})");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().to_string().find("key=measurment"), std::string::npos);
}

TEST(SnpPolicyJson, PolicyFromJsonDrivesVerification) {
  const auto& c = snp_case("milan-virtee");
  auto p = SnpPolicy::from_json_text(
      R"({"verify_time_unix": 1748736000, "measurements": ["7a1e5c266c0108dbc9bb94fa926951320940915d0aafb42464bd88b579ea158d3e1a0dc39b2c60bd95b9c480cd81841f"], "max_vmpl": 0, "min_tcb": {"bootloader": 3, "snp": 8, "microcode": 115}})");
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  const SnpVerification v = verify_snp(load_evidence(c), *p);
  EXPECT_TRUE(v.ok()) << v.status.to_string();
}

}  // namespace
}  // namespace power::attest
