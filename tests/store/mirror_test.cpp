// Mirrors, hf:// sources, local files and multi-file bundles.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "base/file.h"
#include "store/manifest.h"
#include "store/pull.h"
#include "store_test_util.h"
#include "test_http_server.h"

namespace power::store {
namespace {

using testing::digest_of;
using testing::list_dir;
using testing::make_bytes;
using testing::Route;
using testing::TestHttpServer;

class Mirrors : public testing::StoreFixture {
 protected:
  void SetUp() override {
    StoreFixture::SetUp();
    body_ = make_bytes(200000, 11);
    Route r;
    r.body = body_;
    upstream_.set_route("/org/m.gguf", r);
    mirror_dir_ = home_ + "/mirror";
    std::filesystem::create_directories(mirror_dir_);
  }
  std::string blob_bytes() {
    auto t = read_file_text(layout_.blob_path(digest_of(body_)));
    return t.ok() ? *t : std::string();
  }
  TestHttpServer upstream_;
  TestHttpServer mirror_;
  std::string body_;
  std::string mirror_dir_;
};

TEST_F(Mirrors, DirectoryMirrorServesPinnedArtifactByBaseName) {
  testing::write_text(mirror_dir_ + "/m.gguf", body_);
  config_.mirrors = {mirror_dir_};
  auto m = pull_url(upstream_.url("/org/m.gguf"), digest_of(body_));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_TRUE(upstream_.requests().empty());
  EXPECT_EQ(blob_bytes(), body_);
  // The manifest records the upstream, never the mirror.
  EXPECT_EQ(m->parts[0].source, upstream_.url("/org/m.gguf"));
}

TEST_F(Mirrors, DirectoryMirrorByDigestName) {
  testing::write_text(mirror_dir_ + "/sha256-" + to_hex(digest_of(body_)), body_);
  config_.mirrors = {mirror_dir_};
  ASSERT_TRUE(pull_url(upstream_.url("/org/m.gguf"), digest_of(body_)).ok());
  EXPECT_TRUE(upstream_.requests().empty());
}

TEST_F(Mirrors, HttpMirrorServesPinnedArtifact) {
  Route r;
  r.body = body_;
  mirror_.set_route("/cache/m.gguf", r);
  config_.mirrors = {mirror_.url("/cache")};
  auto m = pull_url(upstream_.url("/org/m.gguf"), digest_of(body_));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_TRUE(upstream_.requests().empty());
  // Looked up as sha256-<hex> first (404), then by base name.
  auto reqs = mirror_.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].path, "/cache/sha256-" + to_hex(digest_of(body_)));
  EXPECT_EQ(reqs[0].status, 404);
  EXPECT_EQ(reqs[1].path, "/cache/m.gguf");
  EXPECT_EQ(blob_bytes(), body_);
}

TEST_F(Mirrors, MirrorServingWrongBytesIsRejectedAndTheNextSourceUsed) {
  testing::write_text(mirror_dir_ + "/m.gguf", make_bytes(200000, 12));  // same size, other bytes
  Route wrong;
  wrong.body = make_bytes(5000, 13);
  mirror_.set_route("/m.gguf", wrong);
  config_.mirrors = {mirror_dir_, mirror_.base_url()};
  auto m = pull_url(upstream_.url("/org/m.gguf"), digest_of(body_));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(upstream_.full_body_gets("/org/m.gguf"), 1);
  EXPECT_EQ(blob_bytes(), body_);
  int rejected = 0;
  for (const auto& e : events_) {
    if (e.status == "rejected") {
      ++rejected;
      EXPECT_NE(e.message.find("SHA-256 mismatch"), std::string::npos) << e.message;
    }
  }
  EXPECT_EQ(rejected, 2);
}

TEST_F(Mirrors, AllSourcesFailingNamesEachOne) {
  testing::write_text(mirror_dir_ + "/m.gguf", make_bytes(100, 12));
  config_.mirrors = {mirror_dir_};
  auto m = pull_url(upstream_.url("/org/m.gguf"), digest_of("not the body"));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kIntegrity);
  EXPECT_NE(m.status().message().find(mirror_dir_ + "/m.gguf"), std::string::npos);
  EXPECT_NE(m.status().message().find(upstream_.url("/org/m.gguf")), std::string::npos);
  expect_nothing_committed();
}

TEST_F(Mirrors, UnpinnedPullsNeverUseMirrors) {
  testing::write_text(mirror_dir_ + "/m.gguf", make_bytes(200000, 12));
  Route r;
  r.body = body_;
  mirror_.set_route("/m.gguf", r);
  config_.mirrors = {mirror_dir_, mirror_.base_url()};
  auto m = pull_url(upstream_.url("/org/m.gguf"));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_TRUE(mirror_.requests().empty());
  EXPECT_EQ(upstream_.full_body_gets("/org/m.gguf"), 1);
  EXPECT_EQ(m->parts[0].digest, digest_of(body_));
}

