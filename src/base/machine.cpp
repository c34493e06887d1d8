#include "base/machine.h"

#include <sched.h>
#include <sys/utsname.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "base/cpu.h"
#include "base/huge_pages.h"

namespace power {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// The first line of a small sysfs/procfs file, trimmed; nullopt when unreadable.
std::optional<std::string> read_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
  return line;
}

json line_or_null(const std::string& path) {
  auto v = read_line(path);
  return v ? json(*v) : json(nullptr);
}

json int_or_null(const std::string& path) {
  auto v = read_line(path);
  if (!v) return nullptr;
  char* end = nullptr;
  const long long x = std::strtoll(v->c_str(), &end, 10);
  if (end == v->c_str()) return json(*v);  // e.g. "max"
  // Beyond 2^53 (cgroup v1's "no limit" is 2^63 rounded to pages): the text, so that the
  // record stays canonical JSON (receipt/canonical_json.h).
  if (x > (1LL << 53) || x < -(1LL << 53)) return json(*v);
  return x;
}

// "key : value" pairs of /proc/cpuinfo's first processor, and the set of (package, core)
// pairs over all processors.
struct CpuInfo {
  std::map<std::string, std::string> first;
  std::set<std::pair<std::string, std::string>> cores;
  int processors = 0;
};

CpuInfo read_cpuinfo() {
  CpuInfo ci;
  std::ifstream in("/proc/cpuinfo");
  std::string line, package, core;
  auto flush = [&] {
    if (!package.empty() || !core.empty()) ci.cores.insert({package, core});
    package.clear();
    core.clear();
  };
  while (std::getline(in, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) {
      flush();
      continue;
    }
    std::string key = line.substr(0, colon);
    while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
    std::string value = line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.erase(0, 1);
    if (key == "processor") ++ci.processors;
    if (key == "physical id") package = value;
    if (key == "core id") core = value;
    if (ci.processors == 1 && !ci.first.count(key)) ci.first[key] = value;
  }
  flush();
  return ci;
}

json cpuinfo_int(const CpuInfo& ci, const char* key) {
  auto it = ci.first.find(key);
  if (it == ci.first.end()) return nullptr;
  try {
    return std::stoll(it->second, nullptr, 0);
  } catch (const std::exception&) {
    return it->second;
  }
}

std::string hypervisor_vendor() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  __cpuid(1, a, b, c, d);
  if (!(c & (1u << 31))) return "";  // CPUID.1:ECX[31]: running under a hypervisor
  __cpuid(0x40000000, a, b, c, d);
  char v[13] = {};
  std::memcpy(v, &b, 4);
  std::memcpy(v + 4, &c, 4);
  std::memcpy(v + 8, &d, 4);
  std::string s(v);
  return s.empty() ? "unknown" : s;
#else
  return "";
#endif
}

json caches() {
  json out = json::array();
  for (int i = 0; i < 16; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i);
    if (!fs::exists(dir)) break;
    out.push_back({{"level", int_or_null(dir + "/level")},
                   {"type", line_or_null(dir + "/type")},
                   {"size", line_or_null(dir + "/size")},
                   {"shared_cpu_list", line_or_null(dir + "/shared_cpu_list")}});
  }
  return out;
}

int numa_nodes() {
  int n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/sys/devices/system/node", ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("node", 0) == 0 && name.size() > 4 && std::isdigit(name[4])) ++n;
  }
  return n;
}

json meminfo() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  long long kb = 0;
  std::string unit;
  json out = {{"total_bytes", nullptr}, {"available_bytes", nullptr}};
  while (in >> key >> kb) {
    std::getline(in, unit);
    if (key == "MemTotal:") out["total_bytes"] = kb * 1024;
    if (key == "MemAvailable:") out["available_bytes"] = kb * 1024;
  }
  return out;
}

json cgroup() {
  if (fs::exists("/sys/fs/cgroup/cgroup.controllers")) {
    return {{"version", 2},
            {"memory_max", int_or_null("/sys/fs/cgroup/memory.max")},
            {"cpu_max", line_or_null("/sys/fs/cgroup/cpu.max")}};
  }
  return {{"version", 1},
          {"memory_max", int_or_null("/sys/fs/cgroup/memory/memory.limit_in_bytes")},
          {"cpu_max", line_or_null("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")}};
}

std::string cpu_list(const cpu_set_t& set) {
  std::string out;
  int start = -1, prev = -2;
  auto emit = [&] {
    if (start < 0) return;
    if (!out.empty()) out += ",";
    out += std::to_string(start);
    if (prev > start) out += "-" + std::to_string(prev);
  };
  for (int i = 0; i < CPU_SETSIZE; ++i) {
    if (!CPU_ISSET(i, &set)) continue;
    if (i != prev + 1) {
      emit();
      start = i;
    }
    prev = i;
  }
  emit();
  return out;
}

std::string os_pretty_name() {
  std::ifstream in("/etc/os-release");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("PRETTY_NAME=", 0) == 0) {
      std::string v = line.substr(12);
      if (v.size() >= 2 && v.front() == '"') v = v.substr(1, v.size() - 2);
      return v;
    }
  }
  return "";
}

}  // namespace

json sys_int_or_null(const std::string& path) {
  return int_or_null(path);
}

json machine_facts() {
  static const json facts = [] {
    const CpuFeatures& f = cpu_features();
    const CpuInfo ci = read_cpuinfo();
    json h;
    h["cpu_model"] = f.model;
    h["vendor"] = ci.first.count("vendor_id") ? json(ci.first.at("vendor_id")) : json(nullptr);
    h["family"] = cpuinfo_int(ci, "cpu family");
    h["model"] = cpuinfo_int(ci, "model");
    h["stepping"] = cpuinfo_int(ci, "stepping");
    h["microcode"] = ci.first.count("microcode") ? json(ci.first.at("microcode")) : json(nullptr);
    h["isa_flags"] = f.flags_string();
    h["logical_cpus"] = f.logical_cores;
    h["cores"] = ci.cores.empty() ? json(nullptr) : json(ci.cores.size());
    h["smt_active"] = int_or_null("/sys/devices/system/cpu/smt/active");
    h["caches"] = caches();
    h["numa_nodes"] = numa_nodes();
    h["memory_total_bytes"] = meminfo()["total_bytes"];
    h["cgroup"] = cgroup();
    h["transparent_huge_pages"] = transparent_huge_page_mode();
    h["governor"] = line_or_null("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor");
    h["max_frequency_khz"] = int_or_null("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq");
    const std::string hv = hypervisor_vendor();
    h["hypervisor"] = hv.empty() ? json(nullptr) : json(hv);
    struct utsname u {};
    if (uname(&u) == 0) h["kernel"] = std::string(u.sysname) + " " + u.release + " " + u.machine;
    h["os"] = os_pretty_name();
    return h;
  }();
  return facts;
}

json machine_state() {
  json s;
  s["memory_available_bytes"] = meminfo()["available_bytes"];
  cpu_set_t set;
  CPU_ZERO(&set);
  s["affinity"] =
      sched_getaffinity(0, sizeof(set), &set) == 0 ? json(cpu_list(set)) : json(nullptr);
  s["frequency_khz_current"] = int_or_null("/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq");
  const CpuInfo ci = read_cpuinfo();
  s["cpu_mhz"] =
      ci.first.count("cpu MHz") ? json(std::atof(ci.first.at("cpu MHz").c_str())) : json(nullptr);
  return s;
}

}  // namespace power
