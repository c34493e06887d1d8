// The `power` store commands in child processes: concurrent pulls of one artifact, kill -9
// at random moments, and the CLI's output and exit codes.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <random>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/file.h"
#include "store/manifest.h"
#include "store_test_util.h"
#include "test_http_server.h"
#include "test_util.h"

namespace power::store {
namespace {

using testing::digest_of;
using testing::list_dir;
using testing::make_bytes;
using testing::Route;
using testing::TestHttpServer;

class Processes : public testing::StoreFixture {
 protected:
  std::map<std::string, std::string> env() const {
    return {{"POWER_HOME", home_}, {"POWER_MIRRORS", ""}, {"POWER_LOG", "error"}};
  }
  std::vector<std::string> cli(std::vector<std::string> args) const {
    args.insert(args.begin(), POWER_STORE_CLI);
    return args;
  }
  // Every file in blobs/ is sha256-<hex> and its bytes hash to that name.
  void expect_blobs_intact(const std::string& context) {
    for (const auto& name : list_dir(layout_.blobs_dir())) {
      ASSERT_EQ(name.rfind("sha256-", 0), 0u) << context << ": stray file in blobs/: " << name;
      auto d = sha256_file(layout_.blobs_dir() + "/" + name);
      ASSERT_TRUE(d.ok());
      ASSERT_EQ("sha256-" + to_hex(*d), name) << context << ": blob does not match its name";
    }
    auto entries = list_manifests(layout_);
    ASSERT_TRUE(entries.ok());
    for (const auto& e : *entries) {
      ASSERT_TRUE(e.manifest.has_value()) << context << ": " << e.error.to_string();
      for (const auto& p : e.manifest->parts) {
        ASSERT_TRUE(read_file(layout_.blob_path(p.digest)).ok())
            << context << ": manifest " << e.name << " references a missing blob";
      }
    }
  }
  void concurrent_pulls(bool pinned) {
    Route r;
    r.body = make_bytes(2 << 20, 3);
    r.chunk_bytes = 64 * 1024;
    r.chunk_delay_us = 5000;  // ~160 ms per download, so the pullers overlap
    r.etag = "\"e\"";
    server_.set_route("/m.gguf", r);
    std::vector<std::string> args = {"pull", server_.url("/m.gguf"), "--name",
                                     "m",    "--progress",           "json"};
    if (pinned) {
      args.push_back("--sha256");
      args.push_back(to_hex(digest_of(r.body)));
    }
    std::vector<pid_t> pids;
    for (int i = 0; i < 8; ++i) {
      std::string p = home_ + "/proc" + std::to_string(i);
      pids.push_back(testing::spawn_process(cli(args), env(), p + ".out", p + ".err"));
      ASSERT_GT(pids.back(), 0);
    }
    for (size_t i = 0; i < pids.size(); ++i) {
      int code = testing::wait_process(pids[i], 60000);
      auto err = read_file_text(home_ + "/proc" + std::to_string(i) + ".err");
      EXPECT_EQ(code, 0) << (err.ok() ? *err : "");
    }
    EXPECT_EQ(server_.full_body_gets("/m.gguf"), 1);
    EXPECT_EQ(list_dir(layout_.blobs_dir()),
              std::vector<std::string>{"sha256-" + to_hex(digest_of(r.body))});
    EXPECT_TRUE(list_dir(layout_.staging_dir()).empty());
    expect_blobs_intact("after concurrent pulls");
    auto m = read_manifest(layout_, "m");
    ASSERT_TRUE(m.ok());
    EXPECT_EQ(m->parts[0].digest, digest_of(r.body));
  }
  TestHttpServer server_;
};

TEST_F(Processes, EightPinnedPullsDownloadOnce) {
  concurrent_pulls(true);
}
TEST_F(Processes, EightUnpinnedPullsDownloadOnce) {
  concurrent_pulls(false);
}

// 100 pullers killed with SIGKILL at random moments (before, during and after the download,
// during commit). The store must never hold a partial or wrong blob, and the next pull works.
TEST_F(Processes, KillNineAtRandomMomentsNeverCorruptsTheStore) {
  Route r;
  r.body = make_bytes(256 * 1024, 4);
  r.chunk_bytes = 16 * 1024;
  r.chunk_delay_us = 2000;  // ~35 ms of body
  r.etag = "\"k\"";
  server_.set_route("/m.gguf", r);
  const std::string hex = to_hex(digest_of(r.body));
  const uint32_t seed = std::random_device{}();
  std::printf("kill -9 trials: seed %u\n", seed);
  std::mt19937 rng(seed);
  // Kill moments span one whole uninterrupted pull (start-up, download, commit, manifest),
  // measured here so that slow machines and sanitizer builds get the same coverage.
  auto t0 = std::chrono::steady_clock::now();
  auto full = testing::run_process(
      cli({"pull", server_.url("/m.gguf"), "--name", "m", "--sha256", hex, "--progress", "none"}),
      env());
  ASSERT_EQ(full.exit_code, 0) << full.err;
  const auto full_us =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  ::unlink(layout_.blob_path(digest_of(r.body)).c_str());
  ::unlink(layout_.manifest_path("m").c_str());
  std::uniform_int_distribution<int64_t> delay_us(0, full_us * 11 / 10);
  std::printf("kill -9 trials: an uninterrupted pull takes %.1f ms\n", full_us / 1000.0);
  int committed = 0, killed = 0, finished = 0;
  auto start = std::chrono::steady_clock::now();
  for (int trial = 0; trial < 100; ++trial) {
    std::vector<std::string> args = {"pull", server_.url("/m.gguf"), "--name",
                                     "m",    "--progress",           "none"};
    if (trial % 2 == 0) {
      args.push_back("--sha256");
      args.push_back(hex);
    }
    pid_t pid = testing::spawn_process(cli(args), env(), "/dev/null", "/dev/null");
    ASSERT_GT(pid, 0);
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us(rng)));
    ::kill(pid, SIGKILL);
    int code = testing::wait_process(pid, 10000);
    if (code == 0) ++finished;
    if (code == 128 + SIGKILL) ++killed;
    const std::string context = "trial " + std::to_string(trial) + " seed " + std::to_string(seed);
    expect_blobs_intact(context);
    if (::testing::Test::HasFatalFailure()) return;
    // Start the next trial without the blob, but keep staging/ so resumes are exercised.
    if (!list_dir(layout_.blobs_dir()).empty()) ++committed;
    ::unlink(layout_.blob_path(digest_of(r.body)).c_str());
    ::unlink(layout_.manifest_path("m").c_str());
  }
  auto secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("kill -9 trials: %d killed, %d finished first, %d left a blob, %.1f s\n", killed,
              finished, committed, secs);
  server_.clear_log();
  auto final_pull = testing::run_process(
      cli({"pull", server_.url("/m.gguf"), "--name", "m", "--sha256", hex, "--progress", "none"}),
      env());
  ASSERT_EQ(final_pull.exit_code, 0) << final_pull.err;
  auto blob = read_file_text(layout_.blob_path(digest_of(r.body)));
  ASSERT_TRUE(blob.ok());
  EXPECT_EQ(*blob, r.body);
  // The pinned pull consumed its partial; an unpinned trial's partial (keyed by URL) may stay
  // for that source's next pull.
  for (const auto& f : list_dir(layout_.staging_dir())) {
    EXPECT_EQ(f.rfind("url-", 0), 0u) << f;
  }
  expect_blobs_intact("final");
}

