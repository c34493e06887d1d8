#include "engine/json_schema.h"

#include <array>
#include <cmath>
#include <set>
#include <vector>

namespace power::grammar {

namespace {

using json = nlohmann::ordered_json;
using Seq = GrammarBuilder::Seq;

constexpr int kMaxStringBound = 4096;
constexpr int kMaxArrayBound = 1024;
constexpr int kMaxDepth = 64;  // nesting of schemas inside one another (not of $refs)

const std::set<std::string, std::less<>>& annotation_keywords() {
  static const std::set<std::string, std::less<>> k = {
      "title",    "description", "default",  "examples",  "$schema", "$id",
      "$comment", "deprecated",  "readOnly", "writeOnly", "format"};
  return k;
}

const std::set<std::string, std::less<>>& supported_keywords() {
  static const std::set<std::string, std::less<>> k = {
      "type",     "properties", "required", "additionalProperties",
      "enum",     "const",      "items",    "prefixItems",
      "minItems", "maxItems",   "anyOf",    "oneOf",
      "allOf",    "$ref",       "$defs",    "definitions",
      "nullable", "minLength",  "maxLength"};
  return k;
}

Status bad(std::string_view what, const std::string& path) {
  return Status(StatusCode::kInvalidArgument, std::string(what)).with("path", path);
}

Result<int> bound(const json& s, const char* key, int limit, const std::string& path) {
  if (!s.contains(key)) return -1;
  const json& v = s[key];
  if (!v.is_number_integer() &&
      !(v.is_number_float() && std::floor(v.get<double>()) == v.get<double>())) {
    return bad("schema keyword must be a non-negative integer", path).with("keyword", key);
  }
  const double d = v.get<double>();
  if (d < 0) return bad("schema keyword must be a non-negative integer", path).with("keyword", key);
  if (d > limit) {
    return bad("schema bound is larger than Power generates", path)
        .with("keyword", key)
        .with("limit", limit);
  }
  return static_cast<int>(d);
}

// Whether a JSON value has a JSON Schema type.
bool has_type(const json& v, const std::string& type) {
  if (type == "null") return v.is_null();
  if (type == "boolean") return v.is_boolean();
  if (type == "string") return v.is_string();
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "number") return v.is_number();
  if (type == "integer") {
    return v.is_number_integer() ||
           (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
  }
  return false;
}

}  // namespace

uint32_t JsonGrammarCompiler::ws() {
  if (ws_ < 0) {
    ByteSet indent;
    indent.add(' ');
    indent.add('\t');
    const uint32_t spaces = b_.repeat("ws-indent", {b_.bytes(indent)}, 0, 20);
    ws_ = b_.rule("ws", {Seq{}, b_.literal(" "), Seq{b_.byte('\n'), GrammarBuilder::ref(spaces)}});
  }
  return static_cast<uint32_t>(ws_);
}

uint32_t JsonGrammarCompiler::string_char() {
  if (char_ >= 0) return static_cast<uint32_t>(char_);
  auto set = [&](std::initializer_list<std::pair<int, int>> ranges) {
    ByteSet s;
    for (auto [lo, hi] : ranges) s.add_range(static_cast<uint8_t>(lo), static_cast<uint8_t>(hi));
    return b_.bytes(s);
  };
  const Sym cont = set({{0x80, 0xBF}});
  const Sym hex = set({{'0', '9'}, {'a', 'f'}, {'A', 'F'}});
  // \uXXXX without lone surrogates: a high surrogate must be followed by a low one.
  const uint32_t uesc = b_.rule(
      "json-uescape",
      {Seq{set({{'0', '9'}, {'a', 'c'}, {'A', 'C'}, {'e', 'f'}, {'E', 'F'}}), hex, hex, hex},
       Seq{set({{'d', 'd'}, {'D', 'D'}}), set({{'0', '7'}}), hex, hex},
       Seq{set({{'d', 'd'}, {'D', 'D'}}), set({{'8', '9'}, {'a', 'b'}, {'A', 'B'}}), hex, hex,
           b_.byte('\\'), b_.byte('u'), set({{'d', 'd'}, {'D', 'D'}}),
           set({{'c', 'f'}, {'C', 'F'}}), hex, hex}});
  // One code point: an unescaped character (exactly well-formed UTF-8) or an escape.
  char_ = b_.rule("json-char",
                  {Seq{set({{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x7F}})},
                   Seq{set({{0xC2, 0xDF}}), cont}, Seq{b_.byte(0xE0), set({{0xA0, 0xBF}}), cont},
                   Seq{set({{0xE1, 0xEC}, {0xEE, 0xEF}}), cont, cont},
                   Seq{b_.byte(0xED), set({{0x80, 0x9F}}), cont},
                   Seq{b_.byte(0xF0), set({{0x90, 0xBF}}), cont, cont},
                   Seq{set({{0xF1, 0xF3}}), cont, cont, cont},
                   Seq{b_.byte(0xF4), set({{0x80, 0x8F}}), cont, cont},
                   Seq{b_.byte('\\'), set({{'"', '"'},
                                           {'\\', '\\'},
                                           {'/', '/'},
                                           {'b', 'b'},
                                           {'f', 'f'},
                                           {'n', 'n'},
                                           {'r', 'r'},
                                           {'t', 't'}})},
                   Seq{b_.byte('\\'), b_.byte('u'), GrammarBuilder::ref(uesc)}});
  return static_cast<uint32_t>(char_);
}

uint32_t JsonGrammarCompiler::string_rule(int min_len, int max_len) {
  const bool plain = min_len <= 0 && max_len < 0;
  if (plain && string_ >= 0) return static_cast<uint32_t>(string_);
  const Sym q = b_.byte('"');
  const uint32_t body = b_.repeat("json-string-chars", {GrammarBuilder::ref(string_char())},
                                  std::max(min_len, 0), max_len);
  const uint32_t r = b_.rule("json-string", {Seq{q, GrammarBuilder::ref(body), q}});
  if (plain) string_ = r;
  return r;
}

uint32_t JsonGrammarCompiler::number_rule(bool integer) {
  int64_t& cached = integer ? integer_ : number_;
  if (cached >= 0) return static_cast<uint32_t>(cached);
  ByteSet digit, digit19;
  digit.add_range('0', '9');
  digit19.add_range('1', '9');
  const Sym d = b_.bytes(digit);
  const uint32_t more = b_.repeat("json-digits15", {d}, 0, 15);
  const uint32_t minus = b_.rule("json-minus", {Seq{}, b_.literal("-")});
  const uint32_t int_part = b_.rule(
      "json-int", {Seq{GrammarBuilder::ref(minus), b_.byte('0')},
                   Seq{GrammarBuilder::ref(minus), b_.bytes(digit19), GrammarBuilder::ref(more)}});
  if (integer) {
    cached = int_part;
    return int_part;
  }
  const uint32_t frac_digits = b_.repeat("json-frac-digits", {d}, 1, 16);
  const uint32_t frac =
      b_.rule("json-frac", {Seq{}, Seq{b_.byte('.'), GrammarBuilder::ref(frac_digits)}});
  ByteSet e, sign;
  e.add('e');
  e.add('E');
  sign.add('+');
  sign.add('-');
  const uint32_t opt_sign = b_.rule("json-exp-sign", {Seq{}, Seq{b_.bytes(sign)}});
  const uint32_t exp_digits = b_.repeat("json-exp-digits", {d}, 1, 2);
  const uint32_t exp = b_.rule("json-exp", {Seq{}, Seq{b_.bytes(e), GrammarBuilder::ref(opt_sign),
                                                       GrammarBuilder::ref(exp_digits)}});
  cached = b_.rule("json-number", {Seq{GrammarBuilder::ref(int_part), GrammarBuilder::ref(frac),
                                       GrammarBuilder::ref(exp)}});
  return static_cast<uint32_t>(cached);
}

uint32_t JsonGrammarCompiler::any_value() {
  if (value_ >= 0) return static_cast<uint32_t>(value_);
  using G = GrammarBuilder;
  const uint32_t value = b_.declare("json-value");
  value_ = value;
  const uint32_t w = ws();
  const uint32_t str = string_rule();
  // object ::= "{" ws "}" | "{" ws member mrest;  mrest ::= ws "}" | ws "," ws member mrest
  const uint32_t member =
      b_.rule("json-member", {Seq{G::ref(str), G::ref(w), b_.byte(':'), G::ref(w), G::ref(value)}});
  const uint32_t mrest = b_.declare("json-members");
  b_.add_alt(mrest, {G::ref(w), b_.byte('}')});
  b_.add_alt(mrest, {G::ref(w), b_.byte(','), G::ref(w), G::ref(member), G::ref(mrest)});
  object_ = b_.rule("json-object", {Seq{b_.byte('{'), G::ref(w), b_.byte('}')},
                                    Seq{b_.byte('{'), G::ref(w), G::ref(member), G::ref(mrest)}});
  const uint32_t arest = b_.declare("json-elements");
  b_.add_alt(arest, {G::ref(w), b_.byte(']')});
  b_.add_alt(arest, {G::ref(w), b_.byte(','), G::ref(w), G::ref(value), G::ref(arest)});
  const uint32_t array =
      b_.rule("json-array", {Seq{b_.byte('['), G::ref(w), b_.byte(']')},
                             Seq{b_.byte('['), G::ref(w), G::ref(value), G::ref(arest)}});
  b_.add_alt(value, {G::ref(static_cast<uint32_t>(object_))});
  b_.add_alt(value, {G::ref(array)});
  b_.add_alt(value, {G::ref(str)});
  b_.add_alt(value, {G::ref(number_rule(false))});
  b_.add_alt(value, b_.literal("true"));
  b_.add_alt(value, b_.literal("false"));
  b_.add_alt(value, b_.literal("null"));
  return value;
}

uint32_t JsonGrammarCompiler::any_object() {
  any_value();
  return static_cast<uint32_t>(object_);
}

uint32_t JsonGrammarCompiler::literal_value(const json& value) {
  return b_.rule("json-literal", {b_.literal(value.dump())});
}

Result<uint32_t> JsonGrammarCompiler::schema(const json& s) {
  const json* saved = root_;
  auto saved_refs = std::move(refs_);
  refs_.clear();
  root_ = &s;
  Result<uint32_t> r = compile(s, "#");
  root_ = saved;
  refs_ = std::move(saved_refs);
  return r;
}

Result<uint32_t> JsonGrammarCompiler::resolve_ref(const std::string& ref, const std::string& path) {
  auto it = refs_.find(ref);
  if (it != refs_.end()) return it->second;
  if (ref.empty() || ref[0] != '#') {
    return bad("only $ref into the same schema (\"#...\") is supported", path).with("$ref", ref);
  }
  const json* target = nullptr;
  try {
    target = &root_->at(nlohmann::ordered_json::json_pointer(ref.substr(1)));
  } catch (const std::exception&) {
    return bad("$ref does not resolve", path).with("$ref", ref);
  }
  const uint32_t r = b_.declare("ref " + ref);
  refs_.emplace(ref, r);
  POWER_ASSIGN_OR_RETURN(uint32_t body, compile(*target, ref));
  b_.add_alt(r, {GrammarBuilder::ref(body)});
  return r;
}

Result<uint32_t> JsonGrammarCompiler::compile(const json& s, const std::string& path) {
  if (s.is_boolean()) {
    if (s.get<bool>()) return any_value();
    return bad("schema `false` allows no value", path);
  }
  if (!s.is_object()) return bad("a schema must be an object or a boolean", path);
  if (++depth_ > kMaxDepth) {
    --depth_;
    return bad("schema nests too deeply", path).with("limit", kMaxDepth);
  }
  struct DepthGuard {
    int& d;
    ~DepthGuard() { --d; }
  } guard{depth_};

  // Every keyword must be known; the first unsupported one is named.
  std::vector<std::string> active;  // keywords other than annotations and $defs
  for (auto it = s.begin(); it != s.end(); ++it) {
    const std::string& k = it.key();
    if (annotation_keywords().count(k)) continue;
    if (!supported_keywords().count(k)) {
      return bad("unsupported JSON Schema keyword", path).with("keyword", k);
    }
    if (k != "$defs" && k != "definitions") active.push_back(k);
  }
  const bool nullable =
      s.contains("nullable") && s["nullable"].is_boolean() && s["nullable"].get<bool>();
  if (s.contains("nullable") && !s["nullable"].is_boolean())
    return bad("nullable must be a boolean", path);
  auto with_null = [&](uint32_t r) -> uint32_t {
    if (!nullable) return r;
    return b_.rule("nullable", {Seq{GrammarBuilder::ref(r)}, b_.literal("null")});
  };
  auto only = [&](const char* key) -> Status {
    for (const std::string& k : active) {
      if (k != key && k != "nullable") {
        return bad("keyword cannot be combined with other constraints here", path)
            .with("keyword", key)
            .with("other", k);
      }
    }
    return Status();
  };

  if (s.contains("$ref")) {
    POWER_RETURN_IF_ERROR(only("$ref"));
    if (!s["$ref"].is_string()) return bad("$ref must be a string", path);
    POWER_ASSIGN_OR_RETURN(uint32_t r, resolve_ref(s["$ref"].get<std::string>(), path));
    return with_null(r);
  }
  for (const char* key : {"anyOf", "oneOf", "allOf"}) {
    if (!s.contains(key)) continue;
    POWER_RETURN_IF_ERROR(only(key));
    const json& list = s[key];
    if (!list.is_array() || list.empty())
      return bad("must be a non-empty array", path).with("keyword", key);
    if (std::string_view(key) == "allOf" && list.size() != 1) {
      return bad("allOf with more than one schema is not supported", path).with("keyword", "allOf");
    }
    const uint32_t r = b_.declare(std::string(key) + " " + path);
    for (size_t i = 0; i < list.size(); ++i) {
      POWER_ASSIGN_OR_RETURN(uint32_t alt,
                             compile(list[i], path + "/" + key + "/" + std::to_string(i)));
      b_.add_alt(r, {GrammarBuilder::ref(alt)});
    }
    return with_null(r);
  }

  std::vector<std::string> types;
  if (s.contains("type")) {
    const json& t = s["type"];
    if (t.is_string()) {
      types.push_back(t.get<std::string>());
    } else if (t.is_array() && !t.empty()) {
      for (const json& x : t) {
        if (!x.is_string()) return bad("type must be a string or an array of strings", path);
        types.push_back(x.get<std::string>());
      }
    } else {
      return bad("type must be a string or an array of strings", path);
    }
    static const std::set<std::string, std::less<>> known = {"null",   "boolean", "object", "array",
                                                             "number", "integer", "string"};
    for (const std::string& x : types) {
      if (!known.count(x)) return bad("unknown type", path).with("type", x);
    }
  }
  if (nullable && !types.empty()) types.push_back("null");

  if (s.contains("enum") || s.contains("const")) {
    std::vector<json> values;
    if (s.contains("const")) values.push_back(s["const"]);
    if (s.contains("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty())
        return bad("enum must be a non-empty array", path);
      if (s.contains("const")) return bad("enum and const together are not supported", path);
      for (const json& v : s["enum"]) values.push_back(v);
    }
    const uint32_t r = b_.declare("enum " + path);
    size_t n = 0;
    for (const json& v : values) {
      bool ok = types.empty();
      for (const std::string& t : types) ok = ok || has_type(v, t);
      if (!ok) continue;
      b_.add_alt(r, b_.literal(v.dump()));
      ++n;
    }
    if (nullable) {
      b_.add_alt(r, b_.literal("null"));
      ++n;
    }
    if (n == 0) return bad("no enum/const value has the schema's type", path);
    return r;
  }

  if (types.empty()) {
    // No type: infer one from the keywords, else any value.
    if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties")) {
      types.push_back("object");
    } else if (s.contains("items") || s.contains("prefixItems") || s.contains("minItems") ||
               s.contains("maxItems")) {
      types.push_back("array");
    } else if (s.contains("minLength") || s.contains("maxLength")) {
      types.push_back("string");
    } else {
      return with_null(any_value());
    }
    if (nullable) types.push_back("null");
  }
  const uint32_t r = b_.declare("type " + path);
  for (const std::string& t : types) {
    POWER_ASSIGN_OR_RETURN(uint32_t alt, compile_type(t, s, path));
    b_.add_alt(r, {GrammarBuilder::ref(alt)});
  }
  return r;
}

Result<uint32_t> JsonGrammarCompiler::compile_type(const std::string& type, const json& s,
                                                   const std::string& path) {
  if (type == "null") return b_.rule("null", {b_.literal("null")});
  if (type == "boolean") return b_.rule("boolean", {b_.literal("true"), b_.literal("false")});
  if (type == "integer") return number_rule(true);
  if (type == "number") return number_rule(false);
  if (type == "string") {
    POWER_ASSIGN_OR_RETURN(int min_len, bound(s, "minLength", kMaxStringBound, path));
    POWER_ASSIGN_OR_RETURN(int max_len, bound(s, "maxLength", kMaxStringBound, path));
    if (max_len >= 0 && min_len > max_len) return bad("minLength exceeds maxLength", path);
    return string_rule(std::max(min_len, 0), max_len);
  }
  if (type == "object") return compile_object(s, path);
  return compile_array(s, path);
}

Result<uint32_t> JsonGrammarCompiler::compile_object(const json& s, const std::string& path) {
  using G = GrammarBuilder;
  const uint32_t w = ws();
  const json empty = json::object();
  const json& props = s.contains("properties") ? s["properties"] : empty;
  if (!props.is_object()) return bad("properties must be an object", path);
  std::set<std::string> required;
  if (s.contains("required")) {
    if (!s["required"].is_array()) return bad("required must be an array of strings", path);
    for (const json& r : s["required"]) {
      if (!r.is_string()) return bad("required must be an array of strings", path);
      required.insert(r.get<std::string>());
    }
  }
  const json additional =
      s.contains("additionalProperties") ? s["additionalProperties"] : json(true);
  if (!additional.is_boolean() && !additional.is_object()) {
    return bad("additionalProperties must be a boolean or a schema", path);
  }
  const bool closed = additional.is_boolean() && !additional.get<bool>();

  struct Prop {
    std::string name;
    uint32_t value;
    bool required;
  };
  std::vector<Prop> list;
  for (auto it = props.begin(); it != props.end(); ++it) {
    POWER_ASSIGN_OR_RETURN(uint32_t v, compile(it.value(), path + "/properties/" + it.key()));
    list.push_back({it.key(), v, required.count(it.key()) > 0});
  }
  for (const std::string& r : required) {
    if (props.contains(r)) continue;
    if (closed)
      return bad("a required property is not allowed by additionalProperties: false", path)
          .with("property", r);
    uint32_t v;
    if (additional.is_object()) {
      POWER_ASSIGN_OR_RETURN(v, compile(additional, path + "/additionalProperties"));
    } else {
      v = any_value();
    }
    list.push_back({r, v, true});
  }

  if (list.empty()) {
    if (closed) return b_.rule("object " + path, {Seq{b_.byte('{'), G::ref(w), b_.byte('}')}});
    // A map: free keys, values by additionalProperties.
    uint32_t v;
    if (additional.is_object()) {
      POWER_ASSIGN_OR_RETURN(v, compile(additional, path + "/additionalProperties"));
    } else {
      return any_object();
    }
    const uint32_t member =
        b_.rule("map-member " + path,
                {Seq{G::ref(string_rule()), G::ref(w), b_.byte(':'), G::ref(w), G::ref(v)}});
    const uint32_t rest = b_.declare("map-rest " + path);
    b_.add_alt(rest, {G::ref(w), b_.byte('}')});
    b_.add_alt(rest, {G::ref(w), b_.byte(','), G::ref(w), G::ref(member), G::ref(rest)});
    return b_.rule("map " + path, {Seq{b_.byte('{'), G::ref(w), b_.byte('}')},
                                   Seq{b_.byte('{'), G::ref(w), G::ref(member), G::ref(rest)}});
  }

  // tail[i][c]: the members from property i on; c: whether one was already written (so the
  // next needs a comma).
  const size_t n = list.size();
  std::vector<std::array<uint32_t, 2>> tail(n + 1);
  tail[n][0] = tail[n][1] = b_.rule("props-end", {Seq{}});
  for (size_t i = n; i-- > 0;) {
    const Prop& p = list[i];
    for (int c = 0; c < 2; ++c) {
      Seq member;
      if (c) {
        member = {G::ref(w), b_.byte(','), G::ref(w)};
      }
      b_.append_literal(member, json(p.name).dump());
      member.insert(member.end(),
                    {G::ref(w), b_.byte(':'), G::ref(w), G::ref(p.value), G::ref(tail[i + 1][1])});
      std::vector<Seq> alts{member};
      if (!p.required) alts.push_back({G::ref(tail[i + 1][c])});
      tail[i][c] = b_.rule("props " + path + "/" + p.name, std::move(alts));
    }
  }
  return b_.rule("object " + path,
                 {Seq{b_.byte('{'), G::ref(w), G::ref(tail[0][0]), G::ref(w), b_.byte('}')}});
}

Result<uint32_t> JsonGrammarCompiler::compile_array(const json& s, const std::string& path) {
  using G = GrammarBuilder;
  const uint32_t w = ws();
  std::vector<uint32_t> prefix;
  if (s.contains("prefixItems")) {
    const json& p = s["prefixItems"];
    if (!p.is_array()) return bad("prefixItems must be an array of schemas", path);
    for (size_t i = 0; i < p.size(); ++i) {
      POWER_ASSIGN_OR_RETURN(uint32_t r, compile(p[i], path + "/prefixItems/" + std::to_string(i)));
      prefix.push_back(r);
    }
  }
  bool items_allowed = true;
  uint32_t item = 0;
  if (s.contains("items")) {
    const json& it = s["items"];
    if (it.is_boolean() && !it.get<bool>()) {
      items_allowed = false;
    } else {
      POWER_ASSIGN_OR_RETURN(item, compile(it, path + "/items"));
    }
  } else {
    item = any_value();
  }
  POWER_ASSIGN_OR_RETURN(int min_items, bound(s, "minItems", kMaxArrayBound, path));
  POWER_ASSIGN_OR_RETURN(int max_items, bound(s, "maxItems", kMaxArrayBound, path));
  min_items = std::max(min_items, 0);
  const int n_prefix = static_cast<int>(prefix.size());
  if (!items_allowed && (max_items < 0 || max_items > n_prefix)) max_items = n_prefix;
  if (max_items >= 0 && min_items > max_items) {
    return bad("minItems exceeds what maxItems/items allow", path);
  }
  // rest(i): the array after i elements, closing bracket included.
  const int unrolled = max_items >= 0 ? max_items : std::max(n_prefix, min_items);
  auto elem = [&](int i) { return i < n_prefix ? prefix[static_cast<size_t>(i)] : item; };
  uint32_t next = 0;
  if (max_items < 0) {
    // From `unrolled` on: any number of further items.
    next = b_.declare("array-star " + path);
    b_.add_alt(next, {G::ref(w), b_.byte(']')});
    b_.add_alt(next, {G::ref(w), b_.byte(','), G::ref(w), G::ref(item), G::ref(next)});
  }
  for (int i = unrolled; i >= 0; --i) {
    if (max_items < 0 && i == unrolled) {
      if (i > 0) continue;  // rest(unrolled) is the star rule itself
      // i == 0 with nothing unrolled: "]" or a first item then the star.
      next = b_.rule("array-rest " + path,
                     {Seq{G::ref(w), b_.byte(']')}, Seq{G::ref(w), G::ref(item), G::ref(next)}});
      continue;
    }
    std::vector<Seq> alts;
    if (i >= min_items) alts.push_back({G::ref(w), b_.byte(']')});
    if (i < unrolled || max_items < 0) {
      Seq more{G::ref(w)};
      if (i > 0) more.insert(more.end(), {b_.byte(','), G::ref(w)});
      more.insert(more.end(), {G::ref(elem(i)), G::ref(next)});
      alts.push_back(std::move(more));
    }
    next = b_.rule("array-rest " + path + "/" + std::to_string(i), std::move(alts));
  }
  return b_.rule("array " + path, {Seq{b_.byte('['), G::ref(next)}});
}

Result<std::shared_ptr<const Grammar>> compile_json_schema(const nlohmann::ordered_json& schema) {
  GrammarBuilder b;
  JsonGrammarCompiler c(b);
  POWER_ASSIGN_OR_RETURN(uint32_t root, c.schema(schema));
  return b.build(root);
}

Result<std::shared_ptr<const Grammar>> compile_json_schema(std::string_view schema_json) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(schema_json, nullptr, false);
  if (j.is_discarded())
    return Status(StatusCode::kInvalidArgument, "the JSON schema is not valid JSON");
  return compile_json_schema(j);
}

std::shared_ptr<const Grammar> json_value_grammar() {
  static const std::shared_ptr<const Grammar> g = [] {
    GrammarBuilder b;
    JsonGrammarCompiler c(b);
    Result<std::shared_ptr<const Grammar>> r = b.build(c.any_value());
    POWER_CHECK(r.ok());
    return *r;
  }();
  return g;
}

std::shared_ptr<const Grammar> json_object_grammar() {
  static const std::shared_ptr<const Grammar> g = [] {
    GrammarBuilder b;
    JsonGrammarCompiler c(b);
    Result<std::shared_ptr<const Grammar>> r = b.build(c.any_object());
    POWER_CHECK(r.ok());
    return *r;
  }();
  return g;
}

}  // namespace power::grammar
