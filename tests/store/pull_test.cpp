// Pulls over HTTP from the local fault-injecting server: verification, caps, resume, redirects.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "base/file.h"
#include "store/blob_store.h"
#include "store/download.h"
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

class PullHttp : public testing::StoreFixture {
 protected:
  Route body_route(size_t n = 300000, uint32_t seed = 1) {
    Route r;
    r.body = make_bytes(n, seed);
    return r;
  }
  std::string blob_bytes(const Sha256Digest& d) {
    auto t = read_file_text(layout_.blob_path(d));
    return t.ok() ? *t : std::string();
  }
  TestHttpServer server_;
};

TEST_F(PullHttp, PinnedPullCommitsBlobAndManifest) {
  Route r = body_route();
  const std::string body = r.body;
  server_.set_route("/m.gguf", r);
  auto m = pull_url(server_.url("/m.gguf"), digest_of(body), body.size());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->parts[0].digest, digest_of(body));
  EXPECT_EQ(m->parts[0].size_bytes, body.size());
  EXPECT_EQ(m->parts[0].filename, "m.gguf");
  EXPECT_EQ(m->parts[0].role, "model");
  EXPECT_EQ(blob_bytes(digest_of(body)), body);
  EXPECT_TRUE(list_dir(layout_.staging_dir()).empty());
  auto back = read_manifest(layout_, "m");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->parts[0].source, server_.url("/m.gguf"));
  struct stat st {};
  ASSERT_EQ(::stat(layout_.blob_path(digest_of(body)).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0222, 0u) << "blobs are read-only";
  // Progress: monotonic, ends complete, then success.
  uint64_t last = 0;
  bool saw_download = false;
  for (const auto& e : events_) {
    if (e.status != "downloading") continue;
    saw_download = true;
    EXPECT_GE(e.completed_bytes, last);
    EXPECT_EQ(e.total_bytes, body.size());
    last = e.completed_bytes;
  }
  EXPECT_TRUE(saw_download);
  EXPECT_EQ(last, body.size());
  ASSERT_FALSE(events_.empty());
  EXPECT_EQ(events_.back().status, "success");
}

TEST_F(PullHttp, SecondPullReusesBlobWithoutDownloading) {
  Route r = body_route();
  const std::string body = r.body;
  server_.set_route("/m.gguf", r);
  ASSERT_TRUE(pull_url(server_.url("/m.gguf"), digest_of(body)).ok());
  server_.clear_log();
  events_.clear();
  auto again = pull_url(server_.url("/m.gguf"), digest_of(body), {}, "m2");
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_TRUE(server_.requests().empty());
  bool exists = false;
  for (const auto& e : events_) exists |= e.status == "exists";
  EXPECT_TRUE(exists);
}

TEST_F(PullHttp, WrongHashIsRejectedAndNothingCommitted) {
  Route r = body_route();
  server_.set_route("/m.gguf", r);
  Sha256Digest wrong = digest_of("something else");
  auto m = pull_url(server_.url("/m.gguf"), wrong);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kIntegrity);
  EXPECT_NE(m.status().to_string().find("SHA-256 mismatch"), std::string::npos);
  EXPECT_NE(m.status().to_string().find(to_hex(wrong)), std::string::npos);
  expect_nothing_committed();
  EXPECT_EQ(events_.back().status, "error");
}

TEST_F(PullHttp, TruncatedBodyFailsAndKeepsPartialForResume) {
  Route r = body_route();
  const std::string body = r.body;
  r.content_length = body.size() + 1000;  // announces more than it sends, then closes
  server_.set_route("/m.gguf", r);
  auto m = pull_url(server_.url("/m.gguf"));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kIo) << m.status().to_string();
  EXPECT_NE(m.status().to_string().find("closed early"), std::string::npos);
  EXPECT_TRUE(list_dir(layout_.blobs_dir()).empty());
  EXPECT_FALSE(read_manifest(layout_, "m").ok());
}

