// The default device budget for the CPU: what the OS says this process may still use.
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "power/runtime.h"

namespace power {
namespace {

bool read_u64(const std::string& path, uint64_t* out) {
  std::ifstream f(path);
  std::string s;
  if (!(f >> s) || s == "max") return false;
  try {
    *out = std::stoull(s);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

uint64_t default_memory_budget_bytes() {
  uint64_t budget = UINT64_MAX;
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    if (line.rfind("MemAvailable:", 0) == 0) {
      std::istringstream ss(line.substr(13));
      uint64_t kb = 0;
      if (ss >> kb) budget = kb * 1024;
    }
  }
  uint64_t limit = 0, current = 0;
  if (read_u64("/sys/fs/cgroup/memory.max", &limit)) {  // cgroup v2
    if (!read_u64("/sys/fs/cgroup/memory.current", &current)) current = 0;
    if (limit > current && limit - current < budget) budget = limit - current;
  } else if (read_u64("/sys/fs/cgroup/memory/memory.limit_in_bytes", &limit) &&
             limit < (1ull << 60)) {  // cgroup v1 ("no limit" is a huge number)
    if (!read_u64("/sys/fs/cgroup/memory/memory.usage_in_bytes", &current)) current = 0;
    if (limit > current && limit - current < budget) budget = limit - current;
  }
  return budget == UINT64_MAX ? (1ull << 30) : budget;
}

}  // namespace power
