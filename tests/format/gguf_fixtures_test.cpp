// The peer's GGUF files in ../shared: every one reads, matches the facts its README and
// meta.json document, and survives a write -> read round trip through our writer.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "format/gguf.h"
#include "gguf_test_util.h"
#include "test_util.h"

namespace power {
namespace {

namespace fs = std::filesystem;
using testing::shared_dir;

std::string Fixtures() {
  return shared_dir() + "/fixtures";
}
std::string Stories() {
  return shared_dir() + "/models/stories260K";
}

// Every GGUF the shared data holds, sorted.
std::vector<std::string> AllGgufFiles() {
  std::vector<std::string> out;
  auto add_dir = [&](const std::string& dir) {
    if (!fs::is_directory(dir)) return;
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.is_regular_file() && e.path().extension() == ".gguf") out.push_back(e.path());
    }
  };
  for (const char* group : {"quant", "models"}) {
    const std::string root = Fixtures() + "/" + group;
    if (!fs::is_directory(root)) continue;
    for (const auto& e : fs::directory_iterator(root)) {
      if (e.is_directory()) add_dir(e.path());
    }
  }
  add_dir(Fixtures() + "/tokenizer");
  add_dir(Fixtures() + "/embeddings");
  add_dir(Stories());
  std::sort(out.begin(), out.end());
  return out;
}

std::unique_ptr<GgufFile> Open(const std::string& path) {
  auto f = GgufFile::open(path);
  EXPECT_TRUE(f.ok()) << path << ": " << f.status().to_string();
  return f.ok() ? std::move(f).value() : nullptr;
}

nlohmann::json ReadJson(const std::string& path) {
  auto bytes = testing::read_bytes(path);
  return nlohmann::json::parse(bytes.begin(), bytes.end());
}

std::map<std::string, int> TypeCounts(const GgufFile& f) {
  std::map<std::string, int> counts;
  for (const GgufTensor& t : f.tensors()) ++counts[std::string(ggml_type_name(t.type))];
  return counts;
}

TEST(GgufFixtures, EveryFileReads) {
  POWER_REQUIRE_SHARED();
  const auto files = AllGgufFiles();
  // 14 quant + 19 synthetic decoders + 3 gpt2 + 2 mamba + 5 tokenizers + 2 embeddings +
  // 4 stories260K.
  EXPECT_EQ(files.size(), 49u);
  for (const std::string& path : files) {
    SCOPED_TRACE(path);
    auto f = Open(path);
    ASSERT_NE(f, nullptr);
    EXPECT_TRUE(f->version() == 2 || f->version() == 3);
    EXPECT_EQ(f->alignment(), 32u);
    EXPECT_FALSE(f->metadata().empty());
    for (const GgufTensor& t : f->tensors()) {
      EXPECT_LE(t.file_offset + t.n_bytes, f->file_size()) << t.name;
      EXPECT_EQ(t.data, f->bytes().data() + t.file_offset);
    }
    testing::TouchEverything(*f);
  }
}

TEST(GgufFixtures, QuantFilesMatchTheirRawBlocks) {
  POWER_REQUIRE_SHARED();
  const std::vector<std::string> types = {"F16",  "BF16", "Q4_0",   "Q4_1",  "Q5_0",
                                          "Q5_1", "Q8_0", "Q2_K",   "Q3_K",  "Q4_K",
                                          "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS"};
  const std::vector<std::vector<uint64_t>> shapes = {{256, 8}, {512, 3}, {1024, 5}};
  for (const std::string& type : types) {
    SCOPED_TRACE(type);
    const std::string dir = Fixtures() + "/quant/" + type;
    auto f = Open(dir + "/" + type + ".gguf");
    ASSERT_NE(f, nullptr);
    const auto meta = ReadJson(dir + "/meta.json");
    EXPECT_EQ(f->version(), 3u);
    EXPECT_EQ(f->get_string("general.architecture").value(), "fixture");
    EXPECT_TRUE(f->get_string("general.name").ok());
    EXPECT_EQ(f->get_string("fixture.ggml_type").value(), type);
    EXPECT_EQ(f->find("fixture.seed")->type, GgufValueType::kUint32);
    EXPECT_EQ(f->get_u64("fixture.seed").value(), meta["seed"].get<uint64_t>());
    ASSERT_EQ(f->tensors().size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      const std::string name = "t" + std::to_string(i);
      const GgufTensor* t = f->find_tensor(name);
      ASSERT_NE(t, nullptr) << name;
      EXPECT_EQ(ggml_type_name(t->type), type);
      EXPECT_EQ(static_cast<uint32_t>(t->type), meta["ggml_type_id"].get<uint32_t>());
      EXPECT_EQ(t->ne, shapes[i]);
      EXPECT_EQ(t->n_bytes, meta["tensors"][i]["nbytes"].get<uint64_t>());
      const auto raw = testing::read_bytes(dir + "/" + name + ".raw.bin");
      ASSERT_EQ(raw.size(), t->n_bytes);
      EXPECT_TRUE(std::equal(raw.begin(), raw.end(), t->data)) << name;
    }
  }
}