TEST_F(PullHttp, OversizedBodyIsCutAtTheDeclaredSize) {
  Route r = body_route();
  const std::string body = r.body;
  server_.set_route("/m.gguf", r);
  // Announced length larger than declared: refused before any byte is stored.
  auto m = pull_url(server_.url("/m.gguf"), digest_of(body.substr(0, 1000)), 1000);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kIntegrity) << m.status().to_string();
  expect_nothing_committed();
  // No Content-Length (close-delimited): cut while streaming at the cap.
  r.send_content_length = false;
  server_.set_route("/m.gguf", r);
  m = pull_url(server_.url("/m.gguf"), digest_of(body.substr(0, 1000)), 1000);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kResourceExhausted) << m.status().to_string();
  expect_nothing_committed();
}

TEST_F(PullHttp, UnpinnedPullIsCappedByMaxDownloadBytes) {
  Route r = body_route();
  r.send_content_length = false;
  server_.set_route("/m.gguf", r);
  config_.max_download_bytes = 4096;
  auto m = pull_url(server_.url("/m.gguf"));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kResourceExhausted) << m.status().to_string();
  expect_nothing_committed();
}

TEST_F(PullHttp, DroppedConnectionResumesOnTheNextPull) {
  Route r = body_route(500000);
  const std::string body = r.body;
  r.drop_after_bytes = 200000;
  r.drop_count = 1;
  server_.set_route("/m.gguf", r);
  auto first = pull_url(server_.url("/m.gguf"), digest_of(body), body.size());
  ASSERT_FALSE(first.ok());
  EXPECT_TRUE(list_dir(layout_.blobs_dir()).empty());
  auto second = pull_url(server_.url("/m.gguf"), digest_of(body), body.size());
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  auto reqs = server_.requests_for("/m.gguf");
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].range, "");
  EXPECT_EQ(reqs[1].range, "bytes=200000-");
  EXPECT_EQ(reqs[1].status, 206);
  EXPECT_EQ(reqs[1].body_bytes_sent, body.size() - 200000);
  EXPECT_EQ(blob_bytes(digest_of(body)), body);
  EXPECT_TRUE(list_dir(layout_.staging_dir()).empty());
}

TEST_F(PullHttp, UnpinnedResumeUsesIfRangeWithTheValidator) {
  Route r = body_route(400000);
  const std::string body = r.body;
  r.etag = "\"v1\"";
  r.drop_after_bytes = 100000;
  r.drop_count = 1;
  server_.set_route("/m.gguf", r);
  ASSERT_FALSE(pull_url(server_.url("/m.gguf")).ok());
  auto m = pull_url(server_.url("/m.gguf"));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto reqs = server_.requests_for("/m.gguf");
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[1].range, "bytes=100000-");
  EXPECT_EQ(reqs[1].if_range, "\"v1\"");
  EXPECT_EQ(m->parts[0].digest, digest_of(body));
}

TEST_F(PullHttp, UnpinnedResumeRestartsWhenTheResourceChanged) {
  Route r = body_route(400000);
  r.etag = "\"v1\"";
  r.drop_after_bytes = 100000;
  r.drop_count = 1;
  server_.set_route("/m.gguf", r);
  ASSERT_FALSE(pull_url(server_.url("/m.gguf")).ok());
  Route changed = body_route(400000, 99);
  changed.etag = "\"v2\"";
  server_.set_route("/m.gguf", changed);
  auto m = pull_url(server_.url("/m.gguf"));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->parts[0].digest, digest_of(changed.body));  // never a mix of v1 and v2
  EXPECT_EQ(server_.requests_for("/m.gguf")[1].status, 200);
}

TEST_F(PullHttp, RetriesWithinOnePullResume) {
  Route r = body_route(500000);
  const std::string body = r.body;
  r.drop_after_bytes = 150000;
  r.drop_count = 2;  // two drops, third request completes
  server_.set_route("/m.gguf", r);
  config_.attempts_per_source = 3;
  auto m = pull_url(server_.url("/m.gguf"), digest_of(body));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto reqs = server_.requests_for("/m.gguf");
  ASSERT_EQ(reqs.size(), 3u);
  EXPECT_EQ(reqs[1].range, "bytes=150000-");
  EXPECT_EQ(reqs[2].range, "bytes=300000-");
  EXPECT_EQ(blob_bytes(digest_of(body)), body);
  int retrying = 0;
  for (const auto& e : events_) retrying += e.status == "retrying";
  EXPECT_EQ(retrying, 2);
}

