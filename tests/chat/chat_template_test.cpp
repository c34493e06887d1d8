// Real chat templates (tests/chat/templates, see SOURCES.md) rendering real conversations.
// Expected prompts come from Python jinja2 with Hugging Face's settings (expected.json, made by
// gen_expected.py), from llama.cpp's own test suite (llamacpp_cases.json), and from the
// prompt formats the model authors document; never from Power's renderer.
#include <ctime>
#include <map>

#include <gtest/gtest.h>

#include "chat/chat_template.h"
#include "format/gguf.h"
#include "test_data.h"
#include "test_util.h"

namespace power::chat {
namespace {

using nlohmann::ordered_json;
using power::chat::testing::read_json;
using power::chat::testing::read_text;
using power::chat::testing::test_name;

std::chrono::system_clock::time_point noon_local(const std::string& date) {
  std::tm tm{};
  tm.tm_year = std::stoi(date.substr(0, 4)) - 1900;
  tm.tm_mon = std::stoi(date.substr(5, 2)) - 1;
  tm.tm_mday = std::stoi(date.substr(8, 2));
  tm.tm_hour = 12;
  tm.tm_isdst = -1;
  return std::chrono::system_clock::from_time_t(std::mktime(&tm));
}

ChatTemplate load(const std::string& file, const std::string& bos = "",
                  const std::string& eos = "") {
  Result<ChatTemplate> t = ChatTemplate::from_string(read_text("templates/" + file), bos, eos);
  EXPECT_TRUE(t.ok()) << file << ": " << t.status().to_string();
  if (!t.ok()) return ChatTemplate::from_string(kChatMlTemplate).value();
  return std::move(t).value();
}

const ordered_json& cases_json() {
  static const ordered_json j = read_json("cases.json");
  return j;
}

const ordered_json& expected_json() {
  static const ordered_json j = read_json("expected.json");
  return j;
}

struct TemplateCase {
  std::string name;
  ordered_json spec;
};

void PrintTo(const TemplateCase& c, std::ostream* os) {
  *os << c.name;
}

std::vector<TemplateCase> load_cases() {
  std::vector<TemplateCase> out;
  for (const auto& c : cases_json()["cases"]) out.push_back({c["name"], c});
  return out;
}

class RealTemplate : public ::testing::TestWithParam<TemplateCase> {};

TEST_P(RealTemplate, MatchesHuggingFaceJinja2) {
  const ordered_json& c = GetParam().spec;
  ChatTemplate t = load(c["template"], c["bos_token"], c["eos_token"]);
  ChatRenderOptions options;
  options.add_generation_prompt = c["add_generation_prompt"];
  if (c.value("tools", false)) options.tools = cases_json()["tools"];
  if (c.contains("extra_context")) options.extra_context = c["extra_context"];
  options.now = noon_local(c.value("now", std::string("2024-07-26")));
  const ordered_json& messages =
      cases_json()["conversations"][c["conversation"].get<std::string>()];
  Result<std::string> out = t.render(messages, options);
  if (c.value("engine_only", false)) {
    // The wider sweep: Hugging Face's variables straight into the Jinja engine.
    Result<jinja::Template> raw =
        jinja::Template::parse(read_text("templates/" + c["template"].get<std::string>()));
    ASSERT_TRUE(raw.ok()) << raw.status().to_string();
    ordered_json context = {
        {"messages", messages},        {"tools", options.tools},
        {"documents", nullptr},        {"add_generation_prompt", options.add_generation_prompt},
        {"bos_token", c["bos_token"]}, {"eos_token", c["eos_token"]}};
    jinja::RenderOptions render_options;
    render_options.now = options.now;
    out = raw->render(context, render_options);
  }
  const ordered_json& expected = expected_json()["cases"][GetParam().name];
  if (expected.contains("output")) {
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    EXPECT_EQ(*out, expected["output"].get<std::string>());
  } else {
    ASSERT_FALSE(out.ok()) << *out;  // jinja2 failed too: raise_exception, TypeError, ...
    if (expected.value("raised_by_template", false)) {
      EXPECT_NE(out.status().message().find(expected["error"].get<std::string>()),
                std::string::npos)
          << out.status().to_string();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Templates, RealTemplate, ::testing::ValuesIn(load_cases()),
                         [](const auto& info) { return test_name(info.param.name); });

std::vector<TemplateCase> load_llamacpp_cases() {
  std::vector<TemplateCase> out;
  const ordered_json file = read_json("llamacpp_cases.json");
  for (const auto& c : file["cases"]) out.push_back({c["name"], c});
  return out;
}

class LlamaCppSuite : public ::testing::TestWithParam<TemplateCase> {};

TEST_P(LlamaCppSuite, MatchesLlamaCppExpectedPrompt) {
  const ordered_json& c = GetParam().spec;
  Result<ChatTemplate> t =
      ChatTemplate::from_string(c["template"].get<std::string>(), c["bos_token"], c["eos_token"]);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  static const ordered_json messages = read_json("llamacpp_cases.json")["messages"];
  ChatRenderOptions options;
  options.add_generation_prompt = true;
  Result<std::string> out = t->render(messages, options);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(*out, c["expected"].get<std::string>());
}

INSTANTIATE_TEST_SUITE_P(CrossCheck, LlamaCppSuite, ::testing::ValuesIn(load_llamacpp_cases()),
                         [](const auto& info) { return test_name(info.param.name); });

const ordered_json& conversation(const std::string& name) {
  return cases_json()["conversations"][name];
}

std::string expected_output(const std::string& case_name) {
  return expected_json()["cases"][case_name]["output"].get<std::string>();
}

// The prompt formats as the model cards document them, written out by hand.
TEST(DocumentedFormats, Llama2) {
  ChatTemplate t = load("meta-llama-Llama-2-7b-chat-hf.jinja", "<s>", "</s>");
  Result<std::string> out = t.render(conversation("basic"));
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(*out,
            "<s>[INST] <<SYS>>\nYou are a helpful assistant.\n<</SYS>>\n\nHello! [/INST] Hi there. "
            "How can I help? </s><s>[INST] Tell me a joke about \"quotes\" and\nnewlines. [/INST]");
}

TEST(DocumentedFormats, Llama3) {
  ChatTemplate t = load("meta-llama-Meta-Llama-3-8B-Instruct.jinja", "<|begin_of_text|>");
  ordered_json messages = {{{"role", "system"}, {"content", "SYS"}},
                           {{"role", "user"}, {"content", "USER"}}};
  ChatRenderOptions options;
  options.add_generation_prompt = true;
  Result<std::string> out = t.render(messages, options);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(*out,
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nSYS<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nUSER<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(DocumentedFormats, ChatMl) {
  ChatTemplate t = load("chatml.jinja");
  ordered_json messages = {{{"role", "system"}, {"content", "SYS"}},
                           {{"role", "user"}, {"content", "USER"}}};
  ChatRenderOptions options;
  options.add_generation_prompt = true;
  Result<std::string> out = t.render(messages, options);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out,
            "<|im_start|>system\nSYS<|im_end|>\n<|im_start|>user\nUSER<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(Normalisation, TextPartsJoinForStringTemplates) {
  ChatTemplate t = load("Qwen-Qwen2.5-7B-Instruct.jinja");
  EXPECT_TRUE(t.renders_string_content());
  EXPECT_FALSE(t.renders_typed_content());
  ordered_json typed = {
      {{"role", "user"},
       {"content",
        {{{"type", "text"}, {"text", "line one"}}, {{"type", "text"}, {"text", "two"}}}}}};
  ordered_json plain = {{{"role", "user"}, {"content", "line one\ntwo"}}};
  Result<std::string> a = t.render(typed);
  Result<std::string> b = t.render(plain);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*a, *b);
  ordered_json image = {
      {{"role", "user"}, {"content", {{{"type", "image_url"}, {"image_url", "x.png"}}}}}};
  Result<std::string> c = t.render(image);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("image_url"), std::string::npos);
}

TEST(Normalisation, TypedTemplatesGetPartsAsIs) {
  ChatTemplate t = load("google-gemma-3-4b-it.jinja", "<bos>", "<eos>");
  EXPECT_TRUE(t.renders_typed_content());
  ChatRenderOptions options;
  options.add_generation_prompt = true;
  Result<std::string> out = t.render(conversation("typed_parts"), options);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(*out, expected_output("gemma3/typed_parts"));
}

TEST(Normalisation, ToolCallArgumentsFollowTheTemplate) {
  ChatRenderOptions options;
  options.tools = cases_json()["tools"];
  // DeepSeek concatenates arguments as a string; Mistral and Llama 3.1 apply tojson to a dict.
  ChatTemplate r1 = load("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
                         "<\xef\xbd\x9c"
                         "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
                         "<\xef\xbd\x9c"
                         "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>");
  options.add_generation_prompt = true;
  Result<std::string> out = r1.render(conversation("tools_obj"), options);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(*out, expected_output("deepseek-r1/tools"));

  ChatTemplate nemo = load("mistralai-Mistral-Nemo-Instruct-2407.jinja", "<s>", "</s>");
  options.add_generation_prompt = false;
  out = nemo.render(conversation("tools_str"), options);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(*out, expected_output("mistral-nemo/tools"));
}

TEST(ChatTemplateErrors, BadMessages) {
  ChatTemplate t = load("chatml.jinja");
  EXPECT_EQ(t.render(ordered_json::object()).status().code(), StatusCode::kInvalidArgument);
  Result<std::string> r = t.render(ordered_json::array({{{"content", "no role"}}}));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("message 0"), std::string::npos);
  r = t.render(ordered_json::array({{{"role", "user"}, {"content", 42}}}));
  EXPECT_FALSE(r.ok());
  EXPECT_FALSE(t.render_json("[{\"role\": ").ok());
  ChatRenderOptions bad_tools;
  bad_tools.tools = "not an array";
  EXPECT_FALSE(t.render(conversation("basic"), bad_tools).ok());
}

TEST(ChatTemplateErrors, TemplateErrorsSurface) {
  Result<ChatTemplate> bad = ChatTemplate::from_string("{% for m in messages %}{{ m.role }");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().to_string().find("line=1"), std::string::npos);
  ChatTemplate gemma = load("google-gemma-2-2b-it.jinja", "<bos>", "<eos>");
  Result<std::string> r = gemma.render(conversation("basic"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("System role not supported"), std::string::npos);
}

TEST(ChatTemplate, RenderJsonAcceptsArrayOrObject) {
  ChatTemplate t = load("chatml.jinja");
  Result<std::string> a = t.render_json(R"([{"role":"user","content":"hi"}])");
  Result<std::string> b = t.render_json(R"({"messages":[{"role":"user","content":"hi"}]})");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, "<|im_start|>user\nhi<|im_end|>\n");
  EXPECT_EQ(*a, *b);
}

TEST(ChatTemplate, ExtraContextOverridesDefaults) {
  Result<ChatTemplate> t = ChatTemplate::from_string(
      "{{ bos_token }}|{{ enable_thinking }}|{{ tools }}|{{ documents }}|{{ add_generation_prompt "
      "}}",
      "<s>");
  ASSERT_TRUE(t.ok());
  ChatRenderOptions options;
  options.extra_context = {{"enable_thinking", false}, {"bos_token", "[B]"}};
  Result<std::string> out = t->render(ordered_json::array(), options);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(*out, "[B]|False|None|None|False");
}

std::map<std::string, GgufValue> gguf_metadata(bool with_template) {
  std::map<std::string, GgufValue> kv;
  kv["tokenizer.ggml.tokens"] =
      GgufValue::string_array({"<unk>", "<|begin_of_text|>", "<|eot_id|>", "hello"});
  kv["tokenizer.ggml.bos_token_id"] = GgufValue::u32(1);
  kv["tokenizer.ggml.eos_token_id"] = GgufValue::u32(2);
  if (with_template) {
    kv["tokenizer.chat_template"] =
        GgufValue::str(read_text("templates/meta-llama-Meta-Llama-3-8B-Instruct.jinja"));
  }
  return kv;
}

TEST(ChatTemplateGguf, ReadsTemplateAndSpecialTokens) {
  auto kv = gguf_metadata(true);
  Result<ChatTemplate> t =
      ChatTemplate::from_metadata([&](std::string_view key) -> const GgufValue* {
        auto it = kv.find(std::string(key));
        return it == kv.end() ? nullptr : &it->second;
      });
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_FALSE(t->is_chatml_fallback());
  EXPECT_EQ(t->bos_token(), "<|begin_of_text|>");
  EXPECT_EQ(t->eos_token(), "<|eot_id|>");
  ChatRenderOptions options;
  options.add_generation_prompt = true;
  Result<std::string> out = t->render(conversation("basic"), options);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, expected_output("llama3/basic"));
}

TEST(ChatTemplateGguf, NoTemplateMeansChatMl) {
  auto kv = gguf_metadata(false);
  Result<ChatTemplate> t =
      ChatTemplate::from_metadata([&](std::string_view key) -> const GgufValue* {
        auto it = kv.find(std::string(key));
        return it == kv.end() ? nullptr : &it->second;
      });
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_TRUE(t->is_chatml_fallback());
  ChatRenderOptions options;
  options.add_generation_prompt = true;
  Result<std::string> out = t->render(conversation("basic"), options);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, expected_output("chatml/basic"));
}

