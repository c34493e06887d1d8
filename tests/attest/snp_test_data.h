// The published SEV-SNP evidence in tests/data/attest (provenance in SOURCES.md there), loaded
// as SnpEvidence, and the policy the tests verify it under.
#pragma once

#include <string>
#include <vector>

#include "attest/snp_verify.h"
#include "test_util.h"

namespace power::attest::testing {

inline std::string attest_data(const std::string& name) {
  return std::string(POWER_SOURCE_DIR) + "/tests/data/attest/" + name;
}

struct SnpCase {
  std::string name;  // directory under tests/data/attest
  std::string vcek;  // file in that directory
  std::string ask;   // path under tests/data/attest
  std::string ark;
  SnpProduct product;
  bool vlek = false;
  bool debug = false;  // the guest policy allows debugging
};

// Every genuine report shipped: three Milan VCEK reports from three projects, a Genoa report
// from Azure (via trustee) and a Milan VLEK report.
inline const std::vector<SnpCase>& snp_cases() {
  static const std::vector<SnpCase> cases = {
      {"milan-virtee", "vcek.der", "amd/milan_ask.pem", "amd/milan_ark.pem", SnpProduct::kMilan},
      {"milan-go-sev-guest", "vcek.der", "amd/milan_ask.pem", "amd/milan_ark.pem",
       SnpProduct::kMilan, false, /*debug=*/true},
      {"milan-trustee", "vcek.der", "amd/milan_ask.pem", "amd/milan_ark.pem", SnpProduct::kMilan},
      {"genoa-azure-trustee", "vcek.pem", "amd/genoa_ask.pem", "amd/genoa_ark.pem",
       SnpProduct::kGenoa},
      {"milan-vlek-trustee", "vlek.der", "milan-vlek-trustee/asvk.pem", "amd/milan_ark.pem",
       SnpProduct::kMilan, /*vlek=*/true},
  };
  return cases;
}

inline SnpEvidence load_evidence(const SnpCase& c) {
  auto e =
      SnpEvidence::from_parts(::power::testing::read_bytes(attest_data(c.name + "/report.bin")),
                              ::power::testing::read_bytes(attest_data(c.name + "/" + c.vcek)),
                              ::power::testing::read_bytes(attest_data(c.ask)),
                              ::power::testing::read_bytes(attest_data(c.ark)));
  EXPECT_TRUE(e.ok()) << c.name << ": " << e.status().to_string();
  return e.ok() ? std::move(e).value() : SnpEvidence{};
}

inline const SnpCase& snp_case(const std::string& name) {
  for (const SnpCase& c : snp_cases()) {
    if (c.name == name) return c;
  }
  ADD_FAILURE() << "no case " << name;
  return snp_cases().front();
}

// 2025-06-01T00:00:00Z: inside every shipped certificate's validity (the VLEK's ends
// 2025-12-10, the Genoa VCEK's starts 2025-01-24), so the tests do not rot with the clock.
inline constexpr int64_t kVerifyTimeUnix = 1748736000;

inline SnpPolicy test_policy(const SnpCase& c) {
  SnpPolicy p;
  p.verify_time_unix = kVerifyTimeUnix;
  p.allow_debug = c.debug;
  return p;
}

}  // namespace power::attest::testing
