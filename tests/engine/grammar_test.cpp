// Grammar-constrained sampling: the JSON grammar against the JSON spec (RFC 8259), schemas
// against JSON Schema semantics (checked by an independent validator written here from the
// spec), the token mask against brute force, and random walks that must end in valid JSON.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/grammar.h"
#include "engine/json_schema.h"
#include "engine/sampler.h"
#include "format/gguf.h"
#include "test_util.h"
#include "text/tokenizer.h"

namespace power::grammar {
namespace {

using json = nlohmann::ordered_json;

bool matches(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  GrammarMatcher m(g);
  return m.accept_bytes(text) && m.is_complete();
}

// ---- an independent validator for the keywords the tests use (JSON Schema 2020-12) ----

size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool validate(const json& v, const json& s, const json& root);

bool validate_type(const json& v, const std::string& t) {
  if (t == "null") return v.is_null();
  if (t == "boolean") return v.is_boolean();
  if (t == "string") return v.is_string();
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  if (t == "number") return v.is_number();
  if (t == "integer")
    return v.is_number_integer() ||
           (v.is_number_float() &&
            v.get<double>() == static_cast<double>(static_cast<int64_t>(v.get<double>())));
  return false;
}

bool validate(const json& v, const json& s, const json& root) {
  if (s.is_boolean()) return s.get<bool>();
  if (s.contains("nullable") && s["nullable"].get<bool>() && v.is_null()) return true;
  if (s.contains("$ref")) {
    const std::string ref = s["$ref"];
    return validate(v, root.at(json::json_pointer(ref.substr(1))), root);
  }
  if (s.contains("type")) {
    bool ok = false;
    if (s["type"].is_string()) {
      ok = validate_type(v, s["type"]);
    } else {
      for (const auto& t : s["type"]) ok = ok || validate_type(v, t);
    }
    if (!ok) return false;
  }
  if (s.contains("const") && v != s["const"]) return false;
  if (s.contains("enum")) {
    bool ok = false;
    for (const auto& e : s["enum"]) ok = ok || e == v;
    if (!ok) return false;
  }
  if (s.contains("anyOf")) {
    bool ok = false;
    for (const auto& a : s["anyOf"]) ok = ok || validate(v, a, root);
    if (!ok) return false;
  }
  if (s.contains("oneOf")) {
    int n = 0;
    for (const auto& a : s["oneOf"]) n += validate(v, a, root);
    if (n != 1) return false;
  }
  if (v.is_string()) {
    const size_t n = code_points(v.get<std::string>());
    if (s.contains("minLength") && n < s["minLength"].get<size_t>()) return false;
    if (s.contains("maxLength") && n > s["maxLength"].get<size_t>()) return false;
  }
  if (v.is_object()) {
    const json props = s.value("properties", json::object());
    for (const auto& r : s.value("required", json::array())) {
      if (!v.contains(r.get<std::string>())) return false;
    }
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (props.contains(it.key())) {
        if (!validate(it.value(), props[it.key()], root)) return false;
      } else if (s.contains("additionalProperties")) {
        if (!validate(it.value(), s["additionalProperties"], root)) return false;
      }
    }
  }
  if (v.is_array()) {
    const json prefix = s.value("prefixItems", json::array());
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
    for (size_t i = 0; i < v.size(); ++i) {
      if (i < prefix.size()) {
        if (!validate(v[i], prefix[i], root)) return false;
      } else if (s.contains("items") && !validate(v[i], s["items"], root)) {
        return false;
      }
    }
  }
  return true;
}

// ---- the JSON grammar against RFC 8259 ----

TEST(JsonGrammar, AcceptsValuesOfTheSpec) {
  auto g = json_value_grammar();
  for (const char* text : {"{}",
                           "[]",
                           "0",
                           "-0",
                           "12",
                           "-12.5",
                           "1e5",
                           "1E+05",
                           "2.5e-3",
                           "true",
                           "false",
                           "null",
                           "\"\"",
                           "\"a\\\"b\\\\c\\/\\b\\f\\n\\r\\t\"",
                           "\"\\u00e9\\uD83D\\uDE00\"",
                           "\"caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80\"",
                           "{\"a\":1}",
                           "{\"a\": [1, 2, {\"b\": null}]}",
                           "{\n  \"a\": 1,\n  \"b\": \"x\"\n}",
                           "[ ]",
                           "[1 ,2]",
                           "\"\x7F\""}) {
    EXPECT_TRUE(matches(g, text)) << text;
  }
}

TEST(JsonGrammar, RejectsNonJson) {
  auto g = json_value_grammar();
  for (const char* text : {"",
                           "01",
                           "-",
                           "1.",
                           ".5",
                           "1e",
                           "+1",
                           "[1,]",
                           "{\"a\":1,}",
                           "{a:1}",
                           "'a'",
                           "\"\t\"",
                           "\"\\x\"",
                           "\"\\u12\"",
                           "\"\\uD800\"",
                           "\"\\uDC00\"",
                           "\"\xC0\xAF\"",
                           "\"\xED\xA0\x80\"",
                           "\"\xF4\x90\x80\x80\"",
                           "\"\x80\"",
                           "[1] ",
                           " 1",
                           "tru",
                           "nul",
                           "True",
                           "{\"a\" 1}",
                           "[1 2]",
                           "{\"a\":1}}"}) {
    EXPECT_FALSE(matches(g, text)) << text;
  }
}

TEST(JsonGrammar, ObjectGrammarTakesOnlyObjects) {
  auto g = json_object_grammar();
  EXPECT_TRUE(matches(g, "{\"a\":[1]}"));
  EXPECT_FALSE(matches(g, "[1]"));
  EXPECT_FALSE(matches(g, "\"s\""));
}

TEST(JsonGrammar, WhitespaceIsBounded) {
  auto g = json_value_grammar();
  EXPECT_TRUE(matches(g, "[1, 2]"));
  EXPECT_FALSE(matches(g, "[1,  2]"));  // at most one space
  EXPECT_TRUE(matches(g, "[\n" + std::string(20, ' ') + "1]"));
  EXPECT_FALSE(matches(g, "[\n" + std::string(21, ' ') + "1]"));
  EXPECT_FALSE(matches(g, "[\n\n1]"));
}

// ---- schemas ----

struct SchemaCase {
  const char* schema;
  std::vector<const char*> valid;
  std::vector<const char*> invalid;
};

TEST(JsonSchemaGrammar, TableOfCases) {
  const std::vector<SchemaCase> cases = {
      {R"({"type":"integer"})", {"0", "-7", "123"}, {"1.5", "1e3", "\"1\"", "01"}},
      {R"({"type":"number"})", {"0", "1.5", "-2e-3"}, {"\"1\"", "null"}},
      {R"({"type":"boolean"})", {"true", "false"}, {"0", "null"}},
      {R"({"type":["string","null"]})", {"\"x\"", "null"}, {"1"}},
      {R"({"type":"string","nullable":true})", {"\"x\"", "null"}, {"1"}},
      {R"({"type":"string","minLength":2,"maxLength":3})",
       {"\"ab\"", "\"abc\"", "\"\xC3\xA9\xC3\xA9\"", "\"\\n\\t\""},
       {"\"a\"", "\"abcd\"", "\"\xC3\xA9\""}},
      {R"({"enum":["red","green",3,null]})",
       {"\"red\"", "\"green\"", "3", "null"},
       {"\"blue\"", "4"}},
      {R"({"const":{"a":[1,2]}})", {"{\"a\":[1,2]}"}, {"{\"a\":[1]}"}},
      {R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},
          "required":["name"],"additionalProperties":false})",
       {"{\"name\":\"x\"}", "{\"name\": \"x\", \"age\": 3}", "{ \"name\":\"x\" }"},
       {"{}", "{\"age\":3}", "{\"age\":3,\"name\":\"x\"}", "{\"name\":\"x\",\"zip\":1}",
        "{\"name\":1}"}},
      {R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},
          "c":{"type":"integer"}},"additionalProperties":false})",
       {"{}", "{\"a\":1}", "{\"b\":1}", "{\"a\":1,\"c\":2}", "{\"a\":1,\"b\":2,\"c\":3}"},
       {"{,\"b\":1}", "{\"a\":1,}", "{\"a\":1\"b\":2}"}},
      {R"({"type":"object","additionalProperties":{"type":"integer"}})",
       {"{}", "{\"x\":1,\"y\":2}"},
       {"{\"x\":\"1\"}"}},
      {R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3})",
       {"[1]", "[1,2,3]", "[1, 2]"},
       {"[]", "[1,2,3,4]", "[\"a\"]"}},
      {R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false})",
       {"[]", "[\"a\"]", "[\"a\",1]"},
       {"[1]", "[\"a\",1,2]"}},
      {R"({"type":"array","prefixItems":[{"type":"string"}],"items":{"type":"integer"},"minItems":2})",
       {"[\"a\",1]", "[\"a\",1,2,3]"},
       {"[\"a\"]", "[\"a\",\"b\"]"}},
      {R"({"anyOf":[{"type":"integer"},{"type":"object","properties":{"k":{"const":1}},"required":["k"],"additionalProperties":false}]})",
       {"5", "{\"k\":1}"},
       {"{\"k\":2}", "\"s\""}},
      {R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
          "next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},"required":["v","next"],
          "additionalProperties":false}},"$ref":"#/$defs/node"})",
       {"{\"v\":1,\"next\":null}", "{\"v\":1,\"next\":{\"v\":2,\"next\":null}}"},
       {"{\"v\":1}", "{\"v\":1,\"next\":{\"v\":2}}"}},
      {R"({"type":"object","properties":{"when":{"type":"string","format":"date-time",
          "description":"annotations are ignored"}},"required":["when"],"additionalProperties":false})",
       {"{\"when\":\"anything\"}"},
       {"{}"}},
  };
  for (const SchemaCase& c : cases) {
    const json schema = json::parse(c.schema);
    auto g = compile_json_schema(schema);
    ASSERT_TRUE(g.ok()) << c.schema << ": " << g.status().to_string();
    for (const char* v : c.valid) {
      // The table itself is checked against the validator, then the grammar against it.
      ASSERT_TRUE(validate(json::parse(v), schema, schema)) << "bad test case " << v;
      EXPECT_TRUE(matches(*g, v)) << c.schema << " should accept " << v;
    }
    for (const char* v : c.invalid) {
      EXPECT_FALSE(matches(*g, v)) << c.schema << " should reject " << v;
    }
  }
}