TEST_F(PullHttp, ServerIgnoringRangeRestartsFromZero) {
  Route r = body_route(400000);
  const std::string body = r.body;
  r.honor_range = false;
  r.drop_after_bytes = 100000;
  r.drop_count = 1;
  server_.set_route("/m.gguf", r);
  ASSERT_FALSE(pull_url(server_.url("/m.gguf"), digest_of(body)).ok());
  auto m = pull_url(server_.url("/m.gguf"), digest_of(body));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto reqs = server_.requests_for("/m.gguf");
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[1].range, "bytes=100000-");
  EXPECT_EQ(reqs[1].status, 200);
  EXPECT_EQ(blob_bytes(digest_of(body)), body);
}

TEST_F(PullHttp, WrongPrefixFromAnEarlierAttemptIsRedownloadedOnce) {
  Route r = body_route(300000);
  const std::string body = r.body;
  server_.set_route("/m.gguf", r);
  // A stale partial with garbage bytes, as another source could have left behind.
  const std::string staging =
      layout_.staging_dir() + "/" + blob_file_name(digest_of(body)) + ".partial";
  testing::write_text(staging, make_bytes(1000, 7));
  auto m = pull_url(server_.url("/m.gguf"), digest_of(body), body.size());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto reqs = server_.requests_for("/m.gguf");
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].range, "bytes=1000-");
  EXPECT_EQ(reqs[1].range, "");
  EXPECT_EQ(blob_bytes(digest_of(body)), body);
}

TEST_F(PullHttp, CompletePartialLeftByADeadProcessIsCommittedWithoutNetwork) {
  Route r = body_route(100000);
  const std::string body = r.body;
  server_.set_route("/m.gguf", r);
  testing::write_text(layout_.staging_dir() + "/" + blob_file_name(digest_of(body)) + ".partial",
                      body);
  auto m = pull_url(server_.url("/m.gguf"), digest_of(body));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_TRUE(server_.requests().empty());
  EXPECT_EQ(blob_bytes(digest_of(body)), body);
}

TEST_F(PullHttp, UnsatisfiableRangeRestartsFromZero) {
  Route r = body_route(1000);
  const std::string body = r.body;
  server_.set_route("/m.gguf", r);
  // A stale partial longer than the resource (pinned, size unknown): the server answers 416.
  testing::write_text(layout_.staging_dir() + "/" + blob_file_name(digest_of(body)) + ".partial",
                      make_bytes(2000, 3));
  auto m = pull_url(server_.url("/m.gguf"), digest_of(body));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto reqs = server_.requests_for("/m.gguf");
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].status, 416);
  EXPECT_EQ(reqs[1].range, "");
  EXPECT_EQ(blob_bytes(digest_of(body)), body);
}

TEST_F(PullHttp, CancelStopsAndKeepsThePartialForResume) {
  Route r = body_route(400000);
  const std::string body = r.body;
  r.chunk_bytes = 10000;
  r.chunk_delay_us = 20000;  // ~0.8 s
  server_.set_route("/m.gguf", r);
  std::atomic<bool> cancel{false};
  PullOptions o = options();
  o.cancel = &cancel;
  PullRequest req;
  req.name = "m";
  req.parts.push_back({server_.url("/m.gguf"), digest_of(body), body.size(), ""});
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    cancel = true;
  });
  auto m = pull(layout_, req, o);  // the body takes ~0.8 s: it finishes only if not cancelled
  canceller.join();
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kCancelled) << m.status().to_string();
  EXPECT_TRUE(list_dir(layout_.blobs_dir()).empty());
  ASSERT_EQ(list_dir(layout_.staging_dir()).size(), 1u);
  r.chunk_delay_us = 0;
  server_.set_route("/m.gguf", r);
  auto again = pull(layout_, req, options());
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  auto reqs = server_.requests_for("/m.gguf");
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_FALSE(reqs[1].range.empty());
  EXPECT_EQ(blob_bytes(digest_of(body)), body);
}

