#include <gtest/gtest.h>

#include "base/file.h"
#include "store/blob_store.h"
#include "store/manifest.h"
#include "store_test_util.h"

namespace power::store {
namespace {

using testing::StoreFixture;

Manifest sample_manifest() {
  Manifest m;
  m.name = "stories/260k:q8";
  m.format = "llama2c";
  m.parts.push_back(
      {"model", "stories260K.bin", sha256("a", 1), 1056540, "https://x/stories260K.bin"});
  m.parts.push_back({"tokenizer", "tok512.bin", sha256("b", 1), 6227, "https://x/tok512.bin"});
  m.license = "MIT";
  m.parameters = {{"temperature", 0.8}};
  m.created = "2026-01-02T03:04:05Z";
  return m;
}

TEST(ModelName, AcceptsOrdinaryNames) {
  for (const char* n : {"llama3", "qwen2.5-0.5b", "org/model:Q4_K_M", "a/b/c/d", "x_1"}) {
    EXPECT_TRUE(validate_model_name(n).ok()) << n;
  }
}

TEST(ModelName, RejectsTraversalAndOddCharacters) {
  for (const char* n : {"", "..", "../x", "a/../b", "/abs", "a//b", "a/", ".hidden", "a/.b",
                        "sp ace", "back\\slash", "nul\x01", "a/b/c/d/e", "-dash"}) {
    Status st = validate_model_name(n);
    EXPECT_FALSE(st.ok()) << n;
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  }
  EXPECT_FALSE(validate_model_name(std::string(201, 'a')).ok());
}

TEST(ModelName, FromFilename) {
  EXPECT_EQ(model_name_from_filename("stories260K.bin"), "stories260K");
  EXPECT_EQ(model_name_from_filename("dir/model.Q4_K_M.gguf"), "model.Q4_K_M");
  EXPECT_EQ(model_name_from_filename("we ird@name.gguf"), "we-ird-name");
  EXPECT_EQ(model_name_from_filename(".gguf"), "gguf");
  EXPECT_TRUE(validate_model_name(model_name_from_filename("...")).ok());
}

TEST(Manifest, RoundTrips) {
  Manifest m = sample_manifest();
  std::string text = manifest_to_json(m);
  EXPECT_EQ(text.find("\"schema\": \"power.manifest.v1\""), 4u) << text;  // first key
  auto back = parse_manifest(text);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->name, m.name);
  EXPECT_EQ(back->format, "llama2c");
  ASSERT_EQ(back->parts.size(), 2u);
  EXPECT_EQ(back->parts[1].digest, m.parts[1].digest);
  EXPECT_EQ(back->parts[1].role, "tokenizer");
  EXPECT_EQ(back->size_bytes(), 1056540u + 6227u);
  EXPECT_EQ(back->parameters["temperature"], 0.8);
  EXPECT_EQ(back->sources().size(), 2u);
  EXPECT_EQ(manifest_to_json(*back), text);
}

TEST(Manifest, RejectsUnknownVersionClearly) {
  std::string text = manifest_to_json(sample_manifest());
  auto pos = text.find("power.manifest.v1");
  text.replace(pos, 17, "power.manifest.v2");
  auto r = parse_manifest(text);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(r.status().message().find("power.manifest.v2"), std::string::npos);
  EXPECT_NE(r.status().message().find("reads \"power.manifest.v1\" only"), std::string::npos);
}

TEST(Manifest, RejectsMalformed) {
  const std::string good = manifest_to_json(sample_manifest());
  auto mutate = [&](const std::string& from, const std::string& to) {
    std::string t = good;
    auto pos = t.find(from);
    EXPECT_NE(pos, std::string::npos) << from;
    t.replace(pos, from.size(), to);
    return parse_manifest(t);
  };
  EXPECT_FALSE(parse_manifest("").ok());
  EXPECT_FALSE(parse_manifest("[]").ok());
  EXPECT_FALSE(parse_manifest("{\"name\":\"x\"}").ok());                      // no schema
  EXPECT_FALSE(mutate("power.manifest.v1", "other.thing.v1").ok());           // foreign schema
  EXPECT_FALSE(mutate("\"stories/260k:q8\"", "\"../../etc/passwd\"").ok());   // bad name
  EXPECT_FALSE(mutate("\"stories260K.bin\"", "\"../x.bin\"").ok());           // bad filename
  EXPECT_FALSE(mutate("\"tok512.bin\"", "\"stories260K.bin\"").ok());         // duplicate file
  EXPECT_FALSE(mutate("sha256:ca978112", "sha256:zz978112").ok());            // bad digest
  EXPECT_FALSE(mutate("\"size_bytes\": 6227", "\"size_bytes\": -1").ok());    // negative size
  EXPECT_FALSE(mutate("\"size_bytes\": 6227", "\"size_bytes\": 6228").ok());  // sum mismatch
}

class ManifestFiles : public StoreFixture {};

TEST_F(ManifestFiles, WriteReadListRemove) {
  Manifest m = sample_manifest();
  ASSERT_TRUE(write_manifest(layout_, m).ok());
  auto back = read_manifest(layout_, m.name);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->parts.size(), 2u);
  auto missing = read_manifest(layout_, "nope");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("power ls"), std::string::npos);

  testing::write_text(layout_.manifests_dir() + "/future.json",
                      "{\"schema\":\"power.manifest.v9\",\"parts\":[{\"digest\":\"sha256:" +
                          std::string(64, 'e') + "\"}]}");
  auto list = list_manifests(layout_);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].name, "future");
  EXPECT_FALSE((*list)[0].manifest.has_value());
  EXPECT_EQ((*list)[0].error.code(), StatusCode::kUnsupported);
  EXPECT_EQ((*list)[1].name, "stories/260k:q8");
  // The unreadable manifest's digest is kept for garbage collection.
  auto refs = referenced_digests(*list);
  EXPECT_EQ(refs.size(), 3u);

  ASSERT_TRUE(remove_manifest(layout_, m.name).ok());
  EXPECT_EQ(remove_manifest(layout_, m.name).code(), StatusCode::kNotFound);
  EXPECT_TRUE(testing::list_dir(layout_.manifests_dir()) ==
              std::vector<std::string>{"future.json"});
}

TEST_F(ManifestFiles, ReadRejectsNameMismatch) {
  Manifest m = sample_manifest();
  m.name = "alpha";
  ASSERT_TRUE(write_manifest(layout_, m).ok());
  ASSERT_EQ(::rename(layout_.manifest_path("alpha").c_str(), layout_.manifest_path("beta").c_str()),
            0);
  auto r = read_manifest(layout_, "beta");
  EXPECT_EQ(r.status().code(), StatusCode::kCorrupt);
}

}  // namespace
}  // namespace power::store