TEST(JsonSchemaGrammar, UnsupportedKeywordsAreNamed) {
  for (const char* kw : {"pattern", "minimum", "multipleOf", "patternProperties", "not", "if",
                         "minProperties", "uniqueItems", "bogus"}) {
    json s = {{"type", "string"}, {kw, 1}};
    auto g = compile_json_schema(s);
    ASSERT_FALSE(g.ok()) << kw;
    EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(g.status().to_string().find(kw), std::string::npos) << g.status().to_string();
  }
  // Nested: the path says where.
  auto g =
      compile_json_schema(json::parse(R"({"properties":{"a":{"type":"string","pattern":"x"}}})"));
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().to_string().find("#/properties/a"), std::string::npos);
}

TEST(JsonSchemaGrammar, BadSchemasAreErrors) {
  for (const char* s :
       {R"(false)", R"({"type":"strin"})", R"({"$ref":"#/$defs/missing"})",
        R"({"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/a"},{"type":"null"}]}},"$ref":"#/$defs/a"})",
        R"({"type":"array","minItems":3,"maxItems":2})", R"({"type":"string","maxLength":100000})",
        R"({"enum":[]})", R"({"type":"integer","enum":["a"]})", R"({"allOf":[{},{}]})",
        R"({"type":"object","required":["x"],"additionalProperties":false})", R"(3)"}) {
    auto g = compile_json_schema(std::string_view(s));
    EXPECT_FALSE(g.ok()) << s;
    if (!g.ok()) EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument) << s;
  }
  EXPECT_FALSE(compile_json_schema(std::string_view("{not json")).ok());
}

