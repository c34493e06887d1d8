// Black-box tests of `power inspect`, `power tensor` and `power quantize` on peer-made files.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "base/file.h"
#include "format/gguf.h"
#include "run_util.h"
#include "tensor/quant.h"
#include "test_util.h"

namespace power {
namespace {

using nlohmann::json;
using testing::run_power;

const char* const kAllTypes[] = {"F16",  "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1",   "Q8_0",
                                 "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS"};

std::string stories_f32() {
  return testing::shared_dir() + "/models/stories260K/stories260K-F32.gguf";
}
std::string quant_dir(const std::string& type) {
  return testing::shared_dir() + "/fixtures/quant/" + type;
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::make_temp_dir("power-cli"); }
  void TearDown() override { testing::remove_tree(dir_); }
  std::string dir_;
};

TEST_F(CliTest, InspectStories260K) {
  POWER_REQUIRE_SHARED();
  auto r = run_power({"inspect", stories_f32()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // sha256 and metadata as listed in ../shared/models/README.md
  EXPECT_NE(r.out.find("047bf46455a544931cff6fef14d7910154c56afbc23ab1c5e56a72e69912c04b"),
            std::string::npos);
  EXPECT_NE(r.out.find("llama.context_length"), std::string::npos);
  EXPECT_NE(r.out.find("tensors:   48"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("token_embd.weight"), std::string::npos);
}

TEST_F(CliTest, InspectJson) {
  POWER_REQUIRE_SHARED();
  auto r = run_power({"inspect", stories_f32(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["sha256"], "047bf46455a544931cff6fef14d7910154c56afbc23ab1c5e56a72e69912c04b");
  EXPECT_EQ(j["size_bytes"], 1185376);
  EXPECT_EQ(j["tensors"].size(), 48u);
  EXPECT_EQ(j["metadata"]["general.architecture"], "llama");
  EXPECT_EQ(j["metadata"]["llama.context_length"], 128);
  EXPECT_EQ(j["metadata"]["llama.embedding_length"], 64);
  EXPECT_EQ(j["metadata"]["llama.feed_forward_length"], 172);
  EXPECT_EQ(j["metadata"]["llama.attention.head_count"], 8);
  EXPECT_EQ(j["metadata"]["llama.attention.head_count_kv"], 4);
  EXPECT_EQ(j["metadata"]["llama.block_count"], 5);
  EXPECT_EQ(j["metadata"]["tokenizer.ggml.model"], "llama");
  EXPECT_EQ(j["metadata"]["tokenizer.ggml.tokens"].size(), 512u);
  for (const auto& t : j["tensors"]) {
    EXPECT_EQ(t["type"], "F32");
    EXPECT_EQ(t["offset"].get<uint64_t>() % 32, 0u) << t["name"];
  }

  // The quant fixtures: three tensors t0 [256 x 8], t1 [512 x 3], t2 [1024 x 5] of the type.
  auto q = run_power({"inspect", quant_dir("Q6_K") + "/Q6_K.gguf", "--json"});
  ASSERT_EQ(q.exit_code, 0) << q.err;
  json qj = json::parse(q.out);
  ASSERT_EQ(qj["tensors"].size(), 3u);
  EXPECT_EQ(qj["tensors"][0]["shape"], json::array({256, 8}));
  EXPECT_EQ(qj["tensors"][1]["shape"], json::array({512, 3}));
  EXPECT_EQ(qj["tensors"][2]["shape"], json::array({1024, 5}));
  EXPECT_EQ(qj["tensors"][2]["bytes"], 1024 / 256 * 210 * 5);
  EXPECT_EQ(qj["metadata"]["fixture.ggml_type"], "Q6_K");
}

TEST_F(CliTest, InspectErrorsAreClear) {
  POWER_REQUIRE_SHARED();
  auto missing = run_power({"inspect", dir_ + "/missing.gguf"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("not_found"), std::string::npos) << missing.err;

  auto bytes = testing::read_bytes(stories_f32());
  ASSERT_GT(bytes.size(), 5000u);
  std::string truncated = dir_ + "/truncated.gguf";
  ASSERT_TRUE(write_file_atomic(truncated, std::span<const uint8_t>(bytes.data(), 3000)).ok());
  auto t = run_power({"inspect", truncated});
  EXPECT_EQ(t.exit_code, 1);
  EXPECT_NE(t.err.find("offset="), std::string::npos) << t.err;

  std::string garbage = dir_ + "/garbage.gguf";
  ASSERT_TRUE(write_file_atomic(garbage, "this is not a gguf file at all").ok());
  auto g = run_power({"inspect", garbage});
  EXPECT_EQ(g.exit_code, 1);
  EXPECT_NE(g.err.find("magic"), std::string::npos) << g.err;
}

// `power tensor --dequant` gives the peer's dequantized values bit for bit, for every type.
TEST_F(CliTest, TensorDequantMatchesPeer) {
  POWER_REQUIRE_SHARED();
  for (const char* type : kAllTypes) {
    for (const char* name : {"t0", "t1", "t2"}) {
      std::string out = dir_ + "/" + type + name + ".f32";
      auto r = run_power(
          {"tensor", quant_dir(type) + "/" + type + ".gguf", name, "--dequant", "--out", out});
      ASSERT_EQ(r.exit_code, 0) << type << " " << name << ": " << r.err;
      EXPECT_EQ(testing::read_bytes(out),
                testing::read_bytes(quant_dir(type) + "/" + name + ".f32"))
          << type << " " << name;
      std::string raw = dir_ + "/" + type + name + ".bin";
      r = run_power({"tensor", quant_dir(type) + "/" + type + ".gguf", name, "--out", raw});
      ASSERT_EQ(r.exit_code, 0) << r.err;
      EXPECT_EQ(testing::read_bytes(raw),
                testing::read_bytes(quant_dir(type) + "/" + name + ".raw.bin"));
    }
  }
  auto r =
      run_power({"tensor", stories_f32(), "no.such.tensor", "--dequant", "--out", dir_ + "/x.f32"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("no.such.tensor"), std::string::npos);
}

double rmse(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return std::sqrt(s / static_cast<double>(a.size()));
}

// `power quantize` on an F32 file made of the fixtures' source tensors: the result reads back,
// keeps metadata and non-matrix tensors, records general.file_type, and its values are as
// close to the source as the peer's own quantization of the same source (the fixtures'
// tN.f32 are llama.cpp's quantize-then-dequantize of tN.src.f32): RMSE within 2% of the
// peer's, and in fact the very bytes llama.cpp wrote (tN.raw.bin). The format's worst-case
// error per element is checked in tensor_test per type.
TEST_F(CliTest, QuantizeReadsBackWithinPeerError) {
  POWER_REQUIRE_SHARED();
  const std::map<std::string, uint32_t> file_types = {
      {"F16", 1},   {"BF16", 32}, {"Q4_0", 2},    {"Q4_1", 3},   {"Q5_0", 8},
      {"Q5_1", 9},  {"Q8_0", 7},  {"Q2_K", 10},   {"Q3_K", 11},  {"Q4_K", 14},
      {"Q5_K", 16}, {"Q6_K", 18}, {"IQ4_NL", 25}, {"IQ4_XS", 30}};
  for (const char* type : kAllTypes) {
    SCOPED_TRACE(type);
    GgufWriter w;
    w.set("general.architecture", GgufValue::str("fixture"));
    w.set("fixture.note", GgufValue::string_array({"kept", "as is"}));
    std::vector<std::vector<float>> src(3);
    const uint64_t shapes[3][2] = {{256, 8}, {512, 3}, {1024, 5}};
    for (int i = 0; i < 3; ++i) {
      src[i] = testing::read_f32(quant_dir(type) + "/t" + std::to_string(i) + ".src.f32");
      ASSERT_EQ(src[i].size(), shapes[i][0] * shapes[i][1]);
      std::vector<uint8_t> bytes(src[i].size() * 4);
      std::memcpy(bytes.data(), src[i].data(), bytes.size());
      ASSERT_TRUE(w.add_tensor("blk.0.t" + std::to_string(i) + ".weight", GgmlType::F32,
                               {shapes[i][0], shapes[i][1]}, std::move(bytes))
                      .ok());
    }
    std::vector<uint8_t> norm(256 * 4);
    for (size_t i = 0; i < norm.size(); ++i) norm[i] = static_cast<uint8_t>(i * 7);
    ASSERT_TRUE(w.add_tensor("blk.0.attn_norm.weight", GgmlType::F32, {256}, norm).ok());
    std::string in = dir_ + "/src.gguf", out = dir_ + "/out-" + type + ".gguf";
    ASSERT_TRUE(w.write(in).ok());

    auto r = run_power({"quantize", in, out, type});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto f = GgufFile::open(out);
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    EXPECT_EQ(*(*f)->get_string("general.architecture"), "fixture");
    EXPECT_EQ(*(*f)->get_string_array("fixture.note"), (std::vector<std::string>{"kept", "as is"}));
    EXPECT_EQ(*(*f)->get_u64("general.file_type"), file_types.at(type));
    const GgufTensor* n = (*f)->find_tensor("blk.0.attn_norm.weight");
    ASSERT_NE(n, nullptr);
    EXPECT_EQ(n->type, GgmlType::F32);
    EXPECT_EQ(std::vector<uint8_t>(n->data, n->data + n->n_bytes), norm);
    for (int i = 0; i < 3; ++i) {
      const GgufTensor* t = (*f)->find_tensor("blk.0.t" + std::to_string(i) + ".weight");
      ASSERT_NE(t, nullptr);
      EXPECT_EQ(ggml_type_name(t->type), type);
      std::vector<float> ours(src[i].size());
      ASSERT_TRUE(dequantize_row(t->type, t->data, ours.data(), ours.size()).ok());
      auto peer = testing::read_f32(quant_dir(type) + "/t" + std::to_string(i) + ".f32");
      double ours_rmse = rmse(ours, src[i]), peer_rmse = rmse(peer, src[i]);
      auto raw = testing::read_bytes(quant_dir(type) + "/t" + std::to_string(i) + ".raw.bin");
      bool identical = raw == std::vector<uint8_t>(t->data, t->data + t->n_bytes);
      std::printf("  %-6s t%d rmse ours %.6g peer %.6g%s\n", type, i, ours_rmse, peer_rmse,
                  identical ? " (bytes identical to the peer's)" : "");
      EXPECT_LE(ours_rmse, peer_rmse * 1.02 + 1e-12) << "t" << i;
      // Power's reference quantizers reproduce llama.cpp's (no importance matrix) exactly.
      EXPECT_TRUE(identical) << "t" << i << ": bytes differ from llama-quantize's";
    }
  }
}

TEST_F(CliTest, QuantizeRejectsBadInput) {
  POWER_REQUIRE_SHARED();
  auto r = run_power({"quantize", stories_f32(), dir_ + "/o.gguf", "Q9_9"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("Q9_9"), std::string::npos);
  r = run_power({"quantize", dir_ + "/missing.gguf", dir_ + "/o.gguf", "Q8_0"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_FALSE(std::ifstream(dir_ + "/o.gguf").good());
}

// stories260K's rows of 64 and 172 cannot hold K-quant blocks: Q6_K falls back to Q8_0 where
// 32 divides the row and to F16 otherwise (as llama-quantize did for the shared Q6_K file);
// --pure leaves them as they were.
TEST_F(CliTest, QuantizeFallbackAndPure) {
  POWER_REQUIRE_SHARED();
  std::string out = dir_ + "/q6.gguf", pure = dir_ + "/q6-pure.gguf";
  auto r = run_power({"quantize", stories_f32(), out, "Q6_K"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto f = GgufFile::open(out);
  ASSERT_TRUE(f.ok());
  const GgufTensor* wq = (*f)->find_tensor("blk.0.attn_q.weight");      // rows of 64
  const GgufTensor* down = (*f)->find_tensor("blk.0.ffn_down.weight");  // rows of 172
  const GgufTensor* norm = (*f)->find_tensor("blk.0.attn_norm.weight");
  ASSERT_TRUE(wq && down && norm);
  EXPECT_EQ(wq->type, GgmlType::Q8_0);
  EXPECT_EQ(down->type, GgmlType::F16);
  EXPECT_EQ(norm->type, GgmlType::F32);

  // The peer's own Q6_K file of the same source: same type per tensor, same bytes.
  auto peer = GgufFile::open(testing::shared_dir() +
                             "/models/stories260K/stories260K-ftypeQ6_K_fallback-Q8_0-F16.gguf");
  ASSERT_TRUE(peer.ok()) << peer.status().to_string();
  ASSERT_EQ((*peer)->tensors().size(), (*f)->tensors().size());
  for (const GgufTensor& pt : (*peer)->tensors()) {
    const GgufTensor* ot = (*f)->find_tensor(pt.name);
    ASSERT_NE(ot, nullptr) << pt.name;
    EXPECT_EQ(ot->type, pt.type) << pt.name;
    EXPECT_EQ(ot->ne, pt.ne) << pt.name;
    ASSERT_EQ(ot->n_bytes, pt.n_bytes) << pt.name;
    EXPECT_EQ(std::memcmp(ot->data, pt.data, pt.n_bytes), 0) << pt.name << " bytes differ";
  }
  EXPECT_EQ(*(*f)->get_u64("general.file_type"), *(*peer)->get_u64("general.file_type"));

  r = run_power({"quantize", stories_f32(), pure, "Q6_K", "--pure"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto p = GgufFile::open(pure);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ((*p)->find_tensor("blk.0.attn_q.weight")->type, GgmlType::F32);
}

}  // namespace
}  // namespace power
