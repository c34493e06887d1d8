// Reading the chat tests' data files (tests/chat/*.json, tests/chat/templates/*.jinja).
#pragma once

#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace power::chat::testing {

inline std::string chat_test_path(const std::string& name) {
  return std::string(POWER_CHAT_TEST_DIR) + "/" + name;
}

inline std::string read_text(const std::string& name) {
  std::ifstream in(chat_test_path(name), std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << chat_test_path(name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline nlohmann::ordered_json read_json(const std::string& name) {
  return nlohmann::ordered_json::parse(read_text(name));
}

// gtest parameter names allow only [A-Za-z0-9_].
inline std::string test_name(std::string s) {
  for (char& c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (!ok) c = '_';
  }
  return s;
}

}  // namespace power::chat::testing