TEST(ChatTemplateGguf, FromARealGgufFile) {
  // A metadata-only GGUF written by the format layer, read back, then from_gguf.
  GgufWriter writer;
  for (auto& [key, value] : gguf_metadata(true)) writer.set(key, value);
  Result<std::vector<uint8_t>> bytes = writer.serialize();
  ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
  auto file = GgufFile::parse(*bytes);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  Result<ChatTemplate> t = ChatTemplate::from_gguf(**file);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->bos_token(), "<|begin_of_text|>");
  ChatRenderOptions options;
  options.add_generation_prompt = true;
  Result<std::string> out = t->render(conversation("basic"), options);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, expected_output("llama3/basic"));
}

TEST(ChatTemplateGguf, SharedPhi3VocabCarriesThePhi3Template) {
  POWER_REQUIRE_SHARED();
  auto file =
      GgufFile::open(power::testing::shared_dir() + "/fixtures/tokenizer/ggml-vocab-phi-3.gguf");
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  Result<ChatTemplate> t = ChatTemplate::from_gguf(**file);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->bos_token(), "<s>");
  EXPECT_EQ(t->eos_token(), "<|endoftext|>");
  EXPECT_EQ(t->source(), read_text("templates/microsoft-Phi-3-mini-4k-instruct.jinja"));
  ChatRenderOptions options;
  options.add_generation_prompt = true;
  Result<std::string> out = t->render(conversation("basic"), options);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, expected_output("phi3-mini/basic"));
}

