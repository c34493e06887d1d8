#include "secure_test_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/secure_memory_testing.h"
#include "base/sha256.h"

namespace power::testing {

secure::ModelKey write_hex_key_file(const std::string& path) {
  auto key = secure::ModelKey::generate();
  EXPECT_TRUE(key.ok());
  const std::string text = to_hex(key->bytes().data(), key->bytes().size()) + "\n";
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  EXPECT_GE(fd, 0) << path;
  EXPECT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  ::close(fd);
  return std::move(*key);
}

std::string vm_flags_of(const void* address) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  const auto a = reinterpret_cast<uintptr_t>(address);
  while (std::getline(smaps, line)) {
    uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%" SCNxPTR "-%" SCNxPTR " ", &lo, &hi) == 2 &&
        line.find(':') > line.find(' ')) {
      inside = a >= lo && a < hi;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line.substr(8);
  }
  return "";
}

bool has_vm_flag(const std::string& flags, const std::string& code) {
  std::istringstream in(flags);
  std::string f;
  while (in >> f) {
    if (f == code) return true;
  }
  return false;
}

std::vector<std::string> open_file_targets() {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    auto target = std::filesystem::read_symlink(e.path(), ec);
    if (!ec) out.push_back(target.string());
  }
  return out;
}

std::vector<std::string> mapped_paths() {
  std::vector<std::string> out;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    // address perms offset dev inode [path]
    std::istringstream in(line);
    std::string addr, perms, offset, dev, inode, path;
    in >> addr >> perms >> offset >> dev >> inode;
    std::getline(in, path);
    const size_t start = path.find_first_not_of(' ');
    if (start != std::string::npos) out.push_back(path.substr(start));
  }
  return out;
}

std::set<std::string> files_under(const std::string& dir) {
  std::set<std::string> out;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(
           dir, std::filesystem::directory_options::skip_permission_denied, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code ec2;
    if (it->is_regular_file(ec2)) out.insert(it->path().string());
  }
  return out;
}

namespace {
WipeWatcher* g_watcher = nullptr;
SecureMemoryObserver g_observer;
}  // namespace

WipeWatcher::WipeWatcher() {
  g_watcher = this;
  g_observer.on_allocate = &WipeWatcher::on_allocate;
  g_observer.on_wipe = &WipeWatcher::on_wipe;
  set_secure_memory_observer(&g_observer);
}

WipeWatcher::~WipeWatcher() {
  set_secure_memory_observer(nullptr);
  g_watcher = nullptr;
}

void WipeWatcher::on_allocate(std::string_view purpose, const uint8_t*, size_t) {
  if (g_watcher == nullptr) return;
  std::lock_guard<std::mutex> lock(g_watcher->mu_);
  g_watcher->allocations_.emplace_back(purpose);
}

void WipeWatcher::on_wipe(std::string_view purpose, const uint8_t* data, size_t size_bytes) {
  if (g_watcher == nullptr) return;
  bool zero = true;
  for (size_t i = 0; i < size_bytes; ++i) zero &= data[i] == 0;
  std::lock_guard<std::mutex> lock(g_watcher->mu_);
  g_watcher->wipes_.push_back({std::string(purpose), size_bytes, zero});
}

std::vector<WipeWatcher::Wipe> WipeWatcher::wipes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return wipes_;
}

int WipeWatcher::allocations(const std::string& purpose) const {
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  for (const auto& a : allocations_) n += a == purpose;
  return n;
}

int WipeWatcher::wipes_of(const std::string& purpose) const {
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  for (const auto& w : wipes_) n += w.purpose == purpose;
  return n;
}

bool WipeWatcher::all_wipes_zero() const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& w : wipes_) {
    if (!w.all_zero) return false;
  }
  return true;
}

}  // namespace power::testing
