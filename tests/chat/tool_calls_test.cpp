// Tool-call parsing per template family. Each output below is written by hand in the format
// the family's chat template (tests/chat/templates) or model card documents; the expected
// calls are what that text says.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "chat/tool_calls.h"

namespace power::chat {
namespace {

struct Case {
  const char* name;
  ToolCallFormat format;
  std::string output;
  std::string content;
  std::vector<ParsedToolCall> calls;
};

void check(const Case& c, ToolCallFormat f) {
  const ToolCallParse r = parse_tool_calls(c.output, f);
  EXPECT_EQ(r.content, c.content) << c.name;
  ASSERT_EQ(r.calls.size(), c.calls.size()) << c.name;
  for (size_t i = 0; i < c.calls.size(); ++i) {
    EXPECT_EQ(r.calls[i].name, c.calls[i].name) << c.name;
    EXPECT_EQ(r.calls[i].arguments_json, c.calls[i].arguments_json) << c.name;
    EXPECT_EQ(r.calls[i].id, c.calls[i].id) << c.name;
  }
}

std::vector<Case> cases() {
  const std::string weather = R"({"city":"Paris","unit":"c"})";
  return {
      {"hermes one",
       ToolCallFormat::kHermes,
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": "
       "\"c\"}}\n</tool_call>",
       "",
       {{"", "get_weather", weather}}},
      {"hermes two with text",
       ToolCallFormat::kHermes,
       "Let me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n"
       "<tool_call>\n{\"name\": \"b\", \"arguments\": {\"x\": [1, 2]}}\n</tool_call>",
       "Let me check.",
       {{"", "a", "{}"}, {"", "b", R"({"x":[1,2]})"}}},
      {"hermes arguments as a JSON string",
       ToolCallFormat::kHermes,
       "<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"k\\\": \\\"}\\\"}\"}\n</tool_call>",
       "",
       {{"", "f", R"({"k":"}"})"}}},
      {"llama3 json",
       ToolCallFormat::kLlama3,
       "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": \"c\"}}",
       "",
       {{"", "get_weather", weather}}},
      {"llama3 python_tag, two",
       ToolCallFormat::kLlama3,
       "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"n\": 1}}; {\"name\": \"b\", "
       "\"parameters\": {}}",
       "",
       {{"", "a", R"({"n":1})"}, {"", "b", "{}"}}},
      {"mistral nemo",
       ToolCallFormat::kMistral,
       "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": "
       "\"c\"}, \"id\": \"a1b2c3d4e\"}]",
       "",
       {{"a1b2c3d4e", "get_weather", weather}}},
      {"mistral small 3.2",
       ToolCallFormat::kMistral,
       "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\", \"unit\": \"c\"}[TOOL_CALLS]b[ARGS]{}",
       "",
       {{"", "get_weather", weather}, {"", "b", "{}"}}},
      {"deepseek v3.1",
       ToolCallFormat::kDeepSeek,
       "Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": "
       "\"Paris\", \"unit\": \"c\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       "Sure.",
       {{"", "get_weather", weather}}},
      {"deepseek r1",
       ToolCallFormat::kDeepSeek,
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
       "{\"city\": \"Paris\", \"unit\": \"c\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       "",
       {{"", "get_weather", weather}}},
      {"firefunction",
       ToolCallFormat::kFireFunction,
       " functools[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": "
       "\"c\"}}]",
       "",
       {{"", "get_weather", weather}}},
      {"functionary 3.1",
       ToolCallFormat::kFunctionary,
       "<function=get_weather>{\"city\": \"Paris\", \"unit\": \"c\"}</function>",
       "",
       {{"", "get_weather", weather}}},
      {"functionary 3.2",
       ToolCallFormat::kFunctionary,
       ">>>all\nChecking.\n>>>get_weather\n{\"city\": \"Paris\", \"unit\": \"c\"}",
       "Checking.",
       {{"", "get_weather", weather}}},
      {"kimi k2",
       ToolCallFormat::kKimi,
       "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
       "<|tool_call_argument_begin|>{\"city\": \"Paris\", \"unit\": \"c\"}<|tool_call_end|>"
       "<|tool_calls_section_end|>",
       "",
       {{"functions.get_weather:0", "get_weather", weather}}},
      {"plain text is content",
       ToolCallFormat::kHermes,
       "  Paris is sunny.\n",
       "Paris is sunny.",
       {}},
      {"broken call json stays content",
       ToolCallFormat::kHermes,
       "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": }\n</tool_call>",
       "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": }\n</tool_call>",
       {}},
      {"llama3 prose is content",
       ToolCallFormat::kLlama3,
       "The answer is {not json}.",
       "The answer is {not json}.",
       {}},
  };
}

TEST(ToolCalls, EachFamilyFormat) {
  for (const Case& c : cases()) check(c, c.format);
}

TEST(ToolCalls, AutoDetectFindsEveryFormat) {
  for (const Case& c : cases()) check(c, ToolCallFormat::kAuto);
}

std::string read_template(const std::string& name) {
  std::ifstream in(std::string(POWER_CHAT_TEST_DIR) + "/templates/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ToolCalls, FormatFromTemplateSource) {
  const std::vector<std::pair<const char*, ToolCallFormat>> expect = {
      {"Qwen-Qwen2.5-7B-Instruct.jinja", ToolCallFormat::kHermes},
      {"Qwen-Qwen3-0.6B.jinja", ToolCallFormat::kHermes},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", ToolCallFormat::kHermes},
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", ToolCallFormat::kLlama3},
      {"meta-llama-Llama-3.2-3B-Instruct.jinja", ToolCallFormat::kLlama3},
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja", ToolCallFormat::kMistral},
      {"Mistral-Small-3.2-24B-Instruct-2506.jinja", ToolCallFormat::kMistral},
      {"deepseek-ai-DeepSeek-V3.1.jinja", ToolCallFormat::kDeepSeek},
      {"fireworks-ai-llama-3-firefunction-v2.jinja", ToolCallFormat::kFireFunction},
      {"meetkai-functionary-medium-v3.1.jinja", ToolCallFormat::kFunctionary},
      {"moonshotai-Kimi-K2.jinja", ToolCallFormat::kKimi},
      {"google-gemma-2-2b-it.jinja", ToolCallFormat::kAuto},
  };
  for (const auto& [name, f] : expect) {
    const std::string src = read_template(name);
    ASSERT_FALSE(src.empty()) << name;
    EXPECT_EQ(tool_call_format_name(tool_call_format_for_template(src)), tool_call_format_name(f))
        << name;
  }
}

TEST(ToolCalls, GarbageNeverCrashes) {
  std::mt19937 rng(7);
  const std::string alphabet = "{}[]\":,\\ <>|/tool_call>[TOOL_CALLS][ARGS]functools>>>=\n";
  for (int i = 0; i < 3000; ++i) {
    std::string s;
    const size_t n = rng() % 80;
    for (size_t j = 0; j < n; ++j) s += alphabet[rng() % alphabet.size()];
    for (int f = 0; f <= static_cast<int>(ToolCallFormat::kKimi); ++f) {
      (void)parse_tool_calls(s, static_cast<ToolCallFormat>(f));
    }
  }
}

}  // namespace
}  // namespace power::chat
