// AMD's SEV-SNP roots of trust shipped in the library: for each product the ARK (AMD Root
// Key, self-signed) and the ASK (AMD SEV Key, signed by the ARK, signs VCEKs), as served by AMD's
// Key Distribution Service at https://kdsintf.amd.com/vcek/v1/{Milan,Genoa,Turin}/cert_chain.
// The verifier pins the ARK by the SHA-256 of its DER; the embedded ASK lets evidence carry
// only the VCEK (no network and no certificate cache needed). The ASVK (signs VLEKs) is not
// embedded: VLEK evidence carries it.
//
// Thread-safety: immutable static data.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>

#include "attest/snp_report.h"

namespace power::attest {

struct AmdRoot {
  SnpProduct product;
  // SHA-256 of the ARK certificate's DER encoding.
  std::array<uint8_t, 32> ark_sha256;
  std::string_view ark_pem;
  std::string_view ask_pem;
};

// Milan, Genoa and Turin, in that order.
std::span<const AmdRoot> amd_builtin_roots();
// The built-in root whose ARK has this DER SHA-256, or nullptr.
const AmdRoot* find_amd_root(std::span<const uint8_t, 32> ark_sha256);
const AmdRoot* find_amd_root(SnpProduct product);

}  // namespace power::attest
