// The hardware record: what a speed figure was measured on, read from the machine when the
// figure is taken (`power ab` evidence, `power bench --json`, `power hardware`). Fields that
// the machine does not expose are null, never guessed. docs/VALIDATION.md lists every field
// and where it comes from.
// Thread-safety: hardware_record() may be called from any thread; the probes take the time
// they say (a few hundred milliseconds in all).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace power::validate {

struct HardwareOptions {
  int threads = 0;         // compute threads the measurement uses (0: all)
  std::string model_path;  // a file to probe the storage it lives on ("" : no probe)
  bool probes = true;      // the read-rate and DRAM-bandwidth probes
  uint64_t read_probe_bytes = 64ULL << 20;
  uint64_t dram_probe_bytes = 256ULL << 20;
};

nlohmann::json hardware_record(const HardwareOptions& options);

// The build: Power version, compiler, flags, build type and the running binary's SHA-256.
nlohmann::json build_record();

}  // namespace power::validate