TEST_F(PullHttp, RedirectsAreFollowedWithinTheBound) {
  Route r = body_route();
  const std::string body = r.body;
  server_.set_route("/real.gguf", r);
  Route hop;
  hop.status = 302;
  hop.location = "/real.gguf";
  server_.set_route("/m.gguf", hop);
  auto m = pull_url(server_.url("/m.gguf"), digest_of(body));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->parts[0].filename, "m.gguf");

  // A chain longer than max_redirects.
  config_.max_redirects = 3;
  for (int i = 0; i < 5; ++i) {
    Route h;
    h.status = 307;
    h.location = i == 4 ? "/real.gguf" : "/hop" + std::to_string(i + 1);
    server_.set_route("/hop" + std::to_string(i), h);
  }
  auto chain = pull_url(server_.url("/hop0"), std::nullopt, {}, "chain");
  ASSERT_FALSE(chain.ok());
  EXPECT_NE(chain.status().to_string().find("too many redirects"), std::string::npos)
      << chain.status().to_string();
}

TEST_F(PullHttp, RedirectLoopIsAnError) {
  Route a, b;
  a.status = 302;
  a.location = "/b";
  b.status = 301;
  b.location = "/a";
  server_.set_route("/a", a);
  server_.set_route("/b", b);
  auto m = pull_url(server_.url("/a"));
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().to_string().find("too many redirects"), std::string::npos);
  EXPECT_LE(server_.requests().size(), 12u);
  expect_nothing_committed();
}

TEST_F(PullHttp, RedirectToAnotherProtocolIsRefused) {
  for (const char* target : {"file:///etc/passwd", "ftp://127.0.0.1/x", "gopher://x/"}) {
    Route hop;
    hop.status = 302;
    hop.location = target;
    server_.set_route("/m.gguf", hop);
    auto m = pull_url(server_.url("/m.gguf"));
    ASSERT_FALSE(m.ok()) << target;
    EXPECT_EQ(m.status().code(), StatusCode::kUnsupported) << m.status().to_string();
    expect_nothing_committed();
  }
}

TEST_F(PullHttp, HttpErrorsAreClear) {
  auto m = pull_url(server_.url("/missing.gguf"));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  EXPECT_NE(m.status().to_string().find("HTTP 404"), std::string::npos);
  Route r;
  r.status = 503;
  server_.set_route("/busy.gguf", r);
  config_.attempts_per_source = 2;
  auto busy = pull_url(server_.url("/busy.gguf"));
  ASSERT_FALSE(busy.ok());
  EXPECT_NE(busy.status().to_string().find("HTTP 503"), std::string::npos);
  EXPECT_EQ(server_.requests_for("/busy.gguf").size(), 2u);  // 5xx is retried
  expect_nothing_committed();
}

TEST_F(PullHttp, StalledServerTimesOut) {
  Route r = body_route(100000);
  r.header_delay_ms = 5000;
  server_.set_route("/slow.gguf", r);
  config_.low_speed_time_s = 1;
  auto m = pull_url(server_.url("/slow.gguf"));  // would succeed after 5 s without a timeout
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kDeadlineExceeded) << m.status().to_string();
}

TEST_F(PullHttp, SlowButSteadyBodySucceeds) {
  Route r = body_route(64 * 1024);
  const std::string body = r.body;
  r.chunk_bytes = 8192;
  r.chunk_delay_us = 100000;  // 80 KiB/s over ~0.8 s
  server_.set_route("/m.gguf", r);
  config_.low_speed_time_s = 1;
  auto m = pull_url(server_.url("/m.gguf"), digest_of(body));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
}