TEST(GgufFixtures, Stories260KMetadata) {
  POWER_REQUIRE_SHARED();
  struct File {
    std::string name;
    std::map<std::string, int> types;
    int64_t file_type;  // -1: no general.file_type key
  };
  const std::vector<File> files = {
      {"stories260K-F32.gguf", {{"F32", 48}}, -1},
      {"stories260K-F16.gguf", {{"F16", 37}, {"F32", 11}}, 1},
      {"stories260K-ftypeQ6_K_fallback-Q8_0-F16.gguf", {{"Q8_0", 32}, {"F16", 5}, {"F32", 11}}, 18},
      {"stories260K-ftypeQ4_K_M_fallback-Q5_0-Q8_0-F16.gguf",
       {{"Q5_0", 29}, {"Q8_0", 3}, {"F16", 5}, {"F32", 11}},
       15},
  };
  for (const File& file : files) {
    SCOPED_TRACE(file.name);
    auto f = Open(Stories() + "/" + file.name);
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->get_string("general.architecture").value(), "llama");
    EXPECT_EQ(f->get_u64("llama.context_length").value(), 128u);
    EXPECT_EQ(f->get_u64("llama.embedding_length").value(), 64u);
    EXPECT_EQ(f->get_u64("llama.feed_forward_length").value(), 172u);
    EXPECT_EQ(f->get_u64("llama.attention.head_count").value(), 8u);
    EXPECT_EQ(f->get_u64("llama.attention.head_count_kv").value(), 4u);
    EXPECT_EQ(f->get_u64("llama.block_count").value(), 5u);
    EXPECT_EQ(f->get_u64("llama.rope.dimension_count").value(), 8u);
    EXPECT_FLOAT_EQ(
        static_cast<float>(f->get_f64("llama.attention.layer_norm_rms_epsilon").value()), 1e-5f);
    EXPECT_EQ(f->get_string("tokenizer.ggml.model").value(), "llama");
    const auto tokens = f->get_string_array("tokenizer.ggml.tokens");
    ASSERT_TRUE(tokens.ok());
    EXPECT_EQ(tokens->size(), 512u);
    EXPECT_EQ(f->find("tokenizer.ggml.scores")->as_array()->size(), 512u);
    EXPECT_EQ(f->find("tokenizer.ggml.scores")->array_type, GgufValueType::kFloat32);
    EXPECT_EQ(f->find("tokenizer.ggml.token_type")->as_array()->size(), 512u);
    EXPECT_EQ(f->get_u64("tokenizer.ggml.bos_token_id").value(), 1u);
    EXPECT_EQ(f->get_u64("tokenizer.ggml.eos_token_id").value(), 2u);
    EXPECT_EQ(f->get_u64("tokenizer.ggml.unknown_token_id").value(), 0u);
    EXPECT_EQ(f->find("tokenizer.ggml.add_bos_token"), nullptr);
    EXPECT_EQ(f->tensors().size(), 48u);
    EXPECT_EQ(TypeCounts(*f), file.types);
    if (file.file_type < 0) {
      EXPECT_EQ(f->find("general.file_type"), nullptr);
    } else {
      EXPECT_EQ(f->get_i64("general.file_type").value(), file.file_type);
      EXPECT_EQ(f->get_u64("general.quantization_version").value(), 2u);
    }
    const GgufTensor* embd = f->find_tensor("token_embd.weight");
    ASSERT_NE(embd, nullptr);
    EXPECT_EQ(embd->ne, (std::vector<uint64_t>{64, 512}));
    EXPECT_NE(f->find_tensor("output.weight"), nullptr);
  }
}

