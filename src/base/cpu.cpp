#include "base/cpu.h"

#include <unistd.h>

#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define POWER_X86 1
#endif

namespace power {
namespace {

#ifdef POWER_X86
uint64_t xgetbv0() {
  uint32_t eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}
#endif

CpuFeatures detect() {
  CpuFeatures f;
  long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  f.logical_cores = n > 0 ? static_cast<int>(n) : 1;
#ifdef POWER_X86
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return f;
  const unsigned max_leaf = a;
  __get_cpuid(1, &a, &b, &c, &d);
  const bool osxsave = (c >> 27) & 1;
  f.sse42 = (c >> 20) & 1;
  f.fma = (c >> 12) & 1;
  f.f16c = (c >> 29) & 1;
  const bool avx_hw = (c >> 28) & 1;
  uint64_t xcr0 = osxsave ? xgetbv0() : 0;
  const bool ymm_os = (xcr0 & 0x6) == 0x6;
  const bool zmm_os = (xcr0 & 0xe6) == 0xe6;
  f.avx = avx_hw && ymm_os;
  if (!f.avx) f.fma = f.f16c = false;
  if (max_leaf >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    f.avx2 = f.avx && ((b >> 5) & 1);
    if (zmm_os) {
      f.avx512f = (b >> 16) & 1;
      f.avx512dq = (b >> 17) & 1;
      f.avx512bw = (b >> 30) & 1;
      f.avx512vl = (b >> 31) & 1;
      f.avx512vnni = (c >> 11) & 1;
      f.avx512fp16 = (d >> 23) & 1;
    }
    __cpuid_count(7, 1, a, b, c, d);
    f.avxvnni = f.avx && ((a >> 4) & 1);
    if (zmm_os) f.avx512bf16 = (a >> 5) & 1;
  }
  __get_cpuid(0x80000000, &a, &b, &c, &d);
  if (a >= 0x80000004) {
    char brand[49] = {};
    for (unsigned i = 0; i < 3; ++i) {
      __get_cpuid(0x80000002 + i, &a, &b, &c, &d);
      std::memcpy(brand + 16 * i, &a, 4);
      std::memcpy(brand + 16 * i + 4, &b, 4);
      std::memcpy(brand + 16 * i + 8, &c, 4);
      std::memcpy(brand + 16 * i + 12, &d, 4);
    }
    std::string s(brand);
    auto first = s.find_first_not_of(' ');
    auto last = s.find_last_not_of(' ');
    if (first != std::string::npos) f.model = s.substr(first, last - first + 1);
  }
#elif defined(__aarch64__)
  f.neon = true;
#endif
  return f;
}

}  // namespace

std::string CpuFeatures::flags_string() const {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(sse42, "sse4.2");
  add(avx, "avx");
  add(avx2, "avx2");
  add(fma, "fma");
  add(f16c, "f16c");
  add(avx512f, "avx512f");
  add(avx512bw, "avx512bw");
  add(avx512vl, "avx512vl");
  add(avx512dq, "avx512dq");
  add(avx512vnni, "avx512vnni");
  add(avx512bf16, "avx512bf16");
  add(avx512fp16, "avx512fp16");
  add(avxvnni, "avxvnni");
  add(neon, "neon");
  return s;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

std::string best_isa() {
  const CpuFeatures& f = cpu_features();
  if (f.avx512f && f.avx512bw && f.avx512vl && f.fma) return "avx512";
  if (f.avx2 && f.fma && f.f16c) return "avx2";
  return "scalar";
}

}  // namespace power
