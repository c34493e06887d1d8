// Resolving models for loading, removal with garbage collection, and a full disk.
#include <gtest/gtest.h>

#include <sys/mount.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include "base/file.h"
#include "store/blob_store.h"
#include "store/manifest.h"
#include "store/models.h"
#include "store/pull.h"
#include "store_test_util.h"
#include "test_http_server.h"
#include "test_util.h"

namespace power::store {
namespace {

using testing::digest_of;
using testing::list_dir;
using testing::make_bytes;

class Models : public testing::StoreFixture {
 protected:
  // Pulls local files as a model; returns their digests.
  std::vector<Sha256Digest> add_model(const std::string& name,
                                      const std::vector<std::string>& bodies) {
    PullRequest req;
    req.name = name;
    std::vector<Sha256Digest> out;
    for (size_t i = 0; i < bodies.size(); ++i) {
      std::string path = home_ + "/src-" + name + "-" + std::to_string(i) + ".bin";
      testing::write_text(path, bodies[i]);
      req.parts.push_back({path, {}, {}, ""});
      out.push_back(digest_of(bodies[i]));
    }
    auto m = pull(layout_, req, options());
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    return out;
  }
  bool has_blob(const Sha256Digest& d) {
    struct stat st {};
    return ::stat(layout_.blob_path(d).c_str(), &st) == 0;
  }
  void overwrite_blob(const Sha256Digest& d, const std::string& bytes) {
    ::chmod(layout_.blob_path(d).c_str(), 0644);
    testing::write_text(layout_.blob_path(d), bytes);
  }
};

TEST_F(Models, ResolveChecksBlobsBeforeLoading) {
  const std::string a = make_bytes(5000, 1), b = make_bytes(700, 2);
  auto d = add_model("pair", {a, b});
  auto r = resolve_model(layout_, "pair");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->parts.size(), 2u);
  EXPECT_EQ(r->parts[0].path, layout_.blob_path(d[0]));
  ASSERT_NE(r->part_with_role("model"), nullptr);
  EXPECT_EQ(r->part_with_role("model")->part.size_bytes, 5000u);

  std::string flipped = a;
  flipped[10] ^= 0x40;
  overwrite_blob(d[0], flipped);
  EXPECT_TRUE(resolve_model(layout_, "pair").ok());  // same size: only hashing notices
  auto verified = resolve_model(layout_, "pair", /*verify_hash=*/true);
  ASSERT_FALSE(verified.ok());
  EXPECT_EQ(verified.status().code(), StatusCode::kIntegrity);

  overwrite_blob(d[0], a.substr(0, 4999));
  auto truncated = resolve_model(layout_, "pair");
  ASSERT_FALSE(truncated.ok());
  EXPECT_EQ(truncated.status().code(), StatusCode::kIntegrity);
  EXPECT_NE(truncated.status().message().find("4999"), std::string::npos);

  std::remove(layout_.blob_path(d[1]).c_str());
  overwrite_blob(d[0], a);
  auto missing = resolve_model(layout_, "pair");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);

  EXPECT_EQ(resolve_model(layout_, "nope").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(resolve_model(layout_, "../x").status().code(), StatusCode::kInvalidArgument);
}

TEST_F(Models, ResolveByDigest) {
  const std::string a = make_bytes(5000, 1);
  auto d = add_model("one", {a});
  auto r = resolve_model(layout_, digest_string(d[0]), true);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->parts[0].path, layout_.blob_path(d[0]));
  EXPECT_FALSE(resolve_model(layout_, "sha256:" + std::string(64, '0')).ok());
}

