#include "test_util.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

namespace power::testing {

std::string shared_dir() {
  if (const char* env = std::getenv("POWER_SHARED_DIR"); env != nullptr && *env != '\0') {
    return env;
  }
  return std::string(POWER_SOURCE_DIR) + "/../shared";
}

bool shared_available() {
  return std::filesystem::exists(shared_dir() + "/fixtures/README.md");
}

bool running_in_ci() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::strcmp(ci, "true") == 0;
}

std::string make_temp_dir(const std::string& prefix) {
  std::random_device rd;
  auto base = std::filesystem::temp_directory_path();
  for (int i = 0; i < 100; ++i) {
    auto p = base / (prefix + "-" + std::to_string(rd()));
    std::error_code ec;
    if (std::filesystem::create_directory(p, ec)) return p.string();
  }
  ADD_FAILURE() << "cannot create a temporary directory";
  return base.string();
}

void remove_tree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    ADD_FAILURE() << "cannot read " << path;
    return {};
  }
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)),
                              std::istreambuf_iterator<char>());
}

template <typename T>
static std::vector<T> read_as(const std::string& path) {
  auto bytes = read_bytes(path);
  if (bytes.size() % sizeof(T) != 0) {
    ADD_FAILURE() << path << ": size " << bytes.size() << " is not a multiple of " << sizeof(T);
    return {};
  }
  std::vector<T> out(bytes.size() / sizeof(T));
  if (!bytes.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

std::vector<float> read_f32(const std::string& path) {
  return read_as<float>(path);
}
std::vector<double> read_f64(const std::string& path) {
  return read_as<double>(path);
}

std::vector<int32_t> read_ids(const std::string& path) {
  std::ifstream f(path);
  std::vector<int32_t> ids;
  int32_t x;
  while (f >> x) ids.push_back(x);
  return ids;
}

void expect_identical_completions(const Completion& got, const Completion& want) {
  EXPECT_EQ(got.tokens, want.tokens);
  ASSERT_EQ(got.logprobs.size(), want.logprobs.size());
  for (size_t t = 0; t < want.logprobs.size(); ++t) {
    const TokenLogprobs &a = got.logprobs[t], &b = want.logprobs[t];
    EXPECT_EQ(a.chosen.token, b.chosen.token) << "token " << t;
    EXPECT_EQ(a.chosen.logprob, b.chosen.logprob) << "token " << t;
    ASSERT_EQ(a.top.size(), b.top.size()) << "token " << t;
    for (size_t k = 0; k < a.top.size(); ++k) {
      EXPECT_EQ(a.top[k].token, b.top[k].token) << "token " << t << ", alternative " << k;
      EXPECT_EQ(a.top[k].logprob, b.top[k].logprob) << "token " << t << ", alternative " << k;
    }
  }
}

ScopedEnv::ScopedEnv(const char* name) : name_(name) {
  const char* v = std::getenv(name);
  had_ = v != nullptr;
  if (had_) saved_ = v;
}

ScopedEnv::~ScopedEnv() {
  if (had_) {
    ::setenv(name_.c_str(), saved_.c_str(), 1);
  } else {
    ::unsetenv(name_.c_str());
  }
}

void ScopedEnv::set(const char* value) const {
  ::setenv(name_.c_str(), value, 1);
}

void ScopedEnv::unset() const {
  ::unsetenv(name_.c_str());
}

}  // namespace power::testing
