#include "runtime/structured.h"

#include <map>
#include <mutex>

#include "engine/grammar.h"
#include "engine/json_schema.h"

namespace power::runtime {

namespace {

using json = nlohmann::ordered_json;

Status bad_field(std::string_view field, std::string_view what) {
  return Status(StatusCode::kInvalidArgument, std::string(what)).with("field", field);
}

// One TokenTrie per loaded vocabulary, built on the first constrained request.
std::shared_ptr<const grammar::TokenTrie> trie_for(
    const std::shared_ptr<const text::Tokenizer>& tok) {
  static std::mutex mu;
  static std::map<const text::Tokenizer*, std::pair<std::weak_ptr<const text::Tokenizer>,
                                                    std::shared_ptr<const grammar::TokenTrie>>>
      cache;
  std::lock_guard<std::mutex> lk(mu);
  for (auto it = cache.begin(); it != cache.end();) {
    it = it->second.first.expired() ? cache.erase(it) : std::next(it);
  }
  auto it = cache.find(tok.get());
  if (it != cache.end() && it->second.first.lock() == tok) return it->second.second;
  auto trie = grammar::TokenTrie::from_tokenizer(*tok);
  cache[tok.get()] = {tok, trie};
  return trie;
}

// The grammar of one forced tool call in the family's format: Hermes wraps the call object in
// <tool_call> tags, Llama 3 writes {"name", "parameters"}; the other families mark calls with
// control tokens a grammar over token bytes cannot produce, so they get a bare JSON array of
// one {"name", "arguments"} object (finish_structured parses that form too).
Result<std::shared_ptr<const grammar::Grammar>> tool_call_grammar(const json& tools,
                                                                  const std::string& only_name,
                                                                  chat::ToolCallFormat format) {
  grammar::GrammarBuilder b;
  grammar::JsonGrammarCompiler jc(b);
  const uint32_t w = jc.ws();
  const uint32_t call = b.declare("tool-call");
  const bool llama3 = format == chat::ToolCallFormat::kLlama3;
  size_t n = 0;
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& fn = tools[i]["function"];
    const std::string name = fn["name"].get<std::string>();
    if (!only_name.empty() && name != only_name) continue;
    const json params = fn.contains("parameters") ? fn["parameters"] : json::object();
    Result<uint32_t> p = jc.schema(params);
    if (!p.ok()) {
      return Status(p.status()).with("field", "tools[" + std::to_string(i) + "].parameters");
    }
    grammar::GrammarBuilder::Seq seq = b.literal("{\"name\":");
    seq.push_back(grammar::GrammarBuilder::ref(w));
    b.append_literal(seq, json(name).dump() + ",");
    seq.push_back(grammar::GrammarBuilder::ref(w));
    b.append_literal(seq, llama3 ? "\"parameters\":" : "\"arguments\":");
    seq.push_back(grammar::GrammarBuilder::ref(w));
    seq.push_back(grammar::GrammarBuilder::ref(*p));
    seq.push_back(grammar::GrammarBuilder::ref(w));
    b.append_literal(seq, "}");
    b.add_alt(call, std::move(seq));
    ++n;
  }
  if (n == 0) return bad_field("tool_choice", "tool_choice names a function that is not in tools");
  grammar::GrammarBuilder::Seq root;
  if (format == chat::ToolCallFormat::kHermes) {
    root = b.literal("<tool_call>\n");
    root.push_back(grammar::GrammarBuilder::ref(call));
    b.append_literal(root, "\n</tool_call>");
  } else if (llama3) {
    root = {grammar::GrammarBuilder::ref(call)};
  } else {
    root = b.literal("[");
    root.push_back(grammar::GrammarBuilder::ref(call));
    b.append_literal(root, "]");
  }
  return b.build(b.rule("root", {std::move(root)}));
}

}  // namespace

Result<json> chat_messages_json(const GenerateRequest& req) {
  json messages = json::array();
  for (size_t i = 0; i < req.messages.size(); ++i) {
    const ChatMessage& msg = req.messages[i];
    json m = {{"role", msg.role}, {"content", msg.content}};
    if (!msg.tool_calls_json.empty()) {
      json calls = json::parse(msg.tool_calls_json, nullptr, false);
      if (calls.is_discarded() || !calls.is_array()) {
        return Status(StatusCode::kInvalidArgument, "tool_calls must be a JSON array")
            .with("message", i);
      }
      // content stays a string ("" when the turn is only calls): templates such as ChatML
      // concatenate it, and those that test it treat "" like null.
      m["tool_calls"] = std::move(calls);
    }
    if (!msg.tool_call_id.empty()) m["tool_call_id"] = msg.tool_call_id;
    if (!msg.name.empty()) m["name"] = msg.name;
    messages.push_back(std::move(m));
  }
  return messages;
}

Status add_tools(const GenerateRequest& req, chat::ChatRenderOptions& options) {
  if (req.tools_json.empty()) return Status();
  json tools = json::parse(req.tools_json, nullptr, false);
  if (tools.is_discarded() || !tools.is_array()) {
    return bad_field("tools", "tools must be a JSON array");
  }
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& t = tools[i];
    if (!t.is_object() || t.value("type", "") != "function" || !t.contains("function") ||
        !t["function"].is_object() || !t["function"].contains("name") ||
        !t["function"]["name"].is_string()) {
      return bad_field("tools",
                       "each tool must be {\"type\":\"function\",\"function\":{\"name\"..}}")
          .with("index", i);
    }
  }
  if (!tools.empty()) options.tools = std::move(tools);
  return Status();
}

