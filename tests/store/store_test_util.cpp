#include "store_test_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <random>
#include <thread>

#include "base/file.h"
#include "store/manifest.h"
#include "test_util.h"

extern char** environ;

namespace power::store::testing {

std::string make_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

Sha256Digest digest_of(const std::string& bytes) {
  return sha256(bytes.data(), bytes.size());
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(n);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}

void StoreFixture::SetUp() {
  for (const char* v :
       {"http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY",
        "POWER_MIRRORS", "HF_ENDPOINT", "HF_TOKEN", "POWER_MAX_DOWNLOAD_BYTES"}) {
    ::unsetenv(v);
  }
  home_ = power::testing::make_temp_dir("power-store-test");
  auto l = StoreLayout::open(home_);
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  layout_ = *l;
  config_.connect_timeout_s = 5;
  config_.low_speed_time_s = 5;
  config_.attempts_per_source = 1;
  config_.retry_delay_ms = 10;
}

void StoreFixture::TearDown() {
  power::testing::remove_tree(home_);
}

PullOptions StoreFixture::options() const {
  PullOptions o;
  o.config = config_;
  auto* events = const_cast<std::vector<PullProgress>*>(&events_);
  o.progress = [events](const PullProgress& e) { events->push_back(e); };
  return o;
}

Result<Manifest> StoreFixture::pull_url(const std::string& source, std::optional<Sha256Digest> pin,
                                        std::optional<uint64_t> size, const std::string& name) {
  PullRequest r;
  r.parts.push_back(PartRequest{source, pin, size, ""});
  r.name = name;
  return pull(layout_, r, options());
}

void StoreFixture::expect_nothing_committed(const std::string& name) {
  EXPECT_TRUE(list_dir(layout_.blobs_dir()).empty())
      << "blobs: " << ::testing::PrintToString(list_dir(layout_.blobs_dir()));
  EXPECT_TRUE(list_dir(layout_.staging_dir()).empty())
      << "staging: " << ::testing::PrintToString(list_dir(layout_.staging_dir()));
  EXPECT_FALSE(read_manifest(layout_, name).ok());
}

pid_t spawn_process(const std::vector<std::string>& args,
                    const std::map<std::string, std::string>& env, const std::string& stdout_path,
                    const std::string& stderr_path) {
  std::map<std::string, std::string> merged;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq != std::string::npos) merged[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : env) merged[k] = v;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : merged) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, argv;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args_copy = args;
  for (auto& s : args_copy) argv.push_back(s.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  return rc == 0 ? pid : -1;
}

int wait_process(pid_t pid, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    int status = 0;
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
      return -1;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

ProcessResult run_process(const std::vector<std::string>& args,
                          const std::map<std::string, std::string>& env, int timeout_ms) {
  std::string dir = power::testing::make_temp_dir("power-proc");
  ProcessResult r;
  pid_t pid = spawn_process(args, env, dir + "/out", dir + "/err");
  if (pid < 0) {
    power::testing::remove_tree(dir);
    return r;
  }
  r.exit_code = wait_process(pid, timeout_ms);
  auto out = read_file_text(dir + "/out");
  auto err = read_file_text(dir + "/err");
  if (out.ok()) r.out = *out;
  if (err.ok()) r.err = *err;
  power::testing::remove_tree(dir);
  return r;
}

}  // namespace power::store::testing
