// Writes a few tiny valid GGUF files (each well under 10 KB) as the gguf_fuzz seed corpus.
// Usage: gguf_make_seeds <dir>
#include <cstdio>
#include <string>
#include <vector>

#include "format/gguf.h"

namespace {

using power::GgmlType;
using power::GgufValue;
using power::GgufValueType;
using power::GgufWriter;

std::vector<uint8_t> fill(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + 13 * i);
  return v;
}

int write(const GgufWriter& w, const std::string& path) {
  auto st = w.write(path);
  if (!st.ok()) {
    std::fprintf(stderr, "%s: %s\n", path.c_str(), st.to_string().c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <dir>\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  int rc = 0;
  {  // Metadata only: one key of every type, nested arrays.
    GgufWriter w;
    w.set("general.architecture", GgufValue::str("llama"));
    w.set("u8", GgufValue::u8(7));
    w.set("i8", GgufValue::i8(-7));
    w.set("u16", GgufValue::u16(700));
    w.set("i16", GgufValue::i16(-700));
    w.set("u32", GgufValue::u32(70000));
    w.set("i32", GgufValue::i32(-70000));
    w.set("u64", GgufValue::u64(1ull << 40));
    w.set("i64", GgufValue::i64(-(1ll << 40)));
    w.set("f32", GgufValue::f32(0.5f));
    w.set("f64", GgufValue::f64(0.25));
    w.set("bool", GgufValue::boolean(true));
    w.set("str", GgufValue::str("hello"));
    w.set("tokens", GgufValue::string_array({"<unk>", "<s>", "</s>", "", "a"}));
    w.set("scores",
          GgufValue::array(GgufValueType::kFloat32, {GgufValue::f32(0), GgufValue::f32(-1)}));
    w.set("nested", GgufValue::array(GgufValueType::kArray,
                                     {GgufValue::array(GgufValueType::kUint8, {GgufValue::u8(1)}),
                                      GgufValue::array(GgufValueType::kString, {})}));
    rc |= write(w, dir + "/metadata.gguf");
  }
  {  // Tensors of several types, default alignment.
    GgufWriter w;
    w.set("general.architecture", GgufValue::str("fixture"));
    (void)w.add_tensor("f32", GgmlType::F32, {4, 2}, fill(32, 1));
    (void)w.add_tensor("f16", GgmlType::F16, {8}, fill(16, 2));
    (void)w.add_tensor("q4_0", GgmlType::Q4_0, {32, 2}, fill(36, 3));
    (void)w.add_tensor("q8_0", GgmlType::Q8_0, {32}, fill(34, 4));
    (void)w.add_tensor("empty", GgmlType::F32, {0, 3}, {});
    rc |= write(w, dir + "/tensors.gguf");
  }
  {  // Custom alignment and a K-quant block.
    GgufWriter w(64);
    w.set("general.name", GgufValue::str("aligned"));
    (void)w.add_tensor("q4_k", GgmlType::Q4_K, {256}, fill(144, 5));
    (void)w.add_tensor("i32", GgmlType::I32, {3, 1, 1, 2}, fill(24, 6));
    rc |= write(w, dir + "/aligned64.gguf");
  }
  {  // The smallest file: no metadata, no tensors.
    GgufWriter w;
    rc |= write(w, dir + "/empty.gguf");
  }
  return rc;
}