TEST_F(Processes, CliPullLsShowRm) {
  Route r;
  r.body = make_bytes(300000, 5);
  server_.set_route("/dir/tiny.gguf", r);
  const std::string hex = to_hex(digest_of(r.body));
  auto p = testing::run_process(
      cli({"pull", server_.url("/dir/tiny.gguf"), "--sha256", hex, "--size",
           std::to_string(r.body.size()), "--license", "MIT", "--param", "temperature=0.5"}),
      env());
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_NE(p.out.find("pulled tiny"), std::string::npos) << p.out;
  // stderr is not a terminal: JSON lines.
  std::istringstream lines(p.err);
  std::string line, last_status;
  bool saw_progress = false;
  while (std::getline(lines, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << "not JSON: " << line;
    last_status = j.value("status", "");
    if (last_status == "downloading") {
      saw_progress = true;
      EXPECT_EQ(j.value("total", 0u), r.body.size());
      EXPECT_EQ(j.value("digest", ""), "sha256:" + hex);
      EXPECT_TRUE(j.contains("completed"));
    }
  }
  EXPECT_TRUE(saw_progress);
  EXPECT_EQ(last_status, "success");

  auto ls = testing::run_process(cli({"ls"}), env());
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  EXPECT_NE(ls.out.find("tiny"), std::string::npos);
  EXPECT_NE(ls.out.find(hex.substr(0, 12)), std::string::npos);
  auto lsj = testing::run_process(cli({"ls", "--json"}), env());
  auto arr = nlohmann::json::parse(lsj.out, nullptr, false);
  ASSERT_TRUE(arr.is_array()) << lsj.out;
  ASSERT_EQ(arr.size(), 1u);
  EXPECT_EQ(arr[0]["name"], "tiny");
  EXPECT_EQ(arr[0]["size_bytes"], r.body.size());

  auto show = testing::run_process(cli({"show", "tiny", "--json", "--verify"}), env());
  ASSERT_EQ(show.exit_code, 0) << show.err;
  auto m = parse_manifest(show.out);
  ASSERT_TRUE(m.ok()) << show.out;
  EXPECT_EQ(m->license, "MIT");
  EXPECT_EQ(m->parameters["temperature"], 0.5);
  auto show_text = testing::run_process(cli({"show", "tiny"}), env());
  EXPECT_NE(show_text.out.find(layout_.blob_path(digest_of(r.body))), std::string::npos);

  auto bad = testing::run_process(cli({"pull", server_.url("/dir/tiny.gguf"), "--name", "other",
                                       "--sha256", std::string(64, 'a'), "--progress", "none"}),
                                  env());
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("power: error: integrity: SHA-256 mismatch"), std::string::npos)
      << bad.err;
  auto miscount = testing::run_process(
      cli({"pull", "a.gguf", "b.gguf", "--sha256", hex, "--progress", "none"}), env());
  EXPECT_EQ(miscount.exit_code, 1);
  EXPECT_NE(miscount.err.find("once per SOURCE"), std::string::npos) << miscount.err;

  auto rm = testing::run_process(cli({"rm", "tiny"}), env());
  ASSERT_EQ(rm.exit_code, 0) << rm.err;
  EXPECT_NE(rm.out.find("deleted 'tiny'"), std::string::npos);
  EXPECT_NE(rm.out.find("(1 blob)"), std::string::npos) << rm.out;
  EXPECT_TRUE(list_dir(layout_.blobs_dir()).empty());
  auto rm_again = testing::run_process(cli({"rm", "tiny"}), env());
  EXPECT_EQ(rm_again.exit_code, 1);
  EXPECT_NE(rm_again.err.find("not found"), std::string::npos);
  auto show_missing = testing::run_process(cli({"show", "tiny"}), env());
  EXPECT_EQ(show_missing.exit_code, 1);
}

