// HTTP-level tests of the grammar field group (docs/STRUCTURED_OUTPUT.md): response_format,
// logprobs/top_logprobs, tools/tool_choice and tool messages on /v1/chat/completions, against
// an in-process `power serve` with stories260K. Responses are checked in OpenAI's shapes.

#include <cmath>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "server/http_test_util.h"
#include "server/server.h"
#include "test_util.h"

namespace power::server {
namespace {

using json = nlohmann::json;
using http_test::post_chat;
using Reply = http_test::JsonReply;

class GrammarHttp : public http_test::StoriesServerTest {
 protected:
  json chat(json extra) {
    json body = {{"model", "stories260K-F32"},
                 {"messages", json::array({{{"role", "user"}, {"content", "Tell a story"}}})},
                 {"max_tokens", 120},
                 {"seed", 11}};
    for (auto& [k, v] : extra.items()) body[k] = v;
    return body;
  }
};

TEST_F(GrammarHttp, JsonSchemaResponseValidates) {
  POWER_REQUIRE_SHARED();
  const json schema = {
      {"type", "object"},
      {"properties",
       {{"title", {{"type", "string"}, {"maxLength", 10}}}, {"stars", {{"type", "integer"}}}}},
      {"required", {"title", "stars"}},
      {"additionalProperties", false}};
  Reply r = post_chat(
      port_,
      chat({{"response_format",
             {{"type", "json_schema"},
              {"json_schema", {{"name", "story"}, {"schema", schema}, {"strict", true}}}}}}));
  ASSERT_EQ(r.status, 200) << r.body.dump();
  const json& choice = r.body["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "stop");
  const json v = json::parse(choice["message"]["content"].get<std::string>(), nullptr, false);
  ASSERT_TRUE(v.is_object()) << choice.dump();
  EXPECT_TRUE(v["title"].is_string());
  EXPECT_TRUE(v["stars"].is_number_integer());
  EXPECT_EQ(v.size(), 2u);
}

TEST_F(GrammarHttp, BadResponseFormatsAre400NamingTheField) {
  POWER_REQUIRE_SHARED();
  Reply a = post_chat(
      port_, chat({{"response_format",
                    {{"type", "json_schema"},
                     {"json_schema",
                      {{"name", "x"}, {"schema", {{"type", "string"}, {"pattern", "a"}}}}}}}}));
  EXPECT_EQ(a.status, 400);
  EXPECT_NE(a.body["error"]["message"].get<std::string>().find("pattern"), std::string::npos)
      << a.body.dump();
  Reply b = post_chat(port_, chat({{"response_format", {{"type", "yaml"}}}}));
  EXPECT_EQ(b.status, 400);
  EXPECT_EQ(b.body["error"]["param"], "response_format.type");
  Reply c = post_chat(port_, chat({{"top_logprobs", 3}}));
  EXPECT_EQ(c.status, 400);
  EXPECT_EQ(c.body["error"]["param"], "top_logprobs");
  Reply d = post_chat(port_, chat({{"logprobs", true}, {"top_logprobs", 21}}));
  EXPECT_EQ(d.status, 400);
  Reply e = post_chat(port_, chat({{"tools", "nope"}}));
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.body["error"]["param"], "tools");
  // Streamed logprobs and tool calls are covered by stream_http_test.
  Reply f = post_chat(port_, chat({{"logprobs", "yes"}, {"stream", true}}));
  EXPECT_EQ(f.status, 400);
  EXPECT_EQ(f.body["error"]["param"], "logprobs");
}

TEST_F(GrammarHttp, LogprobsInOpenAiShape) {
  POWER_REQUIRE_SHARED();
  Reply r = post_chat(port_, chat({{"logprobs", true}, {"top_logprobs", 3}, {"max_tokens", 6}}));
  ASSERT_EQ(r.status, 200) << r.body.dump();
  const json& lp = r.body["choices"][0]["logprobs"];
  ASSERT_TRUE(lp.contains("content")) << r.body.dump();
  const json& content = lp["content"];
  ASSERT_FALSE(content.empty());
  EXPECT_LE(content.size(), 6u);
  std::string joined;
  for (const json& e : content) {
    ASSERT_TRUE(e["token"].is_string());
    ASSERT_TRUE(e["bytes"].is_array());
    EXPECT_LE(e["logprob"].get<double>(), 0.0);
    ASSERT_EQ(e["top_logprobs"].size(), 3u);
    double mass = 0;
    for (const json& t : e["top_logprobs"]) mass += std::exp(t["logprob"].get<double>());
    EXPECT_LE(mass, 1.0 + 1e-5);
    for (const json& b : e["bytes"]) joined.push_back(static_cast<char>(b.get<int>()));
  }
  // The tokens' bytes spell the generated text (no end-of-generation token in content).
  EXPECT_NE(joined.find(r.body["choices"][0]["message"]["content"].get<std::string>()),
            std::string::npos);
}

TEST_F(GrammarHttp, ForcedToolCallAndToolMessages) {
  POWER_REQUIRE_SHARED();
  const json tools =
      json::array({{{"type", "function"},
                    {"function",
                     {{"name", "lookup"},
                      {"parameters",
                       {{"type", "object"},
                        {"properties", {{"q", {{"type", "string"}, {"maxLength", 8}}}}},
                        {"required", {"q"}},
                        {"additionalProperties", false}}}}}}});
  Reply r = post_chat(port_, chat({{"tools", tools}, {"tool_choice", "required"}}));
  ASSERT_EQ(r.status, 200) << r.body.dump();
  const json& choice = r.body["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << choice.dump();
  const json& call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "lookup");
  const json args = json::parse(call["function"]["arguments"].get<std::string>(), nullptr, false);
  ASSERT_TRUE(args.is_object());
  EXPECT_TRUE(args["q"].is_string());
  // The call and its result sent back as history.
  json history = chat({{"tools", tools}, {"max_tokens", 4}});
  history["messages"].push_back({{"role", "assistant"},
                                 {"content", nullptr},
                                 {"tool_calls", choice["message"]["tool_calls"]}});
  history["messages"].push_back(
      {{"role", "tool"}, {"tool_call_id", call["id"]}, {"content", "found"}});
  Reply h = post_chat(port_, history);
  EXPECT_EQ(h.status, 200) << h.body.dump();
}

}  // namespace
}  // namespace power::server