TEST(JsonSchemaGrammar, HostileSchemasGiveErrorsNotCrashes) {
  // Depth bombs: nesting beyond the compiler's limit is an error, not a stack overflow.
  json deep = {{"type", "integer"}};
  for (int i = 0; i < 300; ++i) deep = {{"type", "array"}, {"items", deep}};
  EXPECT_FALSE(compile_json_schema(deep).ok());
  // $ref cycles that consume nothing, through two definitions.
  EXPECT_FALSE(
      compile_json_schema(
          json::parse(
              R"({"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"})"))
          .ok());
  // Random mutations of a valid schema: each compiles or fails cleanly, and whatever
  // compiles still matches only JSON (checked on a few strings).
  const std::string base =
      R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"string","maxLength":3},"minItems":1,"maxItems":2},"b":{"anyOf":[{"type":"integer"},{"enum":["x",null]}]},"c":{"$ref":"#/$defs/c"}},"required":["a"],"additionalProperties":false,"$defs":{"c":{"type":["number","null"]}}})";
  std::mt19937 rng(5);
  const std::string alphabet = "{}[]\":,0123456789abcnrstuxyz-#/$";
  int compiled = 0;
  for (int i = 0; i < 1500; ++i) {
    std::string text = base;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t pos = rng() % text.size();
      switch (rng() % 3) {
        case 0:
          text[pos] = alphabet[rng() % alphabet.size()];
          break;
        case 1:
          text.erase(pos, 1 + rng() % 6);
          break;
        default:
          text.insert(pos, 1, alphabet[rng() % alphabet.size()]);
      }
    }
    auto g = compile_json_schema(std::string_view(text));
    if (!g.ok()) {
      EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument) << text;
      continue;
    }
    ++compiled;
    for (const char* bad : {"", "{", "{\"a\":[]", "nul", "[1,]"}) {
      EXPECT_FALSE(matches(*g, bad)) << text << " accepted " << bad;
    }
  }
  EXPECT_GT(compiled, 5);  // most mutations break the JSON itself
}

