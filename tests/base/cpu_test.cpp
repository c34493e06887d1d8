#include "base/cpu.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

namespace power {
namespace {

// Cross-check CPUID against the kernel's view in /proc/cpuinfo (Linux x86 only).
TEST(Cpu, AgreesWithProcCpuinfo) {
  std::ifstream f("/proc/cpuinfo");
  std::string line, flags;
  while (std::getline(f, line)) {
    if (line.rfind("flags", 0) == 0) {
      flags = line.substr(line.find(':') + 1) + " ";
      break;
    }
  }
  if (flags.empty()) GTEST_SKIP() << "no x86 flags line in /proc/cpuinfo";
  auto has = [&](const std::string& name) {
    return flags.find(" " + name + " ") != std::string::npos;
  };
  const CpuFeatures& c = cpu_features();
  EXPECT_EQ(c.avx2, has("avx2"));
  EXPECT_EQ(c.fma, has("fma"));
  EXPECT_EQ(c.f16c, has("f16c"));
  EXPECT_EQ(c.avx512f, has("avx512f"));
  EXPECT_EQ(c.avx512bw, has("avx512bw"));
  EXPECT_EQ(c.avx512vnni, has("avx512_vnni"));
  EXPECT_EQ(c.avx512bf16, has("avx512_bf16"));
  EXPECT_GE(c.logical_cores, 1);
  std::string isa = best_isa();
  EXPECT_TRUE(isa == "avx512" || isa == "avx2" || isa == "scalar") << isa;
}

}  // namespace
}  // namespace power
