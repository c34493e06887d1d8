#include "kernels/cpu/isa.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include "base/cpu.h"
#include "base/log.h"

namespace power {
namespace {

// best_isa() names the widest vector unit; the AVX-512 kernels also need VNNI, so walk down
// from there to the first path whose kernels can run.
CpuIsa best_available() {
  const std::string best = best_isa();
  if (best == "avx512" && cpu_isa_available(CpuIsa::kAvx512)) return CpuIsa::kAvx512;
  if (best != "scalar" && cpu_isa_available(CpuIsa::kAvx2)) return CpuIsa::kAvx2;
  return CpuIsa::kScalar;
}

CpuIsa choose_isa() {
  const CpuIsa best = best_available();
  const char* env = std::getenv("POWER_FORCE_ISA");
  if (env == nullptr || *env == '\0') return best;
  const std::string want = env;
  CpuIsa forced;
  if (want == "scalar") {
    forced = CpuIsa::kScalar;
  } else if (want == "avx2") {
    forced = CpuIsa::kAvx2;
  } else if (want == "avx512") {
    forced = CpuIsa::kAvx512;
  } else {
    POWER_LOG_ERROR("POWER_FORCE_ISA={} is not one of scalar, avx2, avx512; using {}", want,
                    cpu_isa_name(best));
    return best;
  }
  if (!cpu_isa_available(forced)) {
    POWER_LOG_ERROR("POWER_FORCE_ISA={}: this CPU lacks it (flags: {}); using {}", want,
                    cpu_features().flags_string(), cpu_isa_name(best));
    return best;
  }
  return forced;
}

std::atomic<int>& isa_slot() {
  static std::atomic<int> slot{static_cast<int>(choose_isa())};
  return slot;
}

}  // namespace

CpuIsa cpu_isa() {
  return static_cast<CpuIsa>(isa_slot().load(std::memory_order_relaxed));
}

std::string_view cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx512:
      return "avx512";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kScalar:
      break;
  }
  return "scalar";
}

bool cpu_isa_available(CpuIsa isa) {
  const CpuFeatures& f = cpu_features();
  switch (isa) {
    case CpuIsa::kScalar:
      return true;
    case CpuIsa::kAvx2:
      return f.avx2 && f.fma && f.f16c;
    case CpuIsa::kAvx512:
      return f.avx512f && f.avx512bw && f.avx512vl && f.avx512vnni && f.avx2 && f.fma && f.f16c;
  }
  return false;
}

bool set_cpu_isa_for_testing(CpuIsa isa) {
  if (!cpu_isa_available(isa)) return false;
  isa_slot().store(static_cast<int>(isa), std::memory_order_relaxed);
  return true;
}

}  // namespace power