// ---- token masks ----

// A small vocabulary with multi-byte and grammar-spanning tokens, and one EOG token.
std::shared_ptr<TokenTrie> test_vocab(std::vector<std::string>* pieces_out = nullptr) {
  std::vector<std::string> pieces;
  for (int b = 0; b < 256; ++b) pieces.emplace_back(1, static_cast<char>(b));
  for (const char* p : {"{\"",         "\":",
                        "\": ",        "\",",
                        "\"}",         "}}",
                        "]}",          "true",
                        "false",       "null",
                        "name",        "age",
                        "\"name\":\"", "12",
                        "-0.",         "e+",
                        "\\u",         "\\n",
                        "\xC3\xA9",    "\xE2\x82",
                        "\xAC\"",      "\xF0\x9F\x98\x80",
                        ", ",          ",\n  ",
                        "\n",          "[1,",
                        "\"\"",        "ab",
                        "abc"}) {
    pieces.emplace_back(p);
  }
  pieces.emplace_back("");  // a control token: no bytes, never allowed
  const int32_t eog = static_cast<int32_t>(pieces.size());
  pieces.emplace_back("");
  if (pieces_out) *pieces_out = pieces;
  return std::make_shared<TokenTrie>(pieces, std::vector<int32_t>{eog});
}

// Walks random allowed tokens (uniform over the mask) until EOG; checks the mask against
// brute force at every step and returns the text.
std::string random_walk(const std::shared_ptr<const Grammar>& g, const TokenTrie& trie,
                        uint32_t seed, bool brute_force) {
  GrammarMatcher m(g);
  std::mt19937 rng(seed);
  std::vector<uint8_t> mask(trie.n_vocab());
  std::string out;
  for (int step = 0; step < 400; ++step) {
    m.fill_token_mask(trie, mask);
    std::vector<int32_t> allowed;
    for (size_t t = 0; t < mask.size(); ++t) {
      if (brute_force) {
        GrammarMatcher copy = m;
        const bool ok = copy.accept_token(trie, static_cast<int32_t>(t));
        EXPECT_EQ(ok, mask[t] != 0) << "token " << t << " after " << out;
      }
      if (mask[t]) allowed.push_back(static_cast<int32_t>(t));
    }
    EXPECT_FALSE(allowed.empty()) << out;
    if (allowed.empty()) break;
    // Lean towards closing once long, so walks end: prefer EOG and closing bytes later on.
    int32_t t = allowed[rng() % allowed.size()];
    if (step > 60) {
      for (int32_t a : allowed) {
        const std::string& p = trie.piece(a);
        if (a == trie.eog_tokens()[0] || p == "}" || p == "]" || p == "\"" || p == "null" ||
            p == "0") {
          if (rng() % 2) t = a;
        }
      }
    }
    if (t == trie.eog_tokens()[0]) return out;
    EXPECT_TRUE(m.accept_token(trie, t));
    out += trie.piece(t);
  }
  return out + "<unfinished>";
}

TEST(GrammarMask, EqualsBruteForceAndWalksEndInValidJson) {
  auto trie = test_vocab();
  const std::vector<std::string> schemas = {
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":8},
          "age":{"type":"integer"},"tags":{"type":"array","items":{"enum":["a","b"]},"maxItems":3},
          "ok":{"type":["boolean","null"]}},"required":["name","age"],"additionalProperties":false})",
      R"({"type":"array","prefixItems":[{"type":"number"},{"type":"string","minLength":1,"maxLength":4}],"items":false,"minItems":2})",
      R"({"anyOf":[{"type":"integer"},{"type":"array","items":{"type":"integer"},"maxItems":2}]})",
  };
  int finished = 0;
  for (const std::string& text : schemas) {
    const json schema = json::parse(text);
    auto g = compile_json_schema(schema);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    for (uint32_t seed = 1; seed <= 40; ++seed) {
      const std::string out = random_walk(*g, *trie, seed, seed <= 4);
      if (out.ends_with("<unfinished>")) continue;
      ++finished;
      const json v = json::parse(out, nullptr, false);
      ASSERT_FALSE(v.is_discarded()) << "not JSON: " << out;
      EXPECT_TRUE(validate(v, schema, schema)) << text << "\n" << out;
    }
  }
  EXPECT_GT(finished, 100);  // almost every walk ends within 400 tokens
}

