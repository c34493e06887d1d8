// The Jinja-subset interpreter: feature snippets against Python jinja2's output
// (jinja_cases.json / expected.json, made by gen_expected.py), then limits and errors.
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "chat/jinja.h"
#include "test_data.h"

namespace power::chat::jinja {
namespace {

using nlohmann::ordered_json;
using power::chat::testing::read_json;
using power::chat::testing::test_name;

Result<std::string> render(std::string_view source, const ordered_json& context = nullptr,
                           const JinjaLimits& limits = {}) {
  Result<Template> t = Template::parse(source, limits);
  if (!t.ok()) return t.status();
  RenderOptions options;
  std::tm tm{};
  tm.tm_year = 2024 - 1900;
  tm.tm_mon = 6;
  tm.tm_mday = 26;
  tm.tm_hour = 12;
  tm.tm_isdst = -1;
  options.now = std::chrono::system_clock::from_time_t(std::mktime(&tm));
  return t->render(context, options);
}

struct SnippetCase {
  std::string name;
  std::string source;
  ordered_json context;
  ordered_json expected;  // {"output": ...} or {"error": ...}
};

std::vector<SnippetCase> load_snippets() {
  ordered_json cases = read_json("jinja_cases.json");
  ordered_json expected = read_json("expected.json")["jinja"];
  std::vector<SnippetCase> out;
  for (const auto& c : cases["cases"]) {
    std::string name = c["name"];
    out.push_back({name, c["template"], c["context"], expected[name]});
  }
  return out;
}

void PrintTo(const SnippetCase& c, std::ostream* os) {
  *os << c.name;
}

class JinjaSnippet : public ::testing::TestWithParam<SnippetCase> {};

TEST_P(JinjaSnippet, MatchesPythonJinja2) {
  const SnippetCase& c = GetParam();
  Result<std::string> out = render(c.source, c.context);
  if (c.expected.contains("output")) {
    ASSERT_TRUE(out.ok()) << out.status().to_string() << "\ntemplate: " << c.source;
    EXPECT_EQ(*out, c.expected["output"].get<std::string>()) << "template: " << c.source;
  } else {
    ASSERT_FALSE(out.ok()) << "expected an error, got: " << *out;
  }
}

INSTANTIATE_TEST_SUITE_P(Features, JinjaSnippet, ::testing::ValuesIn(load_snippets()),
                         [](const auto& info) { return test_name(info.param.name); });

void expect_error(const Result<std::string>& r, StatusCode code, std::string_view needle) {
  ASSERT_FALSE(r.ok()) << "expected an error containing '" << needle << "', got output of "
                       << r->size() << " bytes";
  EXPECT_EQ(r.status().code(), code) << r.status().to_string();
  EXPECT_NE(r.status().to_string().find(needle), std::string::npos) << r.status().to_string();
}

TEST(JinjaLimits, StepLimitStopsLongLoops) {
  expect_error(render("{% for i in range(1000000000) %}x{% endfor %}"),
               StatusCode::kResourceExhausted, "step limit");
  expect_error(
      render("{% for i in range(2000) %}{% for j in range(2000) %}{% endfor %}{% endfor %}"),
      StatusCode::kResourceExhausted, "step limit");
  JinjaLimits small;
  small.max_steps = 1000;
  expect_error(render("{% for i in range(500) %}{{ i }}{% endfor %}", nullptr, small),
               StatusCode::kResourceExhausted, "step limit");
}

TEST(JinjaLimits, RecursionDepth) {
  expect_error(render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"),
               StatusCode::kResourceExhausted, "recursion depth");
  JinjaLimits shallow;
  shallow.max_depth = 8;
  EXPECT_TRUE(render("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% endif %}{{ n }}{% endmacro %}"
                     "{{ f(5) }}",
                     nullptr, shallow)
                  .ok());
  expect_error(render("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% endif %}{% endmacro %}"
                      "{{ f(20) }}",
                      nullptr, shallow),
               StatusCode::kResourceExhausted, "recursion depth");
}

TEST(JinjaLimits, OutputAndStringSize) {
  JinjaLimits limits;
  limits.max_output_bytes = 1 << 20;
  expect_error(render("{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}", nullptr, limits),
               StatusCode::kResourceExhausted, "output exceeds");
  expect_error(render("{{ 'x' * 100000000000 }}", nullptr, limits), StatusCode::kResourceExhausted,
               "bytes");
  expect_error(render("{{ 'a\nb'|indent(100000000000) }}", nullptr, limits),
               StatusCode::kResourceExhausted, "bytes");
  expect_error(render("{{ [1]|batch(100000000000, 0)|list }}", nullptr, limits),
               StatusCode::kResourceExhausted, "step limit");
  expect_error(render("{{ 'x'|center(100000000000) }}", nullptr, limits),
               StatusCode::kResourceExhausted, "bytes");
  expect_error(render("{{ '{:>100000}'.format(1) }}", nullptr, limits), StatusCode::kUnsupported,
               "format spec");
  expect_error(render("{% set ns = namespace(s='xy') %}{% for i in range(64) %}"
                      "{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                      nullptr, limits),
               StatusCode::kResourceExhausted, "bytes");
  expect_error(render("{% set ns = namespace(l=[1]) %}{% for i in range(64) %}"
                      "{% set ns.l = ns.l + ns.l %}{% endfor %}"),
               StatusCode::kResourceExhausted, "step limit");
}

TEST(JinjaLimits, DeepNestingIsAnErrorNotACrash) {
  std::string parens = "{{ " + std::string(20000, '(') + "1" + std::string(20000, ')') + " }}";
  expect_error(render(parens), StatusCode::kResourceExhausted, "nesting");
  std::string ifs;
  for (int i = 0; i < 5000; ++i) ifs += "{% if true %}";
  expect_error(render(ifs), StatusCode::kResourceExhausted, "nesting");
  // A value nested 200k levels deep, built by a loop: rendering works, printing it is an
  // error, and destroying it must not overflow the stack.
  const char* deep =
      "{% set ns = namespace(x=[]) %}{% for i in range(200000) %}{% set ns.x = [ns.x] %}"
      "{% endfor %}ok";
  Result<std::string> r = render(deep);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, "ok");
  expect_error(render("{% set ns = namespace(x=[]) %}{% for i in range(1000) %}"
                      "{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}"),
               StatusCode::kResourceExhausted, "nesting");
  ordered_json deep_json = ordered_json::array();
  for (int i = 0; i < 1000; ++i) deep_json = ordered_json::array({deep_json});
  expect_error(render("{{ x }}", {{"x", deep_json}}), StatusCode::kResourceExhausted, "deep");
}

// Reference cycles a template builds are freed after the render (the sanitizer build's leak
// checker fails this test otherwise).
TEST(JinjaLimits, ReferenceCyclesDoNotLeak) {
  Result<std::string> r = render(
      "{% set ns = namespace(items=[]) %}{% set ns.me = ns %}{% do ns.items.append(ns) %}"
      "{% set l = [1] %}{% do l.append(l) %}{% do l.append(l.append) %}"
      "{% set d = {'k': []} %}{% do d['k'].append(d) %}"
      "{% for i in range(100) %}{% set ns.x = [ns, ns.x] %}{% endfor %}ok");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, "ok");
}

TEST(JinjaErrors, SyntaxErrorsCarryLineAndColumn) {
  Result<std::string> r = render("Hello\n{% if x %}\nnever closed");
  expect_error(r, StatusCode::kInvalidArgument, "endif");
  r = render("line one\n  {{ 1 + }}");
  expect_error(r, StatusCode::kInvalidArgument, "line=2");
  EXPECT_NE(r.status().to_string().find("column=10"), std::string::npos) << r.status().to_string();
  expect_error(render("{% frobnicate %}"), StatusCode::kInvalidArgument,
               "unknown tag 'frobnicate'");
  expect_error(render("a\n\n{{ 'unterminated }}"), StatusCode::kInvalidArgument, "line=3");
  expect_error(render("{% for x in [1] %}{% endif %}"), StatusCode::kInvalidArgument, "endif");
  expect_error(render("{% break %}"), StatusCode::kInvalidArgument, "outside of a for loop");
  expect_error(render("{{ x ]}"), StatusCode::kInvalidArgument, "unexpected ']'");
  expect_error(render("{% include 'x' %}"), StatusCode::kUnsupported, "include");
  expect_error(render("{# never closed"), StatusCode::kInvalidArgument, "comment");
  expect_error(render(std::string("bad \xff byte")), StatusCode::kInvalidArgument, "UTF-8");
}

TEST(JinjaErrors, UnknownFilterAndTestAreNamed) {
  Result<std::string> r = render("ok\n{{ x | frobnicate }}");
  expect_error(r, StatusCode::kInvalidArgument, "unknown filter 'frobnicate'");
  EXPECT_NE(r.status().to_string().find("line=2"), std::string::npos);
  expect_error(render("{{ x is frobnicated }}"), StatusCode::kInvalidArgument,
               "unknown test 'frobnicated'");
  expect_error(render("{{ [1] | map('nope') | list }}"), StatusCode::kInvalidArgument,
               "unknown filter 'nope'");
}

TEST(JinjaErrors, RaiseExceptionSurfacesTheTemplatesMessage) {
  Result<std::string> r = render(
      "{% if messages|length == 0 %}\n  {{ raise_exception('No messages, sorry!') }}\n"
      "{% endif %}",
      {{"messages", ordered_json::array()}});
  expect_error(r, StatusCode::kInvalidArgument, "No messages, sorry!");
  EXPECT_NE(r.status().to_string().find("line=2"), std::string::npos) << r.status().to_string();
}

TEST(JinjaErrors, RuntimeTypeErrors) {
  expect_error(render("{{ missing.attr }}"), StatusCode::kInvalidArgument,
               "'missing' is undefined");
  expect_error(render("{{ 'a' + 1 }}"), StatusCode::kInvalidArgument, "concatenate");
  expect_error(render("{{ 1 / 0 }}"), StatusCode::kInvalidArgument, "division by zero");
  expect_error(render("{{ none.x() }}"), StatusCode::kInvalidArgument, "has no attribute");
  expect_error(render("{{ 5 in 5 }}"), StatusCode::kInvalidArgument, "not iterable");
  expect_error(render("{{ 9223372036854775807 + 1 }}"), StatusCode::kOutOfRange, "overflow");
  expect_error(render("{% set x.y = 1 %}", {{"x", ordered_json::object()}}),
               StatusCode::kInvalidArgument, "namespace");
  expect_error(render("{{ 1 }}", ordered_json::array()), StatusCode::kInvalidArgument,
               "JSON object");
}

TEST(Jinja, ConcurrentRendersShareOneTemplate) {
  Result<Template> t = Template::parse(
      "{% for m in messages %}{{ m.role }}:{{ m.content|upper }};{% endfor %}{{ n }}");
  ASSERT_TRUE(t.ok());
  std::vector<std::thread> threads;
  std::vector<std::string> outputs(8);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      ordered_json ctx = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"n", i}};
      for (int k = 0; k < 200; ++k) {
        Result<std::string> out = t->render(ctx);
        outputs[static_cast<size_t>(i)] = out.ok() ? *out : out.status().to_string();
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(outputs[static_cast<size_t>(i)], "user:HI;" + std::to_string(i));
}

}  // namespace
}  // namespace power::chat::jinja
