#include <gtest/gtest.h>

#include "store/layout.h"
#include "store/source.h"

namespace power::store {
namespace {

TEST(HfSource, MapsToResolveUrl) {
  StoreConfig c;
  auto s = parse_source("hf://karpathy/tinyllamas/stories260K/stories260K.bin", c);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->kind, SourceKind::kHttp);
  EXPECT_EQ(s->location,
            "https://huggingface.co/karpathy/tinyllamas/resolve/main/stories260K/stories260K.bin");
  EXPECT_EQ(s->filename, "stories260K.bin");
  EXPECT_EQ(s->relative_path, "stories260K/stories260K.bin");
  EXPECT_EQ(s->original, "hf://karpathy/tinyllamas/stories260K/stories260K.bin");
}

TEST(HfSource, Revision) {
  auto u = hf_resolve_url("hf://Qwen/Qwen2-0.5B-Instruct-GGUF@v1.0/qwen2-0_5b-instruct-q8_0.gguf",
                          "https://huggingface.co");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(*u,
            "https://huggingface.co/Qwen/Qwen2-0.5B-Instruct-GGUF/resolve/v1.0/"
            "qwen2-0_5b-instruct-q8_0.gguf");
  auto pr = hf_resolve_url("hf://o/r@refs/pr/1/x.gguf", "https://huggingface.co");
  // "refs/pr/1" cannot be told apart from a path; '@' takes the segment up to the next '/'.
  ASSERT_TRUE(pr.ok());
  EXPECT_EQ(*pr, "https://huggingface.co/o/r/resolve/refs/pr/1/x.gguf");
  auto enc = hf_resolve_url("hf://o/r@refs%2Fpr%2F1/x y.gguf", "http://127.0.0.1:1");
  ASSERT_TRUE(enc.ok());
  EXPECT_EQ(*enc, "http://127.0.0.1:1/o/r/resolve/refs%2Fpr%2F1/x%20y.gguf");
}

TEST(HfSource, EndpointOverride) {
  StoreConfig c;
  c.hf_endpoint = "http://127.0.0.1:9";
  auto s = parse_source("hf://o/r/a.gguf", c);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->location, "http://127.0.0.1:9/o/r/resolve/main/a.gguf");
}

TEST(HfSource, RejectsMalformed) {
  for (const char* bad :
       {"hf://", "hf://owner", "hf://owner/repo", "hf://owner/repo/", "hf://o/r/../x",
        "hf://o/r/a//b", "hf://o w/r/x", "hf://o/r@/x", "hf://../r/x"}) {
    auto u = hf_resolve_url(bad, "https://huggingface.co");
    EXPECT_FALSE(u.ok()) << bad;
    if (!u.ok()) {
      EXPECT_EQ(u.status().code(), StatusCode::kInvalidArgument);
    }
  }
}

TEST(Source, HttpAndFiles) {
  StoreConfig c;
  auto h = parse_source("https://example.com/a/b/model.gguf?download=true", c);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->filename, "model.gguf");
  EXPECT_EQ(h->kind, SourceKind::kHttp);
  EXPECT_FALSE(parse_source("https://example.com/", c).ok());
  auto f = parse_source("/tmp/x/../y/model.bin", c);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->kind, SourceKind::kFile);
  EXPECT_EQ(f->location, "/tmp/y/model.bin");
  auto fu = parse_source("file:///tmp/m%20x.gguf", c);
  ASSERT_TRUE(fu.ok());
  EXPECT_EQ(fu->location, "/tmp/m x.gguf");
  auto ftp = parse_source("ftp://example.com/x.gguf", c);
  EXPECT_EQ(ftp.status().code(), StatusCode::kUnsupported);
  EXPECT_FALSE(parse_source("", c).ok());
}

TEST(MirrorList, SplitsOnColonsAndCommasKeepingUrls) {
  EXPECT_EQ(parse_mirror_list("/srv/a:/srv/b"), (std::vector<std::string>{"/srv/a", "/srv/b"}));
  EXPECT_EQ(parse_mirror_list("/srv/a, http://h:8080/m ,/srv/b"),
            (std::vector<std::string>{"/srv/a", "http://h:8080/m", "/srv/b"}));
  EXPECT_EQ(
      parse_mirror_list("http://127.0.0.1:8080/x:/data/m:https://m.example/y"),
      (std::vector<std::string>{"http://127.0.0.1:8080/x", "/data/m", "https://m.example/y"}));
  EXPECT_EQ(parse_mirror_list("http://[::1]:81:file:///srv/c"),
            (std::vector<std::string>{"http://[::1]:81", "file:///srv/c"}));
  EXPECT_EQ(parse_mirror_list("https://host:443"), (std::vector<std::string>{"https://host:443"}));
  EXPECT_TRUE(parse_mirror_list("").empty());
  EXPECT_TRUE(parse_mirror_list(" : , ").empty());
}

TEST(MirrorList, Candidates) {
  StoreConfig c;
  auto s = parse_source("hf://o/r/sub/m.gguf", c);
  ASSERT_TRUE(s.ok());
  Sha256Digest d = sha256("x", 1);
  auto cands = mirror_candidates({"/srv/m/", "http://h:1/base", "ftp://nope"}, *s, d);
  ASSERT_EQ(cands.size(), 6u);
  EXPECT_EQ(cands[0].location, "/srv/m/sha256-" + to_hex(d));
  EXPECT_EQ(cands[1].location, "/srv/m/sub/m.gguf");
  EXPECT_EQ(cands[2].location, "/srv/m/m.gguf");
  EXPECT_EQ(cands[0].kind, SourceKind::kFile);
  EXPECT_EQ(cands[3].location, "http://h:1/base/sha256-" + to_hex(d));
  EXPECT_EQ(cands[5].location, "http://h:1/base/m.gguf");
  EXPECT_EQ(cands[5].kind, SourceKind::kHttp);
}

TEST(StoreConfig, ParsesAndRejects) {
  auto c = parse_store_config(
      R"({"mirrors": ["/a", "http://m:1/x"], "max_download_bytes": 1000, "max_redirects": 2})");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->mirrors, (std::vector<std::string>{"/a", "http://m:1/x"}));
  EXPECT_EQ(c->max_download_bytes, 1000u);
  EXPECT_EQ(c->max_redirects, 2);
  auto s = parse_store_config(R"({"mirrors": "/a:/b"})");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->mirrors.size(), 2u);
  EXPECT_FALSE(parse_store_config("{").ok());
  EXPECT_FALSE(parse_store_config(R"({"mirorrs": []})").ok());  // typo is an error
  EXPECT_FALSE(parse_store_config(R"({"max_redirects": -1})").ok());
  EXPECT_FALSE(parse_store_config(R"({"schema": "power.config.v2"})").ok());
}

TEST(Digest, ParsesSpellings) {
  Sha256Digest d = sha256("x", 1);
  for (const std::string& s : {"sha256:" + to_hex(d), "sha256-" + to_hex(d), to_hex(d)}) {
    auto p = parse_digest(s);
    ASSERT_TRUE(p.ok()) << s;
    EXPECT_EQ(*p, d);
  }
  EXPECT_FALSE(parse_digest("sha256:abc").ok());
  EXPECT_FALSE(parse_digest("md5:" + to_hex(d)).ok());
}

}  // namespace
}  // namespace power::store
