// `power attest verify` through the binary: genuine published SEV-SNP evidence verifies offline
// against its stated REPORT_DATA (exit 0), a flipped bit in the report, the VCEK or the binding
// and a wrong pinned measurement fail with exit 3 and the check named, the development
// certificate is refused by default, and the online form over a unix socket. Exit 1 is kept for
// usage errors and unreachable servers.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "attest/ra_tls.h"
#include "base/file.h"
#include "ra_tls_test_server.h"
#include "run_util.h"
#include "snp_test_data.h"
#include "test_util.h"

namespace power::attest {
namespace {

using nlohmann::json;
using ::power::testing::run_power;

class CliAttestTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = ::power::testing::make_temp_dir("power_cli_attest"); }
  void TearDown() override { ::power::testing::remove_tree(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    EXPECT_TRUE(write_file_atomic(path, std::string_view(text)).ok());
    return path;
  }
  // The shipped VLEK expired in 2025: the policy fixes the verification time (snp_test_data.h).
  std::string policy(const std::string& extra = "") {
    return write("policy.json", "{\"verify_time_unix\": " +
                                    std::to_string(testing::kVerifyTimeUnix) + extra + "}");
  }
  std::string dir_;
};

TEST_F(CliAttestTest, GenuineEvidenceOfflineAndTheCheckNamedOnFailure) {
  const testing::SnpCase& c = testing::snp_case("milan-virtee");
  const SnpEvidence good = testing::load_evidence(c);
  auto report = parse_snp_report(good.report);
  ASSERT_TRUE(report.ok());
  const std::string rd = snp_hex(report->report_data);
  const std::string evidence = write("e.json", good.to_json_text());

  auto r = run_power(
      {"attest", "verify", "--evidence", evidence, "--report-data", rd, "--policy", policy()});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("verified"), std::string::npos);

  r = run_power({"attest", "verify", "--evidence", evidence, "--report-data", rd, "--policy",
                 policy(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_TRUE(j["verified"].get<bool>());
  EXPECT_TRUE(j["failed_check"].is_null());
  EXPECT_NE(std::find(j["checks_passed"].begin(), j["checks_passed"].end(), "report_signature"),
            j["checks_passed"].end());

  std::string flipped_rd = rd;
  flipped_rd[0] = flipped_rd[0] == '0' ? '1' : '0';
  r = run_power({"attest", "verify", "--evidence", evidence, "--report-data", flipped_rd,
                 "--policy", policy(), "--json"});
  EXPECT_EQ(r.exit_code, 3);
  j = json::parse(r.out);
  EXPECT_FALSE(j["verified"].get<bool>());
  EXPECT_EQ(j["failed_check"], "key_binding");

  SnpEvidence e = good;
  e.report[0x90] ^= 0x01;
  r = run_power({"attest", "verify", "--evidence", write("bad.json", e.to_json_text()),
                 "--report-data", rd, "--policy", policy()});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_NE(r.err.find("check report_signature failed"), std::string::npos) << r.err;

  e = good;
  e.vcek[e.vcek.size() / 2] ^= 0x01;
  r = run_power({"attest", "verify", "--evidence", write("bad.json", e.to_json_text()),
                 "--report-data", rd, "--policy", policy()});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_NE(r.err.find("check vcek_chain failed"), std::string::npos) << r.err;

  std::string wrong_measurement = snp_hex(report->measurement);
  wrong_measurement[95] = wrong_measurement[95] == '0' ? '1' : '0';
  r = run_power({"attest", "verify", "--evidence", evidence, "--report-data", rd, "--policy",
                 policy(", \"measurements\": [\"" + wrong_measurement + "\"]")});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_NE(r.err.find("check measurement failed"), std::string::npos) << r.err;
  r = run_power({"attest", "verify", "--evidence", evidence, "--report-data", rd, "--policy",
                 policy(", \"measurements\": [\"" + snp_hex(report->measurement) + "\"]")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST_F(CliAttestTest, DevelopmentCertificateIsRefusedUnlessAllowed) {
  auto id = RaTlsIdentity::create(RaTlsMode::kDevelopment);
  ASSERT_TRUE(id.ok());
  const std::string cert = write("cert.pem", id->cert_pem());
  const std::string evidence = write("dev.json", id->evidence_json().dump());
  auto r = run_power({"attest", "verify", "--evidence", evidence, "--cert", cert});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_NE(r.err.find("check development failed"), std::string::npos) << r.err;
  r = run_power(
      {"attest", "verify", "--evidence", evidence, "--cert", cert, "--allow-development"});
  EXPECT_EQ(r.exit_code, 0) << r.err;

  const std::string sock = dir_ + "/ra.sock";
  testing::RaTlsTestServer server(*id, sock);
  ASSERT_TRUE(server.ok());
  r = run_power({"attest", "verify", "unix://" + sock, "--json"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_EQ(json::parse(r.out)["failed_check"], "development");
  r = run_power({"attest", "verify", "unix://" + sock, "--allow-development", "--fresh"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("attestation: verified"), std::string::npos) << r.out;
  r = run_power(
      {"attest", "verify", "unix://" + sock, "--allow-development", "--nonce", "0123abcd"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
}

TEST_F(CliAttestTest, UsageErrorsExitOne) {
  const std::string e = write("e.json", "{}");
  EXPECT_EQ(run_power({"attest", "verify"}).exit_code, 1);
  EXPECT_EQ(run_power({"attest", "verify", "--evidence", e}).exit_code, 1);
  EXPECT_EQ(run_power({"attest", "verify", "--evidence", e, "--report-data", "00"}).exit_code, 1);
  EXPECT_EQ(run_power({"attest", "verify", "unix:///nonexistent/power-test.sock"}).exit_code, 1);
  EXPECT_EQ(run_power({"attest", "verify", "unix:///x.sock", "--nonce", "zz"}).exit_code, 1);
}

}  // namespace
}  // namespace power::attest