TEST(GgufFixtures, SyntheticModelsMatchMeta) {
  POWER_REQUIRE_SHARED();
  int n_files = 0;
  int n_tensors = 0;
  for (const char* arch : {"llama", "qwen2", "qwen3", "phi3"}) {
    const std::string dir = Fixtures() + "/models/" + arch;
    const auto meta = ReadJson(dir + "/meta.json");
    const auto& hp = meta["hparams"];
    for (const auto& [variant, info] : meta["files"].items()) {
      SCOPED_TRACE(info["file"].get<std::string>());
      auto f = Open(dir + "/" + info["file"].get<std::string>());
      ASSERT_NE(f, nullptr);
      const std::string a = f->get_string("general.architecture").value();
      EXPECT_EQ(a, arch);
      EXPECT_EQ(f->get_u64(a + ".context_length").value(), hp["n_ctx_train"].get<uint64_t>());
      EXPECT_EQ(f->get_u64(a + ".embedding_length").value(), hp["n_embd"].get<uint64_t>());
      EXPECT_EQ(f->get_u64(a + ".feed_forward_length").value(), hp["n_ff"].get<uint64_t>());
      EXPECT_EQ(f->get_u64(a + ".block_count").value(), hp["n_layer"].get<uint64_t>());
      EXPECT_EQ(f->get_u64(a + ".attention.head_count").value(), hp["n_head"].get<uint64_t>());
      EXPECT_EQ(f->get_u64(a + ".attention.head_count_kv").value(),
                hp["n_head_kv"].get<uint64_t>());
      EXPECT_EQ(f->get_string_array("tokenizer.ggml.tokens")->size(), hp["n_vocab"].get<size_t>());
      if (info.contains("general_file_type") && !info["general_file_type"].is_null()) {
        EXPECT_EQ(f->get_i64("general.file_type").value(),
                  info["general_file_type"].get<int64_t>());
      }
      const auto& types = info["tensor_types"];
      EXPECT_EQ(f->tensors().size(), types.size());
      ++n_files;
      n_tensors += static_cast<int>(types.size());
      for (const auto& [name, type] : types.items()) {
        const GgufTensor* t = f->find_tensor(name);
        ASSERT_NE(t, nullptr) << name;
        EXPECT_EQ(ggml_type_name(t->type), type.get<std::string>()) << name;
        if (meta["tensor_shapes_ne"].contains(name)) {
          EXPECT_EQ(t->ne, meta["tensor_shapes_ne"][name].get<std::vector<uint64_t>>()) << name;
        }
      }
      std::map<std::string, int> counts;
      for (const auto& [type, n] : info["tensor_type_counts"].items()) counts[type] = n.get<int>();
      EXPECT_EQ(TypeCounts(*f), counts);
    }
  }
  EXPECT_EQ(n_files, 19);  // README: llama 9, qwen2 4, qwen3 4, phi3 2
  EXPECT_GT(n_tensors, 19 * 15);
}

TEST(GgufFixtures, EmbeddingModelsMatchMeta) {
  POWER_REQUIRE_SHARED();
  const std::string dir = Fixtures() + "/embeddings";
  const auto meta = ReadJson(dir + "/meta.json");
  for (const auto& [name, pooling] :
       std::vector<std::pair<std::string, uint64_t>>{{"bert-mean-F16", 1}, {"bert-cls-Q8_0", 2}}) {
    SCOPED_TRACE(name);
    auto f = Open(dir + "/" + name + ".gguf");
    ASSERT_NE(f, nullptr);
    const auto& info = meta["files"][name];
    EXPECT_EQ(f->file_size(), info["bytes"].get<uint64_t>());
    EXPECT_EQ(f->get_string("general.architecture").value(), "bert");
    EXPECT_EQ(f->get_u64("bert.pooling_type").value(), pooling);
    EXPECT_EQ(f->find("bert.pooling_type")->type, GgufValueType::kUint32);
    EXPECT_EQ(f->get_bool("bert.attention.causal").value(), false);
    EXPECT_EQ(f->get_u64("bert.context_length").value(), 512u);
    EXPECT_FLOAT_EQ(static_cast<float>(f->get_f64("bert.attention.layer_norm_epsilon").value()),
                    1e-12f);
    EXPECT_EQ(f->get_string_array("tokenizer.ggml.tokens")->size(), 30522u);
    EXPECT_EQ(f->tensors().size(), info["tensor_types"].size());
    for (const auto& [tname, type] : info["tensor_types"].items()) {
      const GgufTensor* t = f->find_tensor(tname);
      ASSERT_NE(t, nullptr) << tname;
      EXPECT_EQ(ggml_type_name(t->type), type.get<std::string>()) << tname;
      EXPECT_EQ(t->ne, meta["tensor_shapes_ne"][tname].get<std::vector<uint64_t>>()) << tname;
    }
  }
}