TEST_F(Mirrors, HfSourceUsesEndpointTokenAndRepoPathOnMirrors) {
  Route r;
  r.body = body_;
  upstream_.set_route("/karpathy/tinyllamas/resolve/main/stories260K/m.bin", r);
  config_.hf_endpoint = upstream_.base_url();
  config_.hf_token = "secret-token";
  auto m = pull_url("hf://karpathy/tinyllamas/stories260K/m.bin");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto reqs = upstream_.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].authorization, "Bearer secret-token");
  EXPECT_EQ(m->parts[0].source, "hf://karpathy/tinyllamas/stories260K/m.bin");

  // A directory mirror laid out like the repository (e.g. ../shared/models).
  std::filesystem::create_directories(mirror_dir_ + "/stories260K");
  std::string other = make_bytes(3000, 5);
  testing::write_text(mirror_dir_ + "/stories260K/tok.bin", other);
  config_.mirrors = {mirror_dir_};
  upstream_.clear_log();
  auto tok = pull_url("hf://karpathy/tinyllamas/stories260K/tok.bin", digest_of(other), {}, "tok");
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_TRUE(upstream_.requests().empty());
}

TEST_F(Mirrors, ConfigFileAndEnvironment) {
  testing::write_text(layout_.config_path(),
                      R"({"mirrors": ["/from/config"], "max_download_bytes": 123})");
  auto c = load_store_config(layout_);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->mirrors, std::vector<std::string>{"/from/config"});
  EXPECT_EQ(c->max_download_bytes, 123u);
  ::setenv("POWER_MIRRORS", "/env/a:http://127.0.0.1:9/b", 1);
  ::setenv("HF_ENDPOINT", "http://127.0.0.1:9/", 1);
  c = load_store_config(layout_);
  ::unsetenv("POWER_MIRRORS");
  ::unsetenv("HF_ENDPOINT");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->mirrors, (std::vector<std::string>{"/env/a", "http://127.0.0.1:9/b"}));
  EXPECT_EQ(c->hf_endpoint, "http://127.0.0.1:9");
  testing::write_text(layout_.config_path(), R"({"mirrors": 5})");
  c = load_store_config(layout_);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().to_string().find("config.json"), std::string::npos);
}

class LocalAndBundles : public Mirrors {};

TEST_F(LocalAndBundles, LocalFileWithAndWithoutPin) {
  const std::string path = home_ + "/local.gguf";
  testing::write_text(path, body_);
  auto m = pull_url(path);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->parts[0].digest, digest_of(body_));
  EXPECT_EQ(m->parts[0].source, path);
  EXPECT_EQ(blob_bytes(), body_);
  auto wrong = pull_url("file://" + path, digest_of("x"), {}, "w");
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), StatusCode::kIntegrity);
  auto missing = pull_url(home_ + "/nope.gguf");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST_F(LocalAndBundles, BundleCommitsManifestOnlyWhenEveryPartVerifies) {
  std::string tok = make_bytes(6000, 21);
  Route t;
  t.body = tok;
  upstream_.set_route("/org/tok512.bin", t);
  PullRequest req;
  req.name = "stories";
  req.parts.push_back({upstream_.url("/org/m.gguf"), digest_of(body_), body_.size(), ""});
  req.parts.push_back({upstream_.url("/org/tok512.bin"), digest_of("wrong"), {}, ""});
  auto bad = pull(layout_, req, options());
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kIntegrity);
  EXPECT_NE(bad.status().to_string().find("tok512.bin"), std::string::npos);
  EXPECT_FALSE(read_manifest(layout_, "stories").ok());

  req.parts[1].sha256 = digest_of(tok);
  req.license = "MIT";
  req.parameters = {{"temperature", 0.7}};
  auto good = pull(layout_, req, options());
  ASSERT_TRUE(good.ok()) << good.status().to_string();
  ASSERT_EQ(good->parts.size(), 2u);
  EXPECT_EQ(good->parts[0].role, "model");
  EXPECT_EQ(good->parts[1].role, "tokenizer");
  EXPECT_EQ(good->size_bytes(), body_.size() + tok.size());
  EXPECT_EQ(upstream_.full_body_gets("/org/m.gguf"), 1);  // the first part was kept
  auto back = read_manifest(layout_, "stories");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->license, "MIT");
  EXPECT_EQ(back->parameters["temperature"], 0.7);
  EXPECT_EQ(list_dir(layout_.blobs_dir()).size(), 2u);
}

TEST_F(LocalAndBundles, BundleRejectsDuplicateFileNames) {
  PullRequest req;
  req.parts.push_back({upstream_.url("/org/m.gguf"), {}, {}, ""});
  req.parts.push_back({upstream_.url("/org/m.gguf"), {}, {}, ""});
  auto r = pull(layout_, req, options());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(LocalAndBundles, FormatIsDetected) {
  std::string gguf = "GGUF" + make_bytes(1000, 3);
  const std::string path = home_ + "/x.bin";
  testing::write_text(path, gguf);
  auto m = pull_url(path);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->format, "gguf");
  // llama2.c header: dim 64, hidden 172, layers 5, heads 8, kv heads 4, vocab 512, seq 512.
  int32_t hdr[7] = {64, 172, 5, 8, 4, 512, 512};
  std::string l2c(reinterpret_cast<const char*>(hdr), sizeof(hdr));
  l2c += make_bytes(1000, 4);
  testing::write_text(home_ + "/stories.bin", l2c);
  auto s = pull_url(home_ + "/stories.bin", {}, {}, "s");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->format, "llama2c");
}

}  // namespace
}  // namespace power::store
