// CPU feature detection (x86 CPUID + XGETBV; the OS must enable the register state), the CPU
// model string, and the ISA name a kernel path is chosen by. Detected once; thread-safe.
#pragma once

#include <string>

namespace power {

struct CpuFeatures {
  bool sse42 = false;
  bool avx = false;
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512vnni = false;
  bool avx512bf16 = false;
  bool avx512fp16 = false;
  bool avxvnni = false;
  bool neon = false;
  std::string model;  // e.g. "Intel(R) Xeon(R) ..."; empty when unknown
  int logical_cores = 1;

  // Space-separated names of the flags that are set, e.g. "avx avx2 fma f16c avx512f".
  std::string flags_string() const;
};

const CpuFeatures& cpu_features();

// The best SIMD path this CPU supports: "avx512", "avx2" or "scalar".
std::string best_isa();

}  // namespace power
