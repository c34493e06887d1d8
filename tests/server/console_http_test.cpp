// The web console's server side (server/console.h, docs/CONSOLE.md): the page and its files
// byte for byte as in src/server/ui, their caching and security headers, open without a key
// while the API is not, off with --no-ui; and the endpoints the page reads: the receipt key
// (the runtime's), the latest refusals with their reasons, /api/ps's memory split and the
// llama-server "timings" of an answer.
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/sha256.h"
#include "receipt/signing_key.h"
#include "server/http_test_util.h"
#include "server/ui_assets.h"
#include "test_util.h"

namespace power::server {
namespace {

using json = nlohmann::json;
using http_test::RawReply;
using http_test::request_raw;

std::string header(const RawReply& r, const std::string& name) {  // name lower-case
  const size_t at = r.head.find("\r\n" + name + ": ");
  if (at == std::string::npos) return {};
  const size_t from = at + name.size() + 4;
  return r.head.substr(from, r.head.find("\r\n", from) - from);
}

std::string read_source(const std::string& name) {
  std::ifstream f(std::string(POWER_UI_SOURCE_DIR) + "/" + name, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(ConsoleAssets, EmbeddedFilesAreTheSourceFilesWithTheirDigests) {
  ASSERT_GE(ui_assets().size(), 6u);
  for (const UiAsset& a : ui_assets()) {
    const std::string src = read_source(std::string(a.path.substr(1)));
    ASSERT_FALSE(src.empty()) << a.path;
    EXPECT_EQ(a.body, src) << a.path;
    EXPECT_EQ(a.sha256, sha256_hex(src)) << a.path;
  }
}

TEST(ConsoleAssets, ConfigKeysTurnTheConsoleOff) {
  ServerOptions o;
  EXPECT_TRUE(o.ui);
  ASSERT_TRUE(apply_config_json(json{{"ui", false}}, &o).ok());
  EXPECT_FALSE(o.ui);
  ASSERT_TRUE(apply_config_json(json{{"no-ui", false}}, &o).ok());
  EXPECT_TRUE(o.ui);
  ASSERT_TRUE(apply_config_json(json{{"no_ui", true}}, &o).ok());
  EXPECT_FALSE(o.ui);
  EXPECT_FALSE(apply_config_json(json{{"ui", "off"}}, &o).ok());
}

class ConsoleServer : public ::testing::Test {
 protected:
  void start(bool ui) {
    if (!testing::shared_available()) return;
    home_ = testing::make_temp_dir("power-console-home");
    ::setenv("POWER_HOME", home_.c_str(), 1);
    std::ofstream(home_ + "/keys.txt") << "sk-console\n";
    ServerOptions o = http_test::stories_options(testing::shared_dir(), 256);
    o.api_key_file = home_ + "/keys.txt";
    o.ui = ui;
    o.load.max_running = 1;
    o.load.max_waiting = 1;
    Status st = server_.start(std::move(o));
    ASSERT_TRUE(st.ok()) << st.to_string();
    port_ = server_.port();
  }
  void SetUp() override { start(true); }
  void TearDown() override {
    server_.stop();
    ::unsetenv("POWER_HOME");
    if (!home_.empty()) testing::remove_tree(home_);
  }
  RawReply get(const std::string& path, const std::string& headers = kAuth) {
    return request_raw(port_, "GET", path, "", "application/json", headers);
  }
  static constexpr const char* kAuth = "Authorization: Bearer sk-console\r\n";
  http_test::InProcessServer server_;
  int port_ = 0;
  std::string home_;
};

TEST_F(ConsoleServer, PageAndFilesWithoutAKeyTheApiWithOne) {
  POWER_REQUIRE_SHARED();
  RawReply page = get("/", "");
  ASSERT_EQ(page.status, 200) << page.body;
  EXPECT_EQ(page.body, read_source("index.html"));
  EXPECT_EQ(header(page, "content-type"), "text/html; charset=utf-8");
  EXPECT_EQ(header(page, "etag"), "\"" + sha256_hex(page.body) + "\"");
  EXPECT_EQ(header(page, "cache-control"), "no-cache");
  EXPECT_EQ(header(page, "x-content-type-options"), "nosniff");
  // Nothing may load from elsewhere; the page's own files only.
  const std::string csp = header(page, "content-security-policy");
  EXPECT_NE(csp.find("default-src 'none'"), std::string::npos) << csp;
  EXPECT_NE(csp.find("script-src 'self'"), std::string::npos) << csp;
  EXPECT_NE(csp.find("frame-ancestors 'none'"), std::string::npos) << csp;
  EXPECT_EQ(get("/index.html", "").body, page.body);
  for (const char* f : {"app.js", "receipt.js", "metrics.js", "sse.js", "console.css"}) {
    RawReply r = get(std::string("/ui/") + f, "");
    EXPECT_EQ(r.status, 200) << f;
    EXPECT_EQ(r.body, read_source(f)) << f;
  }
  EXPECT_EQ(header(get("/ui/app.js", ""), "content-type"), "text/javascript; charset=utf-8");
  EXPECT_EQ(header(get("/ui/console.css", ""), "content-type"), "text/css; charset=utf-8");
  // A revalidation with the ETag: 304, no body.
  RawReply again = get("/", "If-None-Match: " + header(page, "etag") + "\r\n");
  EXPECT_EQ(again.status, 304);
  EXPECT_TRUE(again.body.empty());
  EXPECT_EQ(get("/", "If-None-Match: \"stale\"\r\n").status, 200);
  // The API still needs the key.
  EXPECT_EQ(get("/api/ps", "").status, 401);
  EXPECT_EQ(get("/api/ps").status, 200);
}

TEST_F(ConsoleServer, UnknownAndHostilePathsAreNotFound) {
  POWER_REQUIRE_SHARED();
  for (const char* p : {"/ui/", "/ui/nope.js", "/ui/..%2fserver.cpp", "/ui/../index.html",
                        "/ui/app.js.map", "/ui/APP.JS", "/ui//app.js", "/ui/app.js/x"}) {
    // Under /ui/ (open without a key): not found, in OpenAI's error shape; never a file.
    RawReply r = get(p, "");
    EXPECT_EQ(r.status, 404) << p;
    EXPECT_EQ(json::parse(r.body, nullptr, false)["error"]["code"], "not_found") << p;
    EXPECT_EQ(r.body.find("<!doctype"), std::string::npos) << p;
    EXPECT_EQ(r.body.find("import "), std::string::npos) << p;
  }
  const std::string long_name = "/ui/" + std::string(5000, 'a') + ".js";
  EXPECT_NE(get(long_name, "").status, 200);
}

TEST_F(ConsoleServer, ReceiptKeyIsTheRuntimesKey) {
  POWER_REQUIRE_SHARED();
  RawReply r = get("/api/receipts/key");
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["alg"], "Ed25519");
  auto key = receipt::SigningKey::load_or_create(home_ + "/keys");
  ASSERT_TRUE(key.ok()) << key.status().to_string();
  EXPECT_EQ(j["public_key"], (*key)->public_key_hex());
  // A receipt the server signs names that key.
  json body = {{"model", "stories260K-F32"},
               {"messages", {{{"role", "user"}, {"content", "Hi"}}}},
               {"max_tokens", 4},
               {"temperature", 0},
               {"power_receipt", true}};
  RawReply c =
      request_raw(port_, "POST", "/v1/chat/completions", body.dump(), "application/json", kAuth);
  ASSERT_EQ(c.status, 200) << c.body;
  json receipt = json::parse(json::parse(c.body)["power_receipt"].get<std::string>());
  EXPECT_EQ(receipt["signature"]["public_key"], j["public_key"]);
}

TEST_F(ConsoleServer, RefusalsKeepTheirReasonsNewestLast) {
  POWER_REQUIRE_SHARED();
  EXPECT_EQ(get("/v1/models", "").status, 401);
  EXPECT_EQ(get("/no/such/route").status, 404);
  json j = json::parse(get("/api/refusals").body);
  ASSERT_GE(j["refusals"].size(), 2u);
  const json& last = j["refusals"].back();
  EXPECT_EQ(last["reason"], "not_found");
  EXPECT_EQ(last["status"], 404);
  EXPECT_EQ(last["message"], "no route for GET /no/such/route");
  const json& before = j["refusals"][j["refusals"].size() - 2];
  EXPECT_EQ(before["reason"], "unauthorized");
  EXPECT_GT(last["time_ms"].get<int64_t>(), 1600000000000);  // Unix milliseconds
  // The ring keeps the latest 64.
  for (int i = 0; i < 70; ++i) get("/missing/" + std::to_string(i));
  j = json::parse(get("/api/refusals").body);
  ASSERT_EQ(j["refusals"].size(), 64u);
  EXPECT_EQ(j["refusals"].back()["message"], "no route for GET /missing/69");
  EXPECT_EQ(j["refusals"].front()["message"], "no route for GET /missing/6");
}

TEST_F(ConsoleServer, PsSplitsMemoryAndAnswersCarryTimings) {
  POWER_REQUIRE_SHARED();
  json ps = json::parse(get("/api/ps").body);
  ASSERT_EQ(ps["models"].size(), 1u);
  const json& m = ps["models"][0];
  EXPECT_EQ(m["weights_bytes"].get<uint64_t>() + m["kv_cache_bytes"].get<uint64_t>() +
                m["state_bytes"].get<uint64_t>() + m["scratch_bytes"].get<uint64_t>(),
            m["size"].get<uint64_t>());
  EXPECT_EQ(m["state_bytes"], 0);  // no recurrent layers in a llama
  EXPECT_EQ(m["residency"], "mmap");
  EXPECT_EQ(m["replicas"], 1);
  EXPECT_EQ(m["arch"], "llama");
  json body = {{"model", "stories260K-F32"},
               {"messages", {{{"role", "user"}, {"content", "Once upon a time"}}}},
               {"max_tokens", 9},
               {"temperature", 0}};
  auto ask = [&](bool stream) {
    json b = body;
    if (stream) {
      b["stream"] = true;
      b["stream_options"] = {{"include_usage", true}};
    }
    return request_raw(port_, "POST", "/v1/chat/completions", b.dump(), "application/json", kAuth);
  };
  RawReply r = ask(false);
  ASSERT_EQ(r.status, 200) << r.body;
  json a = json::parse(r.body);
  const json& t = a["timings"];
  EXPECT_EQ(t["predicted_n"], a["usage"]["completion_tokens"]);
  EXPECT_EQ(t["prompt_n"].get<int64_t>(),
            a["usage"]["prompt_tokens"].get<int64_t>() -
                a["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>());
  EXPECT_GT(t["predicted_ms"].get<double>(), 0);
  // Tokens after the first over the time after the first.
  EXPECT_NEAR(t["predicted_per_second"].get<double>(), 8 / (t["predicted_ms"].get<double>() / 1000),
              1e-6 * t["predicted_per_second"].get<double>());
  EXPECT_GE(t["time_to_first_token_ms"].get<double>(), t["queue_ms"].get<double>());
  // Streamed: on the usage chunk, the second time with the prompt from the prefix cache.
  RawReply s = ask(true);
  ASSERT_EQ(s.status, 200);
  const size_t at = s.body.find("\"timings\"");
  ASSERT_NE(at, std::string::npos) << s.body;
  const size_t start = s.body.rfind("data: ", at) + 6;
  json chunk = json::parse(s.body.substr(start, s.body.find("\n\n", start) - start));
  EXPECT_TRUE(chunk.contains("usage"));
  EXPECT_EQ(chunk["timings"]["predicted_n"], 9);
  EXPECT_LT(chunk["timings"]["prompt_n"].get<int64_t>(),
            chunk["usage"]["prompt_tokens"].get<int64_t>());
}

class NoUiServer : public ConsoleServer {
 protected:
  void SetUp() override { start(false); }
};

TEST_F(NoUiServer, NoConsoleAndItsPathsNeedTheKeyLikeAnyOther) {
  POWER_REQUIRE_SHARED();
  EXPECT_EQ(get("/", "").status, 401);
  RawReply r = get("/");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(json::parse(r.body)["error"]["code"], "not_found");
  EXPECT_EQ(get("/ui/app.js").status, 404);
}

}  // namespace
}  // namespace power::server