TEST_F(Models, RemoveKeepsBlobsOtherModelsStillReference) {
  const std::string shared = make_bytes(3000, 1), own = make_bytes(2000, 2),
                    orphan = make_bytes(1000, 3), future = make_bytes(500, 4);
  auto a = add_model("a", {shared});
  auto b = add_model("b", {shared, own});
  // A blob no manifest references, and one referenced only by a manifest of a newer schema.
  testing::write_text(layout_.blob_path(digest_of(orphan)), orphan);
  testing::write_text(layout_.blob_path(digest_of(future)), future);
  // Tensor manifests (format/tensor_manifest.h) are a cache of their blob: they go with it.
  std::filesystem::create_directories(layout_.home() + "/tensors");
  testing::write_text(layout_.tensor_manifest_path(digest_of(orphan)), "{}");
  testing::write_text(layout_.tensor_manifest_path(a[0]), "{}");
  testing::write_text(layout_.manifests_dir() + "/newer.json",
                      "{\"schema\":\"power.manifest.v7\",\"blobs\":[\"sha256:" +
                          to_hex(digest_of(future)) + "\"]}");

  auto none = remove_models(layout_, {"a", "does-not-exist"});
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(read_manifest(layout_, "a").ok()) << "nothing is removed when a name is wrong";

  // Staging: a resumable partial with its sidecar stays; an orphaned sidecar goes.
  const std::string st = layout_.staging_dir();
  testing::write_text(st + "/url-1.partial", "partial");
  testing::write_text(st + "/url-1.partial.meta", "{}");
  testing::write_text(st + "/sha256-2.partial.meta", "{}");
  auto r = remove_models(layout_, {"a"});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(list_dir(st), (std::vector<std::string>{"url-1.partial", "url-1.partial.meta"}));
  EXPECT_EQ(r->removed_models, std::vector<std::string>{"a"});
  ASSERT_EQ(r->garbage.removed.size(), 1u);
  EXPECT_EQ(r->garbage.removed[0].digest, digest_of(orphan));
  EXPECT_EQ(r->garbage.freed_bytes, 1000u);
  EXPECT_TRUE(has_blob(a[0]));  // still used by b
  EXPECT_FALSE(std::filesystem::exists(layout_.tensor_manifest_path(digest_of(orphan))));
  EXPECT_TRUE(std::filesystem::exists(layout_.tensor_manifest_path(a[0])));
  EXPECT_TRUE(has_blob(digest_of(future)));

  r = remove_models(layout_, {"b"});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->garbage.removed.size(), 2u);
  EXPECT_EQ(r->garbage.freed_bytes, 5000u);
  EXPECT_FALSE(has_blob(b[0]));
  EXPECT_FALSE(has_blob(b[1]));
  EXPECT_FALSE(std::filesystem::exists(layout_.tensor_manifest_path(a[0])));
  EXPECT_TRUE(has_blob(digest_of(future)));
  EXPECT_EQ(list_dir(layout_.blobs_dir()).size(), 1u);
}

TEST_F(Models, RemoveWaitsForRunningPulls) {
  add_model("a", {make_bytes(100, 1)});
  auto held = FileLock::acquire(layout_.store_lock_path(), FileLock::Mode::kShared);
  ASSERT_TRUE(held.ok());
  std::atomic<bool> waited{false};
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    held->release();
  });
  auto start = std::chrono::steady_clock::now();
  auto r = remove_models(layout_, {"a"}, [&] { waited = true; });
  releaser.join();
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(waited);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(150));
}

// A real full disk: a 256 KiB tmpfs as $POWER_HOME when this process may mount one (root in
// a container usually may); otherwise the write-limit hook simulates ENOSPC.
TEST_F(Models, FullDiskIsAClearErrorAndCommitsNothing) {
  testing::TestHttpServer server;
  testing::Route route;
  route.body = make_bytes(1 << 20, 9);
  server.set_route("/big.gguf", route);
  const std::string mnt = power::testing::make_temp_dir("power-store-tmpfs");
  const bool mounted = ::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=256k") == 0;
  PullOptions o = options();
  StoreLayout layout = layout_;
  if (mounted) {
    auto l = StoreLayout::open(mnt);
    ASSERT_TRUE(l.ok());
    layout = *l;
  } else {
    std::printf("note: cannot mount a tmpfs here (%s); injecting ENOSPC instead\n",
                std::strerror(errno));
    o.fault_write_limit_bytes = 256 * 1024;
  }
  PullRequest req;
  req.name = "big";
  req.parts.push_back({server.url("/big.gguf"), digest_of(route.body), {}, ""});
  auto m = pull(layout, req, o);
  std::vector<std::string> blobs = list_dir(layout.blobs_dir());
  std::vector<std::string> staging = list_dir(layout.staging_dir());
  bool manifest = read_manifest(layout, "big").ok();
  // Once space is back, the same pull succeeds.
  if (mounted) {
    ASSERT_EQ(::mount("tmpfs", mnt.c_str(), "tmpfs", MS_REMOUNT, "size=4m"), 0);
  }
  o.fault_write_limit_bytes = 0;
  auto again = pull(layout, req, o);
  if (mounted) ::umount(mnt.c_str());
  power::testing::remove_tree(mnt);

  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kResourceExhausted) << m.status().to_string();
  EXPECT_NE(m.status().to_string().find("No space left on device"), std::string::npos);
  EXPECT_TRUE(blobs.empty());
  EXPECT_TRUE(staging.empty()) << ::testing::PrintToString(staging);
  EXPECT_FALSE(manifest);
  EXPECT_TRUE(again.ok()) << again.status().to_string();
}

}  // namespace
}  // namespace power::store