TEST(ChatTemplateGguf, ToolUseVariantRendersRequestsWithTools) {
  std::map<std::string, GgufValue> kv;
  kv["tokenizer.ggml.tokens"] = GgufValue::string_array({"<s>", "</s>"});
  kv["tokenizer.ggml.bos_token_id"] = GgufValue::u32(0);
  kv["tokenizer.ggml.eos_token_id"] = GgufValue::u32(1);
  kv["tokenizer.chat_template"] = GgufValue::str(read_text("templates/chatml.jinja"));
  kv["tokenizer.chat_template.tool_use"] =
      GgufValue::str(read_text("templates/NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja"));
  Result<ChatTemplate> t =
      ChatTemplate::from_metadata([&](std::string_view key) -> const GgufValue* {
        auto it = kv.find(std::string(key));
        return it == kv.end() ? nullptr : &it->second;
      });
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_NE(t->tool_use_variant(), nullptr);
  ChatRenderOptions options;
  options.add_generation_prompt = true;
  Result<std::string> plain = t->render(conversation("basic"), options);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(*plain, expected_output("chatml/basic"));
  options.tools = cases_json()["tools"];
  Result<std::string> with_tools = t->render(conversation("tools_obj"), options);
  ASSERT_TRUE(with_tools.ok()) << with_tools.status().to_string();
  EXPECT_EQ(*with_tools,
            expected_output("compat/NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use/tools_obj"));
}

TEST(ChatTemplateGguf, WrongTypesAreErrors) {
  std::map<std::string, GgufValue> kv;
  kv["tokenizer.chat_template"] = GgufValue::u32(7);
  kv["tokenizer.ggml.bos_token_id"] = GgufValue::u32(99);  // no token list: bos stays empty
  Result<ChatTemplate> t =
      ChatTemplate::from_metadata([&](std::string_view key) -> const GgufValue* {
        auto it = kv.find(std::string(key));
        return it == kv.end() ? nullptr : &it->second;
      });
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace power::chat
