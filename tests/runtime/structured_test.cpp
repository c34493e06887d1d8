// Structured output, logprobs and tools through the public runtime API on a real model
// (../shared stories260K): outputs are parsed and validated here, independently of the engine.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "power/runtime.h"
#include "test_util.h"

namespace power {
namespace {

using json = nlohmann::ordered_json;

std::string stories_f32() {
  return testing::shared_dir() + "/models/stories260K/stories260K-F32.gguf";
}

struct Fixture {
  std::unique_ptr<Runtime> rt;
  ModelHandle model;
};

Fixture load() {
  Fixture f;
  auto rt = Runtime::create({});
  EXPECT_TRUE(rt.ok());
  f.rt = std::move(rt).value();
  LoadOptions o;
  o.n_ctx = 512;
  o.max_running = 4;
  o.threads = 2;
  auto m = f.rt->load(stories_f32(), o);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  if (m.ok()) f.model = *m;
  return f;
}

GenerateRequest sampled(uint64_t seed) {
  GenerateRequest r;
  r.prompt = "Once upon a time";
  r.max_tokens = 200;
  r.sampling.temperature = 1.0f;
  r.sampling.top_k = 0;
  r.sampling.top_p = 1.0f;
  r.sampling.min_p = 0.0f;
  r.sampling.seed = seed;
  return r;
}

TEST(Structured, JsonSchemaOutputsValidate) {
  POWER_REQUIRE_SHARED();
  Fixture f = load();
  ASSERT_TRUE(f.rt);
  const std::string schema =
      R"({"type":"object","properties":{"n":{"type":"integer"},"mood":{"enum":["happy","sad"]},
          "name":{"type":"string","maxLength":12}},"required":["n","mood","name"],
          "additionalProperties":false})";
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    GenerateRequest r = sampled(seed);
    r.response_format.type = ResponseFormat::Type::kJsonSchema;
    r.response_format.schema_json = schema;
    auto h = f.rt->submit(f.model, std::move(r));
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    Completion c = h->wait();
    ASSERT_TRUE(c.status.ok()) << c.status.to_string();
    EXPECT_EQ(c.finish, Finish::kStop) << c.text;  // ended by EOS once the object closed
    const json v = json::parse(c.text, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << c.text;
    ASSERT_TRUE(v.is_object()) << c.text;
    EXPECT_EQ(v.size(), 3u) << c.text;
    EXPECT_TRUE(v["n"].is_number_integer()) << c.text;
    EXPECT_TRUE(v["mood"] == "happy" || v["mood"] == "sad") << c.text;
    ASSERT_TRUE(v["name"].is_string()) << c.text;
  }
}