TEST(GgufFixtures, VocabOnlyTokenizerFiles) {
  POWER_REQUIRE_SHARED();
  const std::map<std::string, std::string> models = {{"llama-spm", "llama"},
                                                     {"phi-3", "llama"},
                                                     {"bert-bge", "bert"},
                                                     {"gpt-2", "gpt2"},
                                                     {"deepseek-coder", "gpt2"}};
  for (const auto& [name, model] : models) {
    SCOPED_TRACE(name);
    auto f = Open(Fixtures() + "/tokenizer/ggml-vocab-" + name + ".gguf");
    ASSERT_NE(f, nullptr);
    EXPECT_TRUE(f->tensors().empty());
    EXPECT_EQ(f->get_string("tokenizer.ggml.model").value(), model);
    const auto tokens = f->get_string_array("tokenizer.ggml.tokens");
    ASSERT_TRUE(tokens.ok()) << tokens.status().to_string();
    EXPECT_GT(tokens->size(), 1000u);
    for (const char* parallel : {"tokenizer.ggml.scores", "tokenizer.ggml.token_type"}) {
      if (const GgufValue* v = f->find(parallel)) {
        EXPECT_EQ(v->as_array()->size(), tokens->size()) << parallel;
      }
    }
    if (model == "gpt2") {
      EXPECT_GT(f->get_string_array("tokenizer.ggml.merges")->size(), 1000u);
    }
  }
}

// Re-serializing a peer file with our writer reads back equal; llama.cpp lays files out the way
// our writer does (tensors packed in order, each padded), so the bytes are identical too.
TEST(GgufFixtures, ReserializeReadsBackEqual) {
  POWER_REQUIRE_SHARED();
  int identical = 0;
  const auto files = AllGgufFiles();
  for (const std::string& path : files) {
    SCOPED_TRACE(path);
    auto f = Open(path);
    ASSERT_NE(f, nullptr);
    GgufWriter w(f->alignment());
    for (const GgufKeyValue& kv : f->metadata()) w.set(kv.key, kv.value);
    for (const GgufTensor& t : f->tensors()) {
      ASSERT_TRUE(w.add_tensor_view(t.name, t.type, t.ne, t.bytes()).ok()) << t.name;
    }
    auto bytes = w.serialize();
    ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
    auto g = GgufFile::parse(*bytes);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    EXPECT_TRUE((*g)->metadata() == f->metadata());
    ASSERT_EQ((*g)->tensors().size(), f->tensors().size());
    for (size_t i = 0; i < f->tensors().size(); ++i) {
      const GgufTensor& a = f->tensors()[i];
      const GgufTensor& b = (*g)->tensors()[i];
      EXPECT_EQ(a.name, b.name);
      EXPECT_EQ(a.type, b.type);
      EXPECT_EQ(a.ne, b.ne);
      EXPECT_TRUE(
          std::equal(a.bytes().begin(), a.bytes().end(), b.bytes().begin(), b.bytes().end()))
          << a.name;
    }
    const bool same = bytes->size() == f->file_size() &&
                      std::equal(bytes->begin(), bytes->end(), f->bytes().begin());
    if (same) ++identical;
    if (!f->tensors().empty()) {
      EXPECT_TRUE(same) << "re-serialized bytes differ";
    } else {
      // gguf-py ends vocab-only files without padding the (empty) data section; we pad.
      ASSERT_EQ(bytes->size(), f->data_offset());
      EXPECT_TRUE(std::equal(f->bytes().begin(), f->bytes().end(), bytes->begin()));
      EXPECT_TRUE(std::all_of(bytes->begin() + f->file_size(), bytes->end(),
                              [](uint8_t b) { return b == 0; }));
    }
  }
  std::printf("%d of %zu files re-serialize bit-identically\n", identical, files.size());
}

TEST(GgufFixtures, WriteToDiskAndReopen) {
  POWER_REQUIRE_SHARED();
  auto f = Open(Stories() + "/stories260K-F16.gguf");
  ASSERT_NE(f, nullptr);
  const std::string dir = testing::make_temp_dir("gguf-fixture");
  GgufWriter w;
  for (const GgufKeyValue& kv : f->metadata()) w.set(kv.key, kv.value);
  w.set("general.name", GgufValue::str("rewritten"));
  for (const GgufTensor& t : f->tensors()) {
    ASSERT_TRUE(w.add_tensor_deferred(t.name, t.type, t.ne, [&t](std::span<uint8_t> out) {
                   std::copy(t.data, t.data + t.n_bytes, out.begin());
                   return Status();
                 }).ok());
  }
  ASSERT_TRUE(w.write(dir + "/out.gguf").ok());
  auto g = Open(dir + "/out.gguf");
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->get_string("general.name").value(), "rewritten");
  EXPECT_EQ(g->tensors().size(), 48u);
  EXPECT_EQ(TypeCounts(*g), TypeCounts(*f));
  testing::remove_tree(dir);
}

}  // namespace
}  // namespace power
