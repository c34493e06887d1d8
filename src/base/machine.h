// What the machine is, read from /proc, /sys and CPUID: the static part of the hardware
// record (CPU identity and microcode, cores and SMT, caches, NUMA, memory, cgroup limits,
// transparent huge pages, governor, hypervisor, kernel and OS). Receipts carry it in their
// device section; `power ab` and `power bench --json` add the run's state and probes
// (validate/hardware.h). Values the machine does not expose are null, never guessed.
// Thread-safety: machine_facts() is read once (function-local static); machine_state() reads
// the changing values on each call.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace power {

nlohmann::json machine_facts();
// memory_available_bytes, affinity (this thread's allowed CPUs as a list like "0-3,6"),
// frequency_khz_current, cpu_mhz.
nlohmann::json machine_state();

// The first line of a sysfs/procfs file as an integer where it is one (else the text, or
// null when unreadable).
nlohmann::json sys_int_or_null(const std::string& path);

}  // namespace power
