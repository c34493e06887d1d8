// The OpenAI /v1/embeddings mapping (server/embed_openai.h) on the fixture model: every input
// form, float and base64 encodings, usage, `dimensions`, and the errors clients see.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "server/embed_openai.h"
#include "test_util.h"

namespace power {
namespace {

using nlohmann::json;

std::string model_path() {
  return testing::shared_dir() + "/fixtures/embeddings/bert-mean-F16.gguf";
}

std::vector<uint8_t> base64_decode(const std::string& s) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
  };
  std::vector<uint8_t> out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : s) {
    if (c == '=') break;
    acc = (acc << 6) | static_cast<uint32_t>(val(c));
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<uint8_t>((acc >> bits) & 0xFF));
    }
  }
  return out;
}

TEST(Base64, KnownVectors) {
  // RFC 4648 section 10 test vectors.
  EXPECT_EQ(base64_encode("", 0), "");
  EXPECT_EQ(base64_encode("f", 1), "Zg==");
  EXPECT_EQ(base64_encode("fo", 2), "Zm8=");
  EXPECT_EQ(base64_encode("foo", 3), "Zm9v");
  EXPECT_EQ(base64_encode("foobar", 6), "Zm9vYmFy");
}

class OpenAiEmbeddings : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::shared_available()) GTEST_SKIP() << "shared data not found";
    EmbedOptions o;
    o.threads = 1;
    auto m = EmbeddingModel::open(model_path(), o);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(*m);
  }
  std::variant<json, OpenAiError> run(const json& body) {
    return run_openai_embeddings(body, *model_, "bert-mean-F16");
  }
  std::unique_ptr<EmbeddingModel> model_;
};

TEST_F(OpenAiEmbeddings, InputFormsAgree) {
  auto one = run({{"model", "bert-mean-F16"}, {"input", "Hello world."}});
  ASSERT_TRUE(std::holds_alternative<json>(one));
  const json& r = std::get<json>(one);
  EXPECT_EQ(r["object"], "list");
  EXPECT_EQ(r["model"], "bert-mean-F16");
  EXPECT_EQ(r["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(r["usage"]["total_tokens"], 5);
  ASSERT_EQ(r["data"].size(), 1u);
  EXPECT_EQ(r["data"][0]["object"], "embedding");
  EXPECT_EQ(r["data"][0]["index"], 0);
  const auto v = r["data"][0]["embedding"].get<std::vector<float>>();
  ASSERT_EQ(v.size(), 384u);
  double ss = 0;
  for (float x : v) ss += double(x) * x;
  EXPECT_NEAR(ss, 1.0, 1e-6);  // normalized
  // The same sentence as token ids, as an array of arrays, and in an array of strings.
  const json ids = json::array({101, 7592, 2088, 1012, 102});
  auto tok = run({{"input", ids}});
  auto toks = run({{"input", json::array({ids, ids})}});
  auto strs = run({{"input", json::array({"Embeddings", "Hello world."})}});
  ASSERT_TRUE(std::holds_alternative<json>(tok) && std::holds_alternative<json>(toks) &&
              std::holds_alternative<json>(strs));
  EXPECT_EQ(std::get<json>(tok)["data"][0]["embedding"].get<std::vector<float>>(), v);
  EXPECT_EQ(std::get<json>(toks)["data"][1]["embedding"].get<std::vector<float>>(), v);
  EXPECT_EQ(std::get<json>(strs)["data"][1]["index"], 1);
  EXPECT_EQ(std::get<json>(strs)["data"][1]["embedding"].get<std::vector<float>>(), v);
  EXPECT_EQ(std::get<json>(strs)["usage"]["prompt_tokens"], 6 + 5);  // README: 6 and 5 tokens
  // base64: the same float32 values, little-endian.
  auto b64 = run({{"input", "Hello world."}, {"encoding_format", "base64"}, {"dimensions", 384}});
  ASSERT_TRUE(std::holds_alternative<json>(b64));
  const auto bytes = base64_decode(std::get<json>(b64)["data"][0]["embedding"].get<std::string>());
  ASSERT_EQ(bytes.size(), 384u * 4);
  std::vector<float> decoded(384);
  std::memcpy(decoded.data(), bytes.data(), bytes.size());
  EXPECT_EQ(decoded, v);
}

TEST_F(OpenAiEmbeddings, ErrorsAre400WithTheParam) {
  struct Case {
    json body;
    std::string param;
    std::string code;
  } cases[] = {
      {json::array(), "", ""},
      {{{"model", "x"}}, "input", ""},
      {{{"input", json::array()}}, "input", ""},
      {{{"input", 42}}, "input", ""},
      {{{"input", json::array({"a", 1})}}, "input", ""},
      {{{"input", json::array({json::array()})}}, "input", ""},
      {{{"input", json::array({1.5})}}, "input", ""},
      {{{"input", json::array({101, 99999999, 102})}}, "input", ""},
      {{{"input", "hi"}, {"encoding_format", "int8"}}, "encoding_format", ""},
      {{{"input", "hi"}, {"dimensions", 128}}, "dimensions", "unsupported_dimensions"},
      {{{"input", std::string(3000, 'a') + std::string(" b", 600)}},
       "input",
       "context_length_exceeded"},
  };
  for (const auto& c : cases) {
    auto r = run(c.body);
    ASSERT_TRUE(std::holds_alternative<OpenAiError>(r)) << c.body.dump().substr(0, 80);
    const OpenAiError& e = std::get<OpenAiError>(r);
    EXPECT_EQ(e.http_status, 400) << c.body.dump().substr(0, 80);
    EXPECT_EQ(e.param, c.param) << e.message;
    EXPECT_EQ(e.code, c.code) << e.message;
    EXPECT_FALSE(e.message.empty());
  }
  EXPECT_EQ(not_an_embedding_model("llama").http_status, 400);
  EXPECT_NE(not_an_embedding_model("llama").message.find("not an embedding model"),
            std::string::npos);
  // Still serving after the errors.
  EXPECT_TRUE(std::holds_alternative<json>(run({{"input", "ok"}})));
}

}  // namespace
}  // namespace power
