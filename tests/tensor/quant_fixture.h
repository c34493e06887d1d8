// The peer fixtures of ../shared/fixtures/quant (see its README, section 1). Shapes, file
// names and the activation type are read from each type's meta.json, so the tests also run
// unchanged on a fixture set with other seeds and shapes.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "format/ggml_types.h"
#include "test_util.h"

namespace power::testing {

// The 14 types of the fixture set (directory names = ggml type names).
inline const std::vector<std::string>& fixture_type_names() {
  static const std::vector<std::string> names = {"F16",  "BF16", "Q4_0",   "Q4_1",  "Q5_0",
                                                 "Q5_1", "Q8_0", "Q2_K",   "Q3_K",  "Q4_K",
                                                 "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS"};
  return names;
}

struct FixtureTensor {
  std::string name;
  int64_t ne0 = 0;                                   // row length
  int64_t ne1 = 0;                                   // rows
  std::string src, dequant, raw, dot_f64, dot_peer;  // file names
};

struct FixtureMeta {
  std::string dir;
  std::string vec_dot_type;  // the peer's name, e.g. "q8_K"
  std::string x_file, x_quantized_file;
  int64_t x_len = 0;
  std::vector<FixtureTensor> tensors;

  std::string path(const std::string& file) const { return dir + "/" + file; }
};

// Parses <shared>/fixtures/quant/<type>/meta.json; adds a test failure and returns false if it
// is missing or malformed.
inline bool load_fixture_meta(const std::string& type, FixtureMeta* out) {
  out->dir = shared_dir() + "/fixtures/quant/" + type;
  std::ifstream f(out->dir + "/meta.json");
  if (!f) {
    ADD_FAILURE() << "cannot read " << out->dir << "/meta.json";
    return false;
  }
  try {
    const nlohmann::json j = nlohmann::json::parse(f);
    out->vec_dot_type = j.at("vec_dot_type").get<std::string>();
    out->x_file = j.at("x_file").get<std::string>();
    out->x_quantized_file = j.at("x_quantized_file").get<std::string>();
    out->x_len = j.at("x_len").get<int64_t>();
    out->tensors.clear();
    for (const auto& t : j.at("tensors")) {
      FixtureTensor ft;
      ft.name = t.at("name").get<std::string>();
      ft.ne0 = t.at("ne").at(0).get<int64_t>();
      ft.ne1 = t.at("ne").at(1).get<int64_t>();
      const auto& files = t.at("files");
      ft.src = files.at("src").get<std::string>();
      ft.dequant = files.at("dequant").get<std::string>();
      ft.raw = files.at("raw_blocks").get<std::string>();
      ft.dot_f64 = files.at("dot_f64").get<std::string>();
      ft.dot_peer = files.at("dot_peer").get<std::string>();
      out->tensors.push_back(ft);
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << out->dir << "/meta.json: " << e.what();
    return false;
  }
  if (out->tensors.empty()) {
    ADD_FAILURE() << out->dir << "/meta.json lists no tensors";
    return false;
  }
  return true;
}

inline uint64_t row_bytes_of(GgmlType type, int64_t n) {
  uint64_t b = 0;
  if (!ggml_row_bytes(type, static_cast<uint64_t>(n), &b)) return 0;
  return b;
}

}  // namespace power::testing