TEST_F(PullHttp, UnpinnedPullRecordsDigestAndLaterPullsAreHeldToIt) {
  Route r = body_route();
  const std::string body = r.body;
  server_.set_route("/m.gguf", r);
  auto m = pull_url(server_.url("/m.gguf"));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->parts[0].digest, digest_of(body));
  // Same source again: pinned to the recorded digest, so the blob is reused.
  server_.clear_log();
  ASSERT_TRUE(pull_url(server_.url("/m.gguf")).ok());
  EXPECT_TRUE(server_.requests().empty());
  // The upstream now serves other bytes: refused, with a way forward.
  std::remove(layout_.blob_path(digest_of(body)).c_str());
  Route other = body_route(300000, 2);
  server_.set_route("/m.gguf", other);
  auto changed = pull_url(server_.url("/m.gguf"));
  ASSERT_FALSE(changed.ok());
  EXPECT_EQ(changed.status().code(), StatusCode::kIntegrity);
  EXPECT_NE(changed.status().message().find("--sha256"), std::string::npos);
  // An explicit pin accepts the new bytes.
  auto accepted = pull_url(server_.url("/m.gguf"), digest_of(other.body));
  ASSERT_TRUE(accepted.ok()) << accepted.status().to_string();
}

TEST_F(PullHttp, ExistingBlobIsCheckedBeforeReuse) {
  Route r = body_route();
  const std::string body = r.body;
  server_.set_route("/m.gguf", r);
  ASSERT_TRUE(pull_url(server_.url("/m.gguf"), digest_of(body), body.size()).ok());
  const std::string blob = layout_.blob_path(digest_of(body));
  // Same size, flipped byte: only --verify (hash) notices.
  std::string bad = body;
  bad[1234] ^= 1;
  ::chmod(blob.c_str(), 0644);
  testing::write_text(blob, bad);
  server_.clear_log();
  ASSERT_TRUE(pull_url(server_.url("/m.gguf"), digest_of(body), body.size()).ok());
  EXPECT_TRUE(server_.requests().empty());
  PullRequest req;
  req.parts.push_back({server_.url("/m.gguf"), digest_of(body), body.size(), ""});
  req.name = "m";
  req.verify_existing = true;
  ASSERT_TRUE(pull(layout_, req, options()).ok());
  EXPECT_EQ(server_.full_body_gets("/m.gguf"), 1);
  EXPECT_EQ(blob_bytes(digest_of(body)), body);
  // Truncated blob: the size check alone notices.
  ::chmod(blob.c_str(), 0644);
  testing::write_text(blob, body.substr(0, 100));
  ASSERT_TRUE(pull_url(server_.url("/m.gguf"), digest_of(body)).ok());  // size from manifest
  EXPECT_EQ(server_.full_body_gets("/m.gguf"), 2);
  EXPECT_EQ(blob_bytes(digest_of(body)), body);
}

TEST_F(PullHttp, WrongDeclaredSizeNeverDeletesAGoodBlob) {
  Route r = body_route();
  const std::string body = r.body;
  server_.set_route("/m.gguf", r);
  ASSERT_TRUE(pull_url(server_.url("/m.gguf"), digest_of(body)).ok());
  server_.clear_log();
  auto m = pull_url(server_.url("/m.gguf"), digest_of(body), body.size() + 1, "typo");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kIntegrity);
  EXPECT_NE(m.status().message().find("declared size"), std::string::npos);
  EXPECT_TRUE(server_.requests().empty());
  EXPECT_EQ(blob_bytes(digest_of(body)), body);
}

TEST_F(PullHttp, WriteFailureIsClearAndCommitsNothing) {
  Route r = body_route(300000);
  const std::string body = r.body;
  server_.set_route("/m.gguf", r);
  PullOptions o = options();
  o.fault_write_limit_bytes = 100000;
  PullRequest req;
  req.parts.push_back({server_.url("/m.gguf"), digest_of(body), {}, ""});
  req.name = "m";
  auto m = pull(layout_, req, o);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kResourceExhausted) << m.status().to_string();
  EXPECT_NE(m.status().to_string().find("No space left on device"), std::string::npos);
  expect_nothing_committed();
}

}  // namespace
}  // namespace power::store
