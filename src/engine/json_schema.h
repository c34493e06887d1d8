// JSON Schema -> grammar (engine/grammar.h), for response_format json_object / json_schema and
// for tool calls.
//
// Supported keywords: type (a name or a list of names), properties, required,
// additionalProperties (false, true or a schema), enum, const, items (a schema or false),
// prefixItems, minItems, maxItems, anyOf, oneOf, allOf with one member, $ref to "#", "#/$defs/..",
// "#/definitions/.." (any JSON pointer into the same schema), nullable (OpenAPI), minLength,
// maxLength. Annotations are ignored: title, description, default, examples, $schema, $id,
// $comment, deprecated, readOnly, writeOnly, and format (an annotation by default since
// draft 2019-09; not enforced). Every other keyword (pattern, minimum, multipleOf,
// patternProperties, not, if/then/else, ...) is kInvalidArgument naming it and its path.
//
// What is generated is a subset of what the schema accepts, never more:
//  - Properties come in the schema's order; required ones always, optional ones may be left
//    out. With `properties` given, no other properties are generated even when
//    additionalProperties allows them (an object with no `properties` and additionalProperties
//    true or a schema is a map with free keys).
//  - Numbers: JSON number syntax with at most 16 integer digits, 16 fraction digits and a
//    two-digit exponent; integers have no fraction or exponent.
//  - oneOf is generated as anyOf: give branches that cannot both match.
//  - Whitespace between tokens: nothing, one space, or a newline followed by up to 20
//    spaces/tabs (pretty printing to ten levels), so a model cannot loop on whitespace.
//    None before the value or after it.
// Limits: minLength/maxLength and minItems/maxItems unroll into rules; bounds above 4096
// (strings) or 1024 (arrays) are kInvalidArgument.
// Thread-safety: a JsonGrammarCompiler is single-threaded; the grammars it builds are shared.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "engine/grammar.h"

namespace power::grammar {

// Adds JSON rules to a GrammarBuilder; several schemas may share one builder (tool calls).
class JsonGrammarCompiler {
 public:
  explicit JsonGrammarCompiler(GrammarBuilder& b) : b_(b) {}

  // The rule for one value matching `schema`; $refs resolve inside `schema` itself.
  Result<uint32_t> schema(const nlohmann::ordered_json& schema);
  uint32_t any_value();
  uint32_t any_object();
  uint32_t ws();
  uint32_t string_rule(int min_len = 0, int max_len = -1);
  // The exact serialisation of a JSON value (nlohmann's compact dump).
  uint32_t literal_value(const nlohmann::ordered_json& value);

 private:
  Result<uint32_t> compile(const nlohmann::ordered_json& s, const std::string& path);
  Result<uint32_t> compile_type(const std::string& type, const nlohmann::ordered_json& s,
                                const std::string& path);
  Result<uint32_t> compile_object(const nlohmann::ordered_json& s, const std::string& path);
  Result<uint32_t> compile_array(const nlohmann::ordered_json& s, const std::string& path);
  Result<uint32_t> resolve_ref(const std::string& ref, const std::string& path);
  uint32_t number_rule(bool integer);
  uint32_t string_char();

  GrammarBuilder& b_;
  const nlohmann::ordered_json* root_ = nullptr;
  std::map<std::string, uint32_t> refs_;
  int64_t ws_ = -1, value_ = -1, object_ = -1, char_ = -1, string_ = -1, number_ = -1,
          integer_ = -1;
  int depth_ = 0;
};

Result<std::shared_ptr<const Grammar>> compile_json_schema(const nlohmann::ordered_json& schema);
// From JSON text; kInvalidArgument when it does not parse.
Result<std::shared_ptr<const Grammar>> compile_json_schema(std::string_view schema_json);
// One JSON value of any type, and one JSON object (response_format json_object).
std::shared_ptr<const Grammar> json_value_grammar();
std::shared_ptr<const Grammar> json_object_grammar();

}  // namespace power::grammar
