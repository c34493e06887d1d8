// Small model packages written on the public SDK for the host tests, the GGUF files they read,
// and a vocabulary they bring themselves (sdk::Architecture::tokenizer), so the tests need no
// shared data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "power/sdk.h"

namespace power::testing {

// A GGUF file with general.architecture = `arch`, the given F32 tensors (name, shape ne0
// first, values) and integer keys; returns its path under `dir`.
struct ToyTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};
std::string write_toy_gguf(const std::string& dir, const std::string& arch,
                           const std::vector<ToyTensor>& tensors,
                           const std::vector<std::pair<std::string, int64_t>>& keys = {});

// Seeded uniform values in [-scale, scale].
std::vector<float> toy_values(size_t n, uint32_t seed, float scale);

// A 16-token SentencePiece vocabulary (<unk>, <s>, </s>, then single letters).
sdk::TokenizerSpec toy_vocabulary();

}  // namespace power::testing
