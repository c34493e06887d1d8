#include "validate/hardware.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "base/cpu.h"
#include "base/machine.h"
#include "base/sha256.h"
#include "kernels/cpu/isa.h"

#ifndef POWER_VERSION
#define POWER_VERSION "unknown"
#endif
#ifndef POWER_BUILD_TYPE
#define POWER_BUILD_TYPE "unknown"
#endif
#ifndef POWER_CXX_FLAGS
#define POWER_CXX_FLAGS ""
#endif
#ifndef POWER_GIT_COMMIT
#define POWER_GIT_COMMIT "unknown"
#endif

namespace power::validate {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// The block device a file lives on: its sysfs name, whether it rotates, the filesystem.
json storage(const std::string& path) {
  json out = {{"device", nullptr}, {"rotational", nullptr}, {"filesystem_magic", nullptr}};
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return out;
  struct statfs sf {};
  if (::statfs(path.c_str(), &sf) == 0) {
    char hex[32];
    std::snprintf(hex, sizeof(hex), "0x%llx", static_cast<unsigned long long>(sf.f_type));
    out["filesystem_magic"] = hex;
  }
  const std::string dev =
      "/sys/dev/block/" + std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev));
  std::error_code ec;
  const fs::path real = fs::canonical(dev, ec);
  if (ec) return out;  // overlay, tmpfs, network filesystems: no block device
  out["device"] = real.filename().string();
  for (fs::path p = real; !p.empty() && p != p.root_path(); p = p.parent_path()) {
    if (fs::exists(p / "queue" / "rotational")) {
      out["rotational"] = sys_int_or_null((p / "queue" / "rotational").string());
      break;
    }
  }
  return out;
}

// Reads up to `bytes` of the file after asking the kernel to drop its cached pages (clean
// pages go; others stay, which the figure then includes).
json read_probe(const std::string& path, uint64_t bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return nullptr;
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  std::vector<char> buf(4 << 20);
  uint64_t done = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (done < bytes) {
    const ssize_t n = ::read(fd, buf.data(), std::min<uint64_t>(buf.size(), bytes - done));
    if (n <= 0) break;
    done += static_cast<uint64_t>(n);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::close(fd);
  if (done == 0 || s <= 0) return nullptr;
  return {{"bytes", done}, {"mb_per_s", static_cast<double>(done) / s / 1e6}};
}

// memcpy between two halves of a buffer, best of three passes: bytes read + written / s.
json dram_probe(uint64_t bytes) {
  const size_t half = static_cast<size_t>(bytes / 2);
  std::vector<char> buf(half * 2, 1);
  double best = 0;
  for (int pass = 0; pass < 3; ++pass) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(buf.data() + (pass % 2 ? 0 : half), buf.data() + (pass % 2 ? half : 0), half);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0) best = std::max(best, 2.0 * static_cast<double>(half) / s / 1e9);
  }
  volatile char sink = buf[half / 3];
  (void)sink;
  return {{"bytes", half * 2}, {"copy_gb_per_s", best}};
}

}  // namespace

json build_record() {
  json b;
  b["power_version"] = POWER_VERSION;
  b["commit"] = POWER_GIT_COMMIT;
#if defined(__clang__)
  b["compiler"] = std::string("clang ") + __clang_version__;
#elif defined(__GNUC__)
  b["compiler"] = std::string("gcc ") + __VERSION__;
#else
  b["compiler"] = "unknown";
#endif
  b["build_type"] = POWER_BUILD_TYPE;
  b["cxx_flags"] = POWER_CXX_FLAGS;
  auto digest = sha256_file("/proc/self/exe");
  b["binary_sha256"] = digest.ok() ? json(to_hex(*digest)) : json(nullptr);
  return b;
}

json hardware_record(const HardwareOptions& o) {
  json h = machine_facts();
  const json state = machine_state();
  for (const auto& [k, v] : state.items()) h[k] = v;
  h["kernel_isa"] = std::string(cpu_isa_name(cpu_isa()));
  h["threads"] = o.threads > 0 ? o.threads : cpu_features().logical_cores;
  if (!o.model_path.empty()) {
    h["storage"] = storage(o.model_path);
    if (o.probes) h["storage"]["read_probe"] = read_probe(o.model_path, o.read_probe_bytes);
  }
  h["dram_probe"] = o.probes ? dram_probe(o.dram_probe_bytes) : json(nullptr);
  h["gpu"] = nullptr;  // CPU measurements; a CUDA build fills this when a GPU is used
  h["build"] = build_record();
  return h;
}

}  // namespace power::validate
