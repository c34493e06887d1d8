#include "chat/tool_calls.h"

#include <nlohmann/json.hpp>

namespace power::chat {

namespace {

using json = nlohmann::ordered_json;

constexpr std::string_view kWs = " \t\r\n";

std::string trim(std::string_view s) {
  const size_t a = s.find_first_not_of(kWs);
  if (a == std::string_view::npos) return {};
  const size_t b = s.find_last_not_of(kWs);
  return std::string(s.substr(a, b - a + 1));
}

size_t skip_ws(std::string_view s, size_t pos) {
  while (pos < s.size() && kWs.find(s[pos]) != std::string_view::npos) ++pos;
  return pos;
}

// The end (exclusive) of the JSON object or array that starts at s[pos], found by bracket
// depth outside strings; npos when it does not close.
size_t json_end(std::string_view s, size_t pos) {
  if (pos >= s.size() || (s[pos] != '{' && s[pos] != '[')) return std::string_view::npos;
  int depth = 0;
  bool in_string = false;
  for (size_t i = pos; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

// Parses the JSON value at s[pos]; advances pos past it.
bool parse_json_at(std::string_view s, size_t& pos, json& out) {
  const size_t end = json_end(s, pos);
  if (end == std::string_view::npos) return false;
  out = json::parse(s.substr(pos, end - pos), nullptr, false);
  if (out.is_discarded()) return false;
  pos = end;
  return true;
}

// Arguments as compact JSON object text: an object, or a string holding one.
bool arguments_text(const json& args, std::string& out) {
  if (args.is_object()) {
    out = args.dump();
    return true;
  }
  if (args.is_string()) {
    json parsed = json::parse(args.get<std::string>(), nullptr, false);
    if (parsed.is_discarded() || !parsed.is_object()) return false;
    out = parsed.dump();
    return true;
  }
  return false;
}

// {"name": N, "arguments"|"parameters": {..}, "id"?: ..}
bool call_from_object(const json& o, ParsedToolCall& call) {
  if (!o.is_object() || !o.contains("name") || !o["name"].is_string()) return false;
  call.name = o["name"].get<std::string>();
  if (call.name.empty()) return false;
  const char* key = o.contains("arguments") ? "arguments" : "parameters";
  if (!o.contains(key)) {
    call.arguments_json = "{}";
  } else if (!arguments_text(o[key], call.arguments_json)) {
    return false;
  }
  if (o.contains("id") && o["id"].is_string()) call.id = o["id"].get<std::string>();
  return true;
}

bool calls_from_array(const json& a, std::vector<ParsedToolCall>& calls) {
  if (!a.is_array() || a.empty()) return false;
  std::vector<ParsedToolCall> out;
  for (const json& o : a) {
    ParsedToolCall c;
    if (!call_from_object(o, c)) return false;
    out.push_back(std::move(c));
  }
  calls.insert(calls.end(), out.begin(), out.end());
  return true;
}

// Calls framed as OPEN <json object> CLOSE (Hermes); CLOSE may be missing at the very end.
ToolCallParse parse_framed(std::string_view s, std::string_view open, std::string_view close) {
  ToolCallParse r;
  std::string content;
  size_t pos = 0;
  while (true) {
    const size_t at = s.find(open, pos);
    if (at == std::string_view::npos) break;
    size_t p = skip_ws(s, at + open.size());
    json o;
    ParsedToolCall c;
    if (!parse_json_at(s, p, o) || !call_from_object(o, c)) break;
    p = skip_ws(s, p);
    if (s.substr(p, close.size()) == close) {
      p += close.size();
    } else if (p != s.size()) {
      break;
    }
    content.append(s.substr(pos, at - pos));
    r.calls.push_back(std::move(c));
    pos = p;
  }
  if (r.calls.empty()) return {trim(s), {}};
  content.append(s.substr(pos));
  r.content = trim(content);
  return r;
}

ToolCallParse parse_llama3(std::string_view s) {
  std::string_view body = s;
  const std::string_view tag = "<|python_tag|>";
  std::string content;
  const size_t t = body.find(tag);
  if (t != std::string_view::npos) {
    content = trim(body.substr(0, t));
    body = body.substr(t + tag.size());
  }
  ToolCallParse r;
  size_t p = skip_ws(body, 0);
  while (p < body.size()) {
    json o;
    ParsedToolCall c;
    if (!parse_json_at(body, p, o) || !call_from_object(o, c)) return {trim(s), {}};
    r.calls.push_back(std::move(c));
    p = skip_ws(body, p);
    if (p < body.size() && body[p] == ';') p = skip_ws(body, p + 1);
  }
  if (r.calls.empty()) return {trim(s), {}};
  r.content = content;
  return r;
}

ToolCallParse parse_mistral(std::string_view s) {
  const std::string_view tag = "[TOOL_CALLS]", args = "[ARGS]";
  const size_t first = s.find(tag);
  if (first == std::string_view::npos) return {trim(s), {}};
  ToolCallParse r;
  size_t p = first;
  while (p < s.size() && s.substr(p, tag.size()) == tag) {
    p = skip_ws(s, p + tag.size());
    if (p < s.size() && s[p] == '[') {
      json a;
      if (!parse_json_at(s, p, a) || !calls_from_array(a, r.calls)) return {trim(s), {}};
    } else {
      const size_t a = s.find(args, p);
      if (a == std::string_view::npos) return {trim(s), {}};
      ParsedToolCall c;
      c.name = trim(s.substr(p, a - p));
      p = skip_ws(s, a + args.size());
      json o;
      if (c.name.empty() || !parse_json_at(s, p, o) || !arguments_text(o, c.arguments_json)) {
        return {trim(s), {}};
      }
      r.calls.push_back(std::move(c));
    }
    p = skip_ws(s, p);
  }
  if (p != s.size()) return {trim(s), {}};
  r.content = trim(s.substr(0, first));
  return r;
}

ToolCallParse parse_deepseek(std::string_view s) {
  const std::string_view begin = "<｜tool▁call▁begin｜>", sep = "<｜tool▁sep｜>",
                         end = "<｜tool▁call▁end｜>", section = "<｜tool▁calls▁begin｜>";
  ToolCallParse r;
  size_t pos = s.find(begin);
  if (pos == std::string_view::npos) return {trim(s), {}};
  size_t content_end = s.find(section);
  if (content_end == std::string_view::npos || content_end > pos) content_end = pos;
  while (pos != std::string_view::npos) {
    size_t p = pos + begin.size();
    const size_t q = s.find(sep, p);
    if (q == std::string_view::npos) return {trim(s), {}};
    ParsedToolCall c;
    std::string head = trim(s.substr(p, q - p));
    p = q + sep.size();
    if (head == "function") {  // R1 / V3: function<sep>NAME\n```json\n{..}\n```
      const size_t nl = s.find('\n', p);
      if (nl == std::string_view::npos) return {trim(s), {}};
      c.name = trim(s.substr(p, nl - p));
      p = skip_ws(s, nl);
      if (s.substr(p, 7) == "```json") p = skip_ws(s, p + 7);
    } else {
      c.name = head;
      p = skip_ws(s, p);
    }
    json o;
    if (c.name.empty() || !parse_json_at(s, p, o) || !arguments_text(o, c.arguments_json)) {
      return {trim(s), {}};
    }
    p = skip_ws(s, p);
    if (s.substr(p, 3) == "```") p = skip_ws(s, p + 3);
    if (s.substr(p, end.size()) != end) return {trim(s), {}};
    r.calls.push_back(std::move(c));
    pos = s.find(begin, p + end.size());
  }
  r.content = trim(s.substr(0, content_end));
  return r;
}

ToolCallParse parse_firefunction(std::string_view s) {
  const std::string_view tag = "functools";
  const size_t at = s.find(tag);
  if (at == std::string_view::npos) return {trim(s), {}};
  size_t p = skip_ws(s, at + tag.size());
  json a;
  ToolCallParse r;
  if (!parse_json_at(s, p, a) || !calls_from_array(a, r.calls)) return {trim(s), {}};
  r.content = trim(s.substr(0, at));
  return r;
}

ToolCallParse parse_functionary(std::string_view s) {
  // v3.1: <function=NAME>{..}</function>
  ToolCallParse r;
  std::string content;
  size_t pos = 0;
  const std::string_view open = "<function=", close = "</function>";
  while (true) {
    const size_t at = s.find(open, pos);
    if (at == std::string_view::npos) break;
    const size_t gt = s.find('>', at);
    if (gt == std::string_view::npos) break;
    ParsedToolCall c;
    c.name = trim(s.substr(at + open.size(), gt - at - open.size()));
    size_t p = skip_ws(s, gt + 1);
    json o;
    if (c.name.empty() || !parse_json_at(s, p, o) || !arguments_text(o, c.arguments_json)) break;
    p = skip_ws(s, p);
    if (s.substr(p, close.size()) == close) p += close.size();
    content.append(s.substr(pos, at - pos));
    r.calls.push_back(std::move(c));
    pos = p;
  }
  if (!r.calls.empty()) {
    content.append(s.substr(pos));
    r.content = trim(content);
    return r;
  }
  // v3.2: >>>NAME\n{..} segments; NAME "all" is plain content.
  if (s.find(">>>") == std::string_view::npos) return {trim(s), {}};
  pos = 0;
  while (pos < s.size()) {
    const size_t at = s.find(">>>", pos);
    if (at == std::string_view::npos) break;
    const size_t nl = s.find('\n', at);
    if (nl == std::string_view::npos) return {trim(s), {}};
    const std::string name = trim(s.substr(at + 3, nl - at - 3));
    const size_t next = s.find(">>>", nl);
    const std::string_view body =
        s.substr(nl + 1, (next == std::string_view::npos ? s.size() : next) - nl - 1);
    if (name == "all") {
      content.append(body);
    } else {
      ParsedToolCall c;
      c.name = name;
      size_t p = skip_ws(body, 0);
      json o;
      if (name.empty() || !parse_json_at(body, p, o) || !arguments_text(o, c.arguments_json) ||
          skip_ws(body, p) != body.size()) {
        return {trim(s), {}};
      }
      r.calls.push_back(std::move(c));
    }
    pos = next == std::string_view::npos ? s.size() : next;
  }
  if (r.calls.empty()) return {trim(s), {}};
  r.content = trim(content);
  return r;
}

ToolCallParse parse_kimi(std::string_view s) {
  const std::string_view section = "<|tool_calls_section_begin|>", begin = "<|tool_call_begin|>",
                         arg = "<|tool_call_argument_begin|>", end = "<|tool_call_end|>";
  size_t pos = s.find(begin);
  if (pos == std::string_view::npos) return {trim(s), {}};
  size_t content_end = s.find(section);
  if (content_end == std::string_view::npos || content_end > pos) content_end = pos;
  ToolCallParse r;
  while (pos != std::string_view::npos) {
    const size_t a = s.find(arg, pos);
    if (a == std::string_view::npos) return {trim(s), {}};
    ParsedToolCall c;
    c.id = trim(s.substr(pos + begin.size(), a - pos - begin.size()));
    // functions.NAME:INDEX
    std::string_view id = c.id;
    if (id.substr(0, 10) == "functions.") id.remove_prefix(10);
    const size_t colon = id.rfind(':');
    c.name = std::string(id.substr(0, colon));
    size_t p = skip_ws(s, a + arg.size());
    json o;
    if (c.name.empty() || !parse_json_at(s, p, o) || !arguments_text(o, c.arguments_json)) {
      return {trim(s), {}};
    }
    p = skip_ws(s, p);
    if (s.substr(p, end.size()) != end) return {trim(s), {}};
    r.calls.push_back(std::move(c));
    pos = s.find(begin, p);
  }
  r.content = trim(s.substr(0, content_end));
  return r;
}

}  // namespace

std::string_view tool_call_format_name(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::kAuto:
      return "auto";
    case ToolCallFormat::kHermes:
      return "hermes";
    case ToolCallFormat::kLlama3:
      return "llama3";
    case ToolCallFormat::kMistral:
      return "mistral";
    case ToolCallFormat::kDeepSeek:
      return "deepseek";
    case ToolCallFormat::kFireFunction:
      return "firefunction";
    case ToolCallFormat::kFunctionary:
      return "functionary";
    case ToolCallFormat::kKimi:
      return "kimi";
  }
  return "auto";
}

ToolCallFormat tool_call_format_for_template(std::string_view src) {
  auto has = [&](std::string_view x) { return src.find(x) != std::string_view::npos; };
  if (has("<tool_call>")) return ToolCallFormat::kHermes;
  if (has("[TOOL_CALLS]")) return ToolCallFormat::kMistral;
  if (has("tool▁call▁begin")) return ToolCallFormat::kDeepSeek;
  if (has("<|tool_call_begin|>")) return ToolCallFormat::kKimi;
  if (has("functools")) return ToolCallFormat::kFireFunction;
  if (has("<function=") || has(">>>")) return ToolCallFormat::kFunctionary;
  if (has("<|python_tag|>") || has("\"parameters\"")) return ToolCallFormat::kLlama3;
  return ToolCallFormat::kAuto;
}

ToolCallParse parse_tool_calls(std::string_view output, ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return parse_framed(output, "<tool_call>", "</tool_call>");
    case ToolCallFormat::kLlama3:
      return parse_llama3(output);
    case ToolCallFormat::kMistral:
      return parse_mistral(output);
    case ToolCallFormat::kDeepSeek:
      return parse_deepseek(output);
    case ToolCallFormat::kFireFunction:
      return parse_firefunction(output);
    case ToolCallFormat::kFunctionary:
      return parse_functionary(output);
    case ToolCallFormat::kKimi:
      return parse_kimi(output);
    case ToolCallFormat::kAuto:
      break;
  }
  for (ToolCallFormat f :
       {ToolCallFormat::kHermes, ToolCallFormat::kMistral, ToolCallFormat::kDeepSeek,
        ToolCallFormat::kKimi, ToolCallFormat::kFireFunction, ToolCallFormat::kFunctionary,
        ToolCallFormat::kLlama3}) {
    ToolCallParse r = parse_tool_calls(output, f);
    if (!r.calls.empty()) return r;
  }
  return {trim(output), {}};
}

}  // namespace power::chat
