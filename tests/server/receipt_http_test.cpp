// HTTP-level tests of the receipt field group (docs/RECEIPTS.md) against an in-process
// `power serve` with stories260K: power_policy refusals (409 with the reason, before any
// compute), power_receipt in the body with the X-Power-Receipt-SHA256 header, the streamed
// power.receipt event before [DONE], and the receipt verifying with the runtime's key.

#include <cstdlib>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/sha256.h"
#include "receipt/receipt.h"
#include "receipt/signing_key.h"
#include "server/http_test_util.h"
#include "server/server.h"
#include "test_util.h"

namespace power::server {
namespace {

using json = nlohmann::json;
using Raw = http_test::RawReply;

Raw post(int port, const json& body) {
  return http_test::post_raw(port, "/v1/chat/completions", body.dump());
}

class ReceiptHttp : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::shared_available()) return;
    home_ = testing::make_temp_dir("power_receipt_http");
    ::setenv("POWER_HOME", home_.c_str(), 1);
    ServerOptions o;
    o.models = {model_path()};
    o.load.n_ctx = 256;
    o.load.threads = 1;
    Status st = server_.start(std::move(o));
    ASSERT_TRUE(st.ok()) << st.to_string();
    port_ = server_.port();
  }
  void TearDown() override {
    server_.stop();
    if (!home_.empty()) {
      ::unsetenv("POWER_HOME");
      testing::remove_tree(home_);
    }
  }
  static std::string model_path() {
    return testing::shared_dir() + "/models/stories260K/stories260K-F32.gguf";
  }
  json chat(json extra) {
    json body = {{"model", "stories260K-F32"},
                 {"messages", json::array({{{"role", "user"}, {"content", "Tell a story"}}})},
                 {"max_tokens", 16},
                 {"temperature", 0}};
    for (auto& [k, v] : extra.items()) body[k] = v;
    return body;
  }
  std::vector<receipt::VerifyCheck> verify(const std::string& rec) {
    receipt::VerifyOptions vo;
    auto key = receipt::SigningKey::load_or_create(home_ + "/keys");
    EXPECT_TRUE(key.ok());
    vo.public_key = (*key)->public_key();
    vo.request_json = R"({"messages":[{"role":"user","content":"Tell a story"}]})";
    return receipt::verify_receipt(rec, vo);
  }
  std::string home_;
  http_test::InProcessServer server_;
  int port_ = 0;
};

TEST_F(ReceiptHttp, PolicyRefusedWith409AndTheReason) {
  POWER_REQUIRE_SHARED();
  Raw r = post(
      port_,
      chat({{"power_policy",
             {{"allowed_model_sha256", {std::string(64, '0')}}, {"min_power_version", "99.0"}}}}));
  ASSERT_EQ(r.status, 409) << r.body;
  const json body = json::parse(r.body, nullptr, false);
  EXPECT_EQ(body["error"]["code"], "policy_refused");
  EXPECT_EQ(body["error"]["param"], "power_policy");
  const std::string msg = body["error"]["message"].get<std::string>();
  EXPECT_NE(msg.find("is not in allowed_model_sha256"), std::string::npos) << msg;
  EXPECT_NE(msg.find("older than min_power_version 99.0"), std::string::npos) << msg;

  Raw typo = post(port_, chat({{"power_policy", {{"require_signatur", true}}}}));
  EXPECT_EQ(typo.status, 400) << typo.body;
  EXPECT_NE(typo.body.find("unknown policy member"), std::string::npos) << typo.body;
  Raw streamed =
      post(port_, chat({{"stream", true}, {"power_policy", {{"allowed_devices", {"cuda"}}}}}));
  EXPECT_EQ(streamed.status, 409) << streamed.body;
}

TEST_F(ReceiptHttp, ReceiptInBodyAndHeader) {
  POWER_REQUIRE_SHARED();
  auto digest = sha256_file(model_path());
  ASSERT_TRUE(digest.ok());
  Raw r = post(port_, chat({{"power_receipt", true},
                            {"power_policy",
                             {{"allowed_model_sha256", {to_hex(*digest)}},
                              {"require_signature", true},
                              {"require_deterministic", true}}}}));
  ASSERT_EQ(r.status, 200) << r.body;
  const json body = json::parse(r.body, nullptr, false);
  ASSERT_TRUE(body["power_receipt"].is_string()) << r.body;
  const std::string rec = body["power_receipt"].get<std::string>();
  EXPECT_NE(r.head.find("x-power-receipt-sha256: " + sha256_hex(rec)), std::string::npos) << r.head;
  auto checks = verify(rec);
  for (const auto& c : checks) EXPECT_TRUE(c.ok) << c.name << ": " << c.detail;
  const json parsed = json::parse(rec);
  EXPECT_EQ(parsed["output"]["text_sha256"],
            sha256_hex(body["choices"][0]["message"]["content"].get<std::string>()));
  // Not asked for: no receipt, no header.
  Raw plain = post(port_, chat({}));
  ASSERT_EQ(plain.status, 200);
  EXPECT_FALSE(json::parse(plain.body).contains("power_receipt"));
  EXPECT_EQ(plain.head.find("x-power-receipt-sha256"), std::string::npos);
}

TEST_F(ReceiptHttp, StreamEndsWithTheReceiptEvent) {
  POWER_REQUIRE_SHARED();
  Raw r = post(port_, chat({{"stream", true}, {"power_receipt", true}}));
  ASSERT_EQ(r.status, 200) << r.body;
  std::vector<std::string> events;
  size_t i = 0;
  while ((i = r.body.find("data: ", i)) != std::string::npos) {
    const size_t end = r.body.find("\n\n", i);
    events.push_back(r.body.substr(i + 6, end - i - 6));
    i = end;
  }
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  const json ev = json::parse(events[events.size() - 2], nullptr, false);
  ASSERT_EQ(ev["object"], "power.receipt") << events[events.size() - 2];
  const std::string rec = ev["receipt"].get<std::string>();
  EXPECT_EQ(ev["sha256"], sha256_hex(rec));
  std::string text;
  for (size_t k = 0; k + 2 < events.size(); ++k) {
    const json chunk = json::parse(events[k], nullptr, false);
    if (chunk.contains("choices") && !chunk["choices"].empty() &&
        chunk["choices"][0]["delta"].contains("content")) {
      text += chunk["choices"][0]["delta"]["content"].get<std::string>();
    }
  }
  for (const auto& c : verify(rec)) EXPECT_TRUE(c.ok) << c.name << ": " << c.detail;
  EXPECT_EQ(json::parse(rec)["output"]["text_sha256"], sha256_hex(text));
}

}  // namespace
}  // namespace power::server
