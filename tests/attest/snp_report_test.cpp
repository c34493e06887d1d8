// parse_snp_report over real reports (field values cross-checked against the bytes with an
// independent reader: python's int.from_bytes over the offsets of AMD's table) and hostile
// sizes; TCB_VERSION layouts; the ratls_report_data formula against sha256sum.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "attest/snp_report.h"
#include "attest/snp_verify.h"
#include "snp_test_data.h"

namespace power::attest {
namespace {

using testing::attest_data;

std::vector<uint8_t> report_bytes(const std::string& name) {
  return ::power::testing::read_bytes(attest_data(name + "/report.bin"));
}

std::string hex(std::span<const uint8_t> b) {
  return snp_hex(b);
}

TEST(SnpReport, ParsesVirteeMilanReport) {
  auto r = parse_snp_report(report_bytes("milan-virtee"));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->version, 2u);
  EXPECT_EQ(r->policy, 0x30000u);
  EXPECT_FALSE(r->debug_allowed());
  EXPECT_EQ(r->vmpl, 0u);
  EXPECT_EQ(r->signature_algo, 1u);
  EXPECT_EQ(r->signing_key, SnpSigningKey::kVcek);
  EXPECT_FALSE(r->mask_chip_key);
  EXPECT_EQ(r->reported_tcb, 0x7308000000000003u);
  EXPECT_EQ(hex(r->measurement),
            "7a1e5c266c0108dbc9bb94fa926951320940915d0aafb42464bd88b579ea158d3e1a0dc39b2c60bd95b9"
            "c480cd81841f");
  EXPECT_EQ(hex(std::span(r->chip_id).first(8)), "d49554ec717f4e5b");
  auto tcb = decode_snp_tcb(r->reported_tcb, SnpProduct::kMilan);
  ASSERT_TRUE(tcb.ok());
  EXPECT_EQ(snp_tcb_string(*tcb), "bootloader=3 tee=0 snp=8 microcode=115");
}

TEST(SnpReport, ParsesGenoaVersion3WithCpuid) {
  auto r = parse_snp_report(report_bytes("genoa-azure-trustee"));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->version, 3u);
  EXPECT_EQ(r->cpuid_fam_id, 0x19);
  EXPECT_EQ(r->cpuid_mod_id, 0x11);
  EXPECT_EQ(r->cpuid_step, 0x01);
  EXPECT_EQ(snp_product_from_cpuid(r->cpuid_fam_id, r->cpuid_mod_id), SnpProduct::kGenoa);
  auto tcb = decode_snp_tcb(r->reported_tcb, SnpProduct::kGenoa);
  ASSERT_TRUE(tcb.ok());
  EXPECT_EQ(snp_tcb_string(*tcb), "bootloader=10 tee=0 snp=23 microcode=84");
}

TEST(SnpReport, VlekReportSaysVlek) {
  auto r = parse_snp_report(report_bytes("milan-vlek-trustee"));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->signing_key, SnpSigningKey::kVlek);
  EXPECT_EQ(r->vmpl, 1u);
  EXPECT_EQ(snp_product_from_cpuid(r->cpuid_fam_id, r->cpuid_mod_id), SnpProduct::kMilan);
}

TEST(SnpReport, GoSevGuestReportAllowsDebug) {
  auto r = parse_snp_report(report_bytes("milan-go-sev-guest"));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->policy, 0xb0000u);
  EXPECT_TRUE(r->debug_allowed());
}

TEST(SnpReport, WrongSizesAreRefusedWithTheSizes) {
  std::vector<uint8_t> bytes = report_bytes("milan-virtee");
  for (size_t size : {size_t{0}, size_t{1}, kSnpSignedSize, kSnpReportSize - 1}) {
    auto r = parse_snp_report(std::span(bytes).first(size));
    ASSERT_FALSE(r.ok()) << size;
    EXPECT_EQ(r.status().code(), StatusCode::kCorrupt);
    EXPECT_NE(r.status().to_string().find("wrong size"), std::string::npos);
    EXPECT_NE(r.status().to_string().find("actual_bytes=" + std::to_string(size)),
              std::string::npos)
        << r.status().to_string();
  }
  bytes.push_back(0);
  auto r = parse_snp_report(bytes);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().to_string().find("actual_bytes=1185"), std::string::npos);
}

TEST(SnpReport, UnknownVersionAlgorithmAndSigningKeyAreRefused) {
  const std::vector<uint8_t> good = report_bytes("milan-virtee");
  for (uint8_t version : {0, 1, 6, 255}) {
    std::vector<uint8_t> b = good;
    b[0] = version;
    auto r = parse_snp_report(b);
    ASSERT_FALSE(r.ok()) << int(version);
    EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
  }
  std::vector<uint8_t> b = good;
  b[0x34] = 2;  // not ECDSA P-384 SHA-384
  auto r = parse_snp_report(b);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("signature algorithm"), std::string::npos);
  b = good;
  b[0x48] = 2 << 2;  // SIGNING_KEY 2 is reserved
  r = parse_snp_report(b);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("SIGNING_KEY"), std::string::npos);
}

TEST(SnpTcb, TurinLayoutDiffersAndUnknownIsRefused) {
  const uint64_t raw = 0x4400000000191103;  // bytes: 03 11 19 00 00 00 00 44
  auto milan = decode_snp_tcb(raw, SnpProduct::kMilan);
  ASSERT_TRUE(milan.ok());
  EXPECT_EQ(milan->bootloader, 0x03);
  EXPECT_EQ(milan->tee, 0x11);
  EXPECT_EQ(milan->snp, 0x00);
  EXPECT_EQ(milan->microcode, 0x44);
  auto turin = decode_snp_tcb(raw, SnpProduct::kTurin);
  ASSERT_TRUE(turin.ok());
  EXPECT_EQ(turin->fmc, 0x03);
  EXPECT_EQ(turin->bootloader, 0x11);
  EXPECT_EQ(turin->tee, 0x19);
  EXPECT_EQ(turin->snp, 0x00);
  EXPECT_EQ(turin->microcode, 0x44);
  EXPECT_TRUE(turin->has_fmc);
  EXPECT_FALSE(decode_snp_tcb(raw, SnpProduct::kUnknown).ok());
}

// Expected digests from coreutils: `printf abc | sha256sum`,
// `printf power-ratls-nonce | sha256sum`.
constexpr const char* kSha256Abc =
    "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
constexpr const char* kSha256Nonce =
    "f96aaafc6b99575ed13682f2c1f8658cafb268fbae1dcaeb95b8d47e5350420e";

std::span<const uint8_t> bytes_of(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST(RatlsReportData, KeyHashThenNonceHash) {
  const auto rd = ratls_report_data(bytes_of("abc"), bytes_of("power-ratls-nonce"));
  EXPECT_EQ(hex(std::span(rd).first(32)), kSha256Abc);
  EXPECT_EQ(hex(std::span(rd).subspan(32)), kSha256Nonce);
}

TEST(RatlsReportData, NoNonceLeavesSecondHalfZero) {
  const auto rd = ratls_report_data(bytes_of("abc"), {});
  EXPECT_EQ(hex(std::span(rd).first(32)), kSha256Abc);
  EXPECT_EQ(hex(std::span(rd).subspan(32)), std::string(64, '0'));
}

}  // namespace
}  // namespace power::attest
