// API keys for `power serve --api-key-file`: bearer tokens checked against SHA-256 hashes.
//
// The file holds one key per line: a plain key, or "sha256:<64 hex>" (the hash of one).
// Blank lines and lines starting with '#' are skipped. Only hashes are kept in memory, and a
// presented key is hashed and compared with every stored hash in constant time, so neither
// the comparison's duration nor an early exit tells which bytes matched.
// Thread-safety: immutable after load.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "power/status.h"

namespace power::server {

class ApiKeys {
 public:
  static Result<ApiKeys> load_file(const std::string& path);
  static Result<ApiKeys> parse(std::string_view text);
  bool empty() const { return hashes_.empty(); }
  size_t size() const { return hashes_.size(); }
  // `authorization` is the header value ("Bearer <key>").
  bool check_header(std::string_view authorization) const;
  bool check_key(std::string_view key) const;

 private:
  std::vector<std::array<uint8_t, 32>> hashes_;
};

}  // namespace power::server
