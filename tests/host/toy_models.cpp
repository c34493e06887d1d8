#include "toy_models.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "format/gguf.h"

namespace power::testing {

std::string write_toy_gguf(const std::string& dir, const std::string& arch,
                           const std::vector<ToyTensor>& tensors,
                           const std::vector<std::pair<std::string, int64_t>>& keys) {
  GgufWriter w;
  w.set("general.architecture", GgufValue::str(arch));
  for (const auto& [k, v] : keys) w.set(k, GgufValue::i64(v));
  for (const ToyTensor& t : tensors) {
    std::vector<uint64_t> ne(t.shape.begin(), t.shape.end());
    std::vector<uint8_t> bytes(t.values.size() * sizeof(float));
    std::memcpy(bytes.data(), t.values.data(), bytes.size());
    Status st = w.add_tensor(t.name, GgmlType::F32, ne, std::move(bytes));
    EXPECT_TRUE(st.ok()) << st.to_string();
  }
  const std::string path = dir + "/" + arch + ".gguf";
  Status st = w.write(path);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return path;
}

std::vector<float> toy_values(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

sdk::TokenizerSpec toy_vocabulary() {
  sdk::TokenizerSpec s;
  s.model = "llama";
  s.tokens = {"<unk>", "<s>", "</s>"};
  for (char c = 'a'; s.tokens.size() < 16; ++c)
    s.tokens.push_back("\xE2\x96\x81" + std::string(1, c));
  s.scores.assign(s.tokens.size(), 0.0f);
  s.token_types.assign(s.tokens.size(), 1);
  s.token_types[0] = 2;
  s.token_types[1] = s.token_types[2] = 3;
  s.unk = 0;
  s.bos = 1;
  s.eos = 2;
  return s;
}

}  // namespace power::testing