TEST(GrammarMask, AnyJsonObjectWalksParse) {
  auto trie = test_vocab();
  auto g = json_object_grammar();
  int finished = 0;
  for (uint32_t seed = 100; seed < 160; ++seed) {
    const std::string out = random_walk(g, *trie, seed, seed < 103);
    if (out.ends_with("<unfinished>")) continue;
    ++finished;
    const json v = json::parse(out, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << out;
    EXPECT_TRUE(v.is_object()) << out;
  }
  EXPECT_GT(finished, 30);
}

TEST(GrammarMask, CompleteValueAllowsOnlyEndOfGeneration) {
  auto trie = test_vocab();
  GrammarMatcher m(json_object_grammar());
  ASSERT_TRUE(m.accept_bytes("{\"a\":1}"));
  std::vector<uint8_t> mask(trie->n_vocab());
  m.fill_token_mask(*trie, mask);
  for (size_t t = 0; t < mask.size(); ++t) {
    EXPECT_EQ(mask[t] != 0, static_cast<int32_t>(t) == trie->eog_tokens()[0]) << t;
  }
  // A number may still grow: both more digits and EOG.
  GrammarMatcher n(json_value_grammar());
  ASSERT_TRUE(n.accept_bytes("12"));
  n.fill_token_mask(*trie, mask);
  EXPECT_TRUE(mask['3']);
  EXPECT_TRUE(mask[static_cast<size_t>(trie->eog_tokens()[0])]);
  EXPECT_FALSE(mask['a']);
}

TEST(GrammarMask, RealVocabulary) {
  POWER_REQUIRE_SHARED();
  auto file =
      GgufFile::open(testing::shared_dir() + "/fixtures/tokenizer/ggml-vocab-llama-spm.gguf");
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  auto tok = text::Tokenizer::from_gguf(**file);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  auto trie = TokenTrie::from_tokenizer(**tok);
  ASSERT_EQ(trie->n_vocab(), 32000u);
  const json schema = json::parse(
      R"({"type":"object","properties":{"city":{"type":"string"},"temp":{"type":"number"}},
          "required":["city","temp"],"additionalProperties":false})");
  auto g = compile_json_schema(schema);
  ASSERT_TRUE(g.ok());
  GrammarMatcher m(*g);
  std::vector<uint8_t> mask(trie->n_vocab());
  // Inside a string nearly every token is allowed: the slowest case. Times are printed only.
  ASSERT_TRUE(m.accept_bytes("{\"city\": \"Par"));
  const auto t0 = std::chrono::steady_clock::now();
  m.fill_token_mask(*trie, mask);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  size_t n_allowed = 0;
  for (size_t t = 0; t < mask.size(); ++t) {
    GrammarMatcher copy = m;
    EXPECT_EQ(copy.accept_token(*trie, static_cast<int32_t>(t)), mask[t] != 0) << t;
    n_allowed += mask[t];
  }
  std::printf("mask over 32000 tokens inside a string: %.2f ms, %zu allowed\n", ms, n_allowed);
  EXPECT_GT(n_allowed, 20000u);
  EXPECT_FALSE(mask[static_cast<size_t>((*tok)->special().eos)]);
}

// ---- the sampler: grammar mask and logprobs ----