Result<StructuredState> setup_structured(const GenerateRequest& req,
                                         const std::shared_ptr<const text::Tokenizer>& tokenizer,
                                         const chat::ChatTemplate* chat, Sampler& sampler) {
  StructuredState st;
  st.tokenizer = tokenizer;
  if (req.top_logprobs < -1 || req.top_logprobs > 20) {
    return bad_field("top_logprobs", "top_logprobs must be between 0 and 20");
  }
  std::shared_ptr<const grammar::Grammar> g;
  switch (req.response_format.type) {
    case ResponseFormat::Type::kText:
      break;
    case ResponseFormat::Type::kJsonObject:
      g = grammar::json_object_grammar();
      break;
    case ResponseFormat::Type::kJsonSchema: {
      Result<std::shared_ptr<const grammar::Grammar>> r =
          grammar::compile_json_schema(std::string_view(req.response_format.schema_json));
      if (!r.ok()) return Status(r.status()).with("field", "response_format");
      g = *r;
      break;
    }
  }
  // Tools: tool_choice is "none", "auto", "required" or {"type":"function","function":{name}}.
  json tools = json::array();
  if (!req.tools_json.empty()) {
    chat::ChatRenderOptions ro;
    POWER_RETURN_IF_ERROR(add_tools(req, ro));
    if (ro.tools.is_array()) tools = ro.tools;
  }
  std::string choice = "auto", named;
  if (!req.tool_choice_json.empty()) {
    json c = json::parse(req.tool_choice_json, nullptr, false);
    if (c.is_string()) {
      choice = c.get<std::string>();
    } else if (c.is_object() && c.contains("function") && c["function"].is_object() &&
               c["function"].contains("name") && c["function"]["name"].is_string()) {
      choice = "function";
      named = c["function"]["name"].get<std::string>();
    } else {
      choice = "";
    }
    if (choice != "none" && choice != "auto" && choice != "required" && choice != "function") {
      return bad_field("tool_choice",
                       "tool_choice must be \"none\", \"auto\", \"required\" or "
                       "{\"type\":\"function\",\"function\":{\"name\":...}}");
    }
  }
  if (!tools.empty() && choice != "none") {
    if (req.messages.empty() || chat == nullptr) {
      return bad_field("tools", "tools need a chat request (messages)");
    }
    const chat::ChatTemplate* tmpl =
        chat->tool_use_variant() != nullptr ? chat->tool_use_variant() : chat;
    st.tool_format = chat::tool_call_format_for_template(tmpl->source());
    st.parse_tool_calls = true;
    st.single_tool_call = !req.parallel_tool_calls;
    if (choice == "required" || choice == "function") {
      if (g) {
        return bad_field("response_format",
                         "response_format cannot be combined with a forced tool_choice");
      }
      POWER_ASSIGN_OR_RETURN(g, tool_call_grammar(tools, named, st.tool_format));
      st.forced_tool_call = true;
    }
  } else if (tools.empty() && (choice == "required" || choice == "function")) {
    return bad_field("tool_choice", "tool_choice requires tools");
  }
  if (g) sampler.set_grammar(std::move(g), trie_for(tokenizer));
  if (req.top_logprobs >= 0) sampler.set_logprobs(req.top_logprobs);
  st.active = sampler.grammar() != nullptr || req.top_logprobs >= 0;
  return st;
}

void collect_logprobs(const text::Tokenizer& tokenizer, Sampler& sampler, int32_t token,
                      Completion& c) {
  std::vector<Sampler::SampledLogprobs> recs = sampler.take_logprobs();
  if (recs.empty() || tokenizer.is_eog(token)) return;
  for (const Sampler::SampledLogprobs& rec : recs) {
    TokenLogprobs out;
    out.chosen = {rec.chosen.token, tokenizer.token_to_piece(rec.chosen.token), rec.chosen.logprob};
    for (const Sampler::TokenLogprob& t : rec.top) {
      out.top.push_back({t.token, tokenizer.token_to_piece(t.token), t.logprob});
    }
    c.logprobs.push_back(std::move(out));
  }
}

void finish_structured(const StructuredState& st, Completion& c) {
  if (!st.parse_tool_calls || !st.tokenizer) return;
  std::vector<int32_t> ids;
  for (int32_t t : c.tokens) {
    if (!st.tokenizer->is_eog(t)) ids.push_back(t);
  }
  text::DecodeOptions o;
  o.render_special = true;
  o.strip_space_prefix = false;
  Result<std::string> text = st.tokenizer->decode(ids, o);
  if (!text.ok()) return;
  chat::ToolCallParse parse = chat::parse_tool_calls(*text, st.tool_format);
  if (parse.calls.empty() && st.forced_tool_call) {
    // The bare-array form of a forced call (see tool_call_grammar).
    parse = chat::parse_tool_calls("functools" + *text, chat::ToolCallFormat::kFireFunction);
  }
  if (parse.calls.empty()) return;
  if (st.single_tool_call) parse.calls.resize(1);
  for (size_t i = 0; i < parse.calls.size(); ++i) {
    chat::ParsedToolCall& p = parse.calls[i];
    c.tool_calls.push_back(
        {p.id.empty() ? "call_" + std::to_string(i) : p.id, p.name, p.arguments_json});
  }
  c.text = parse.content;
}

}  // namespace power::runtime