TEST_F(Processes, PsWithoutAServerSaysSo) {
  // A port nobody listens on.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  ::close(fd);
  auto e = env();
  e["POWER_HOST"] = "127.0.0.1:" + std::to_string(port);
  auto ps = testing::run_process(cli({"ps"}), e);
  EXPECT_EQ(ps.exit_code, 1);
  EXPECT_NE(ps.err.find("no Power server is running at http://127.0.0.1:" + std::to_string(port) +
                        " (connection refused)"),
            std::string::npos)
      << ps.err;
}

TEST_F(Processes, PsListsModelsOfARunningServer) {
  Route r;
  r.body =
      R"({"models":[{"name":"stories260K","digest":"sha256:0123456789abcdef","size_bytes":1056540,"expires_at":"2030-01-01T00:00:00Z"}]})";
  server_.set_route("/api/ps", r);
  auto e = env();
  e["POWER_HOST"] = server_.base_url();
  auto ps = testing::run_process(cli({"ps"}), e);
  ASSERT_EQ(ps.exit_code, 0) << ps.err;
  EXPECT_NE(ps.out.find("stories260K"), std::string::npos) << ps.out;
  EXPECT_NE(ps.out.find("0123456789ab"), std::string::npos) << ps.out;
  // A model whose weights stream (docs/RESIDENCY.md): what stays, what streams, what was read.
  r.body =
      R"({"models":[{"name":"big","digest":"sha256:0123456789abcdef","size_bytes":3000000,"residency":"streamed","weights":{"pinned_bytes":1048576,"streamed_bytes":2097152,"read_bytes":10485760},"expires_at":"never"}]})";
  server_.set_route("/api/ps", r);
  auto streamed = testing::run_process(cli({"ps"}), e);
  ASSERT_EQ(streamed.exit_code, 0) << streamed.err;
  EXPECT_NE(streamed.out.find("WEIGHTS"), std::string::npos) << streamed.out;
  EXPECT_NE(streamed.out.find("1.0 MiB resident, 2.0 MiB streamed, 10.0 MiB read"),
            std::string::npos)
      << streamed.out;  // With a mirror: its reads, fallbacks, and the bytes read per token (both
                        // sources).
  r.body =
      R"({"models":[{"name":"big","digest":"sha256:0123456789abcdef","size_bytes":3000000,"residency":"streamed","weights":{"pinned_bytes":1048576,"streamed_bytes":2097152,"read_bytes":1048576,"read_bytes_per_token":2097152.0,"mirror":{"dir":"/m/sha256-01","bytes":2097152,"group_reads":9,"read_bytes":9437184,"fallbacks":2}},"expires_at":"never"}]})";
  server_.set_route("/api/ps", r);
  auto mirrored = testing::run_process(cli({"ps"}), e);
  ASSERT_EQ(mirrored.exit_code, 0) << mirrored.err;
  EXPECT_NE(mirrored.out.find("1.0 MiB resident, 2.0 MiB streamed, 1.0 MiB read + 9.0 MiB from "
                              "mirror (2 fallbacks), 2.0 MiB/token"),
            std::string::npos)
      << mirrored.out;
}

}  // namespace
}  // namespace power::store