TEST(Structured, JsonObjectMode) {
  POWER_REQUIRE_SHARED();
  Fixture f = load();
  ASSERT_TRUE(f.rt);
  GenerateRequest r = sampled(7);
  r.max_tokens = 300;
  r.sampling.temperature = 0.0f;  // greedy still has to close the object to stop
  r.response_format.type = ResponseFormat::Type::kJsonObject;
  auto h = f.rt->submit(f.model, std::move(r));
  ASSERT_TRUE(h.ok());
  Completion c = h->wait();
  ASSERT_TRUE(c.status.ok());
  // Either it closed (then it parses) or it hit the limit with a valid prefix.
  if (c.finish == Finish::kStop) {
    const json v = json::parse(c.text, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << c.text;
    EXPECT_TRUE(v.is_object());
  } else {
    EXPECT_EQ(c.text.substr(0, 1), "{");
  }
}

TEST(Structured, BadSchemaIsRejectedAtSubmit) {
  POWER_REQUIRE_SHARED();
  Fixture f = load();
  ASSERT_TRUE(f.rt);
  GenerateRequest r = sampled(1);
  r.response_format.type = ResponseFormat::Type::kJsonSchema;
  r.response_format.schema_json = R"({"type":"string","pattern":"^a+$"})";
  auto h = f.rt->submit(f.model, std::move(r));
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(h.status().to_string().find("pattern"), std::string::npos);
  GenerateRequest r2 = sampled(1);
  r2.top_logprobs = 21;
  auto h2 = f.rt->submit(f.model, std::move(r2));
  ASSERT_FALSE(h2.ok());
  EXPECT_NE(h2.status().to_string().find("top_logprobs"), std::string::npos);
}

TEST(Structured, LogprobsPerTokenAndInStream) {
  POWER_REQUIRE_SHARED();
  Fixture f = load();
  ASSERT_TRUE(f.rt);
  GenerateRequest r = sampled(3);
  r.max_tokens = 24;
  r.top_logprobs = 5;
  r.ignore_eos = true;
  int streamed_with_logprobs = 0;
  r.on_stream = [&](const StreamEvent& e) {
    if (e.token >= 0) {
      EXPECT_NE(e.logprobs, nullptr);
      if (e.logprobs) {
        EXPECT_EQ(e.logprobs->chosen.token, e.token);
        ++streamed_with_logprobs;
      }
    }
    return true;
  };
  auto h = f.rt->submit(f.model, std::move(r));
  ASSERT_TRUE(h.ok());
  Completion c = h->wait();
  ASSERT_TRUE(c.status.ok());
  ASSERT_EQ(c.logprobs.size(), c.tokens.size());
  EXPECT_EQ(streamed_with_logprobs, static_cast<int>(c.tokens.size()));
  for (size_t i = 0; i < c.tokens.size(); ++i) {
    const TokenLogprobs& lp = c.logprobs[i];
    EXPECT_EQ(lp.chosen.token, c.tokens[i]);
    EXPECT_LE(lp.chosen.logprob, 0.0f);
    ASSERT_EQ(lp.top.size(), 5u);
    double mass = 0;
    for (size_t k = 0; k < lp.top.size(); ++k) {
      mass += std::exp(lp.top[k].logprob);
      if (k > 0) EXPECT_LE(lp.top[k].logprob, lp.top[k - 1].logprob);
      // The chosen token, when among the top, carries the same value.
      if (lp.top[k].token == lp.chosen.token) EXPECT_EQ(lp.top[k].logprob, lp.chosen.logprob);
    }
    EXPECT_LE(mass, 1.0 + 1e-5);
    EXPECT_GE(lp.chosen.logprob, lp.top.back().logprob - 30.0f);
  }
  // Greedy: the chosen token is the most likely one.
  GenerateRequest g = sampled(3);
  g.sampling.temperature = 0.0f;
  g.max_tokens = 8;
  g.top_logprobs = 1;
  g.ignore_eos = true;
  Completion cg = f.rt->submit(f.model, std::move(g))->wait();
  ASSERT_EQ(cg.logprobs.size(), cg.tokens.size());
  for (const TokenLogprobs& lp : cg.logprobs) {
    ASSERT_EQ(lp.top.size(), 1u);
    EXPECT_EQ(lp.top[0].token, lp.chosen.token);
  }
}

TEST(Structured, ForcedToolCallIsParsed) {
  POWER_REQUIRE_SHARED();
  Fixture f = load();
  ASSERT_TRUE(f.rt);
  const json tools = json::parse(R"([
    {"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
      "properties":{"city":{"type":"string","maxLength":10},"days":{"type":"integer"}},
      "required":["city","days"],"additionalProperties":false}}},
    {"type":"function","function":{"name":"noop","parameters":{"type":"object",
      "properties":{},"additionalProperties":false}}}])");
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    GenerateRequest r = sampled(seed);
    r.prompt.clear();
    r.messages = {{"user", "What is the weather in Paris?"}};
    r.tools_json = tools.dump();
    r.tool_choice_json = R"({"type":"function","function":{"name":"get_weather"}})";
    auto h = f.rt->submit(f.model, std::move(r));
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    Completion c = h->wait();
    ASSERT_TRUE(c.status.ok()) << c.status.to_string();
    ASSERT_EQ(c.tool_calls.size(), 1u) << c.text;
    EXPECT_EQ(c.tool_calls[0].name, "get_weather");
    const json args = json::parse(c.tool_calls[0].arguments_json, nullptr, false);
    ASSERT_TRUE(args.is_object()) << c.tool_calls[0].arguments_json;
    EXPECT_TRUE(args["city"].is_string());
    EXPECT_TRUE(args["days"].is_number_integer());
    EXPECT_EQ(c.tool_calls[0].id, "call_0");
  }
  // Bad tool fields are errors naming the field.
  GenerateRequest bad = sampled(1);
  bad.prompt.clear();
  bad.messages = {{"user", "hi"}};
  bad.tools_json = tools.dump();
  bad.tool_choice_json = R"({"type":"function","function":{"name":"missing"}})";
  auto hb = f.rt->submit(f.model, std::move(bad));
  ASSERT_FALSE(hb.ok());
  EXPECT_NE(hb.status().to_string().find("tool_choice"), std::string::npos);
  GenerateRequest bad2 = sampled(1);
  bad2.prompt.clear();
  bad2.messages = {{"user", "hi"}};
  bad2.tools_json = R"({"not":"an array"})";
  auto hb2 = f.rt->submit(f.model, std::move(bad2));
  ASSERT_FALSE(hb2.ok());
  EXPECT_NE(hb2.status().to_string().find("tools"), std::string::npos);
}

TEST(Structured, ToolMessagesRender) {
  POWER_REQUIRE_SHARED();
  Fixture f = load();
  ASSERT_TRUE(f.rt);
  GenerateRequest r = sampled(1);
  r.prompt.clear();
  r.max_tokens = 4;
  ChatMessage call{"assistant", ""};
  call.tool_calls_json =
      R"([{"id":"call_0","type":"function","function":{"name":"f","arguments":"{}"}}])";
  ChatMessage result{"tool", "sunny"};
  result.tool_call_id = "call_0";
  result.name = "f";
  r.messages = {{"user", "weather?"}, call, result};
  auto h = f.rt->submit(f.model, std::move(r));
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  EXPECT_TRUE(h->wait().status.ok());
  GenerateRequest bad = sampled(1);
  bad.prompt.clear();
  ChatMessage broken{"assistant", ""};
  broken.tool_calls_json = "{oops";
  bad.messages = {{"user", "x"}, broken};
  auto hb = f.rt->submit(f.model, std::move(bad));
  ASSERT_FALSE(hb.ok());
  EXPECT_EQ(hb.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace power