TEST(SamplerGrammar, RandomLogitsWithMaskAlwaysGiveValidJson) {
  auto trie = test_vocab();
  const int64_t n_vocab = static_cast<int64_t>(trie->n_vocab());
  // Every string, number and array is bounded, so each walk must end within the budget.
  const json schema = json::parse(
      R"({"type":"object","properties":{"id":{"type":"integer"},"name":{"type":"string","maxLength":6},
          "kind":{"enum":["a","b",null]},"xs":{"type":"array","items":{"type":"boolean"},"maxItems":3},
          "sub":{"type":"object","properties":{"v":{"type":"number"}},"required":["v"],"additionalProperties":false}},
          "required":["id","kind"],"additionalProperties":false})");
  auto g = compile_json_schema(schema);
  ASSERT_TRUE(g.ok());
  std::vector<float> logits(static_cast<size_t>(n_vocab));
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    SamplerParams p;
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = seed;
    Sampler s(p, n_vocab);
    s.set_grammar(*g, trie);
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::string out;
    bool ended = false;
    for (int step = 0; step < 2000 && !ended; ++step) {
      for (float& l : logits) l = normal(rng);
      const int32_t t = s.sample(logits.data());
      s.accept(t);
      ASSERT_FALSE(s.grammar_failed()) << out;
      if (t == trie->eog_tokens()[0]) {
        ended = true;
      } else {
        out += trie->piece(t);
      }
    }
    ASSERT_TRUE(ended) << "seed " << seed << ": " << out;
    const json v = json::parse(out, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << "seed " << seed << ": " << out;
    EXPECT_TRUE(validate(v, schema, schema)) << out;
  }
}

TEST(SamplerLogprobs, LogSoftmaxAfterBiasBeforeTemperature) {
  // logits 1, 2, 3, 0.5 with +3 on token 0 -> 4, 2, 3, 0.5; log Z = ln(e^4 + e^2 + e^3 + e^0.5).
  SamplerParams p;
  p.temperature = 0.0f;  // greedy: picks token 0
  p.logit_bias = {{0, 3.0f}};
  Sampler s(p, 4);
  s.set_logprobs(3);
  const float logits[4] = {1.0f, 2.0f, 3.0f, 0.5f};
  const int32_t t = s.sample(logits);
  s.accept(t);
  ASSERT_EQ(t, 0);
  const double log_z = std::log(std::exp(4.0) + std::exp(2.0) + std::exp(3.0) + std::exp(0.5));
  auto recs = s.take_logprobs();
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].chosen.token, 0);
  EXPECT_NEAR(recs[0].chosen.logprob, 4.0 - log_z, 1e-5);
  ASSERT_EQ(recs[0].top.size(), 3u);
  EXPECT_EQ(recs[0].top[0].token, 0);
  EXPECT_EQ(recs[0].top[1].token, 2);
  EXPECT_EQ(recs[0].top[2].token, 1);
  EXPECT_NEAR(recs[0].top[1].logprob, 3.0 - log_z, 1e-5);
  EXPECT_NEAR(recs[0].top[2].logprob, 2.0 - log_z, 1e-5);
  // Temperature does not change them: the same row at temperature 2 gives the same values.
  SamplerParams q = p;
  q.temperature = 2.0f;
  Sampler s2(q, 4);
  s2.set_logprobs(0);
  const int32_t t2 = s2.sample(logits);
  s2.accept(t2);
  auto r2 = s2.take_logprobs();
  ASSERT_EQ(r2.size(), 1u);
  EXPECT_TRUE(r2[0].top.empty());
  const double expect2 = logits[t2] + (t2 == 0 ? 3.0 : 0.0) - log_z;
  EXPECT_NEAR(r2[0].chosen.logprob, expect2, 1e-5);
  // Prompt tokens (accept without sample) record nothing.
  s2.accept(1);
  EXPECT_TRUE(s2.take_logprobs().empty());
}

TEST(SamplerLogprobs, GrammarMaskRenormalizes) {
  // Vocabulary: "{", "}", "x", EOG. At the start of a JSON object only "{" is allowed: its
  // log-probability under the masked row is 0 whatever the logits.
  std::vector<std::string> pieces = {"{", "}", "x", ""};
  auto trie = std::make_shared<TokenTrie>(pieces, std::vector<int32_t>{3});
  SamplerParams p;
  p.temperature = 0.0f;
  Sampler s(p, 4);
  s.set_grammar(json_object_grammar(), trie);
  s.set_logprobs(2);
  const float logits[4] = {-1.0f, 5.0f, 7.0f, 9.0f};
  EXPECT_EQ(s.sample(logits), 0);
  s.accept(0);
  auto recs = s.take_logprobs();
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_NEAR(recs[0].chosen.logprob, 0.0, 1e-6);
  ASSERT_EQ(recs[0].top.size(), 1u);  // banned tokens are not alternatives
  EXPECT_EQ(s.sample(logits), 1);     // then "}" (the only byte that closes "{" here)
  s.accept(1);
  EXPECT_EQ(s.sample(logits), 3);  // complete: only EOG
  s.accept(3);
  EXPECT_FALSE(s.grammar_failed());
}

}  // namespace
}  // namespace power::grammar
