// The SIMD path the CPU kernels run: chosen once per process from the CPU's features
// (base/cpu.h best_isa()) or forced with POWER_FORCE_ISA=scalar|avx2|avx512.
//
// Forcing a path the CPU lacks logs an error once and falls back to the best path the CPU has
// (a forced test run then still exercises a real path, and the log says which). Thread-safe:
// the choice is made once (function-local static); set_cpu_isa_for_testing() replaces it and
// must not race with running kernels.
#pragma once

#include <string_view>

namespace power {

enum class CpuIsa { kScalar, kAvx2, kAvx512 };

CpuIsa cpu_isa();
std::string_view cpu_isa_name(CpuIsa isa);
// True when this CPU can run `isa` and the binary was built with its kernels.
bool cpu_isa_available(CpuIsa isa);
// Overrides the active path (tests, benchmarks). Returns false (and changes nothing) when the
// path is not available here.
bool set_cpu_isa_for_testing(CpuIsa isa);

}  // namespace power
