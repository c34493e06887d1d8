// server/redact.h: which parts of an error message count as the request's own text.
#include "server/redact.h"

#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace power::server {
namespace {

TEST(Redact, LongRunsSharedWithAnyRequestStringAreReplaced) {
  const std::string body =
      R"({"model":"m","messages":[{"role":"user","content":"my card number is 4111 1111"}]})";
  // A 12+ byte fragment of the content, quoted inside our own wording.
  EXPECT_EQ(redact_message("cannot parse 'card number is 4111' here", body),
            "cannot parse '[redacted]' here");
  // The whole content, and the message's own words kept.
  EXPECT_EQ(redact_message("prompt my card number is 4111 1111 is too long", body),
            "prompt [redacted] is too long");
  // Nothing shared: unchanged.
  EXPECT_EQ(redact_message("'max_tokens' must be between 1 and 4096", body),
            "'max_tokens' must be between 1 and 4096");
}

TEST(Redact, ShortStringsOnlyWhereQuotedWhole) {
  const std::string body =
      R"({"model":"mini","logit_bias":{"abcd":1},"metadata":{"tenant":"x"},"user":"bob1"})";
  EXPECT_EQ(redact_message("the model 'mini' does not exist", body),
            "the model '[redacted]' does not exist");
  // logit_bias and metadata keys are the client's data; other keys are the API's field
  // names, which errors name on purpose.
  EXPECT_EQ(redact_message("'logit_bias' key \"abcd\" is not a token id", body),
            "'logit_bias' key \"[redacted]\" is not a token id");
  EXPECT_EQ(redact_message("'metadata' key 'tenant' is too long", body),
            "'metadata' key '[redacted]' is too long");
  // Unquoted short words that happen to match stay: "mini" inside "minimum".
  EXPECT_EQ(redact_message("the minimum is 1", body), "the minimum is 1");
}

TEST(Redact, NonJsonBodiesAreMatchedAsRawBytes) {
  EXPECT_EQ(redact_message("bad input near 'secret-payload-xyz'", "xx secret-payload-xyz yy"),
            "bad input near '[redacted]'");
  EXPECT_EQ(redact_message("", "abc"), "");
  EXPECT_EQ(redact_message("no body", ""), "no body");
}

TEST(Redact, ErrorBodiesOfBothShapes) {
  const std::string req = R"({"model":"zebraquartz7731","prompt":"x"})";
  const auto openai = nlohmann::json::parse(redact_error_body(
      R"({"error":{"message":"the model 'zebraquartz7731' does not exist","type":"invalid_request_error","param":"model","code":"model_not_found"}})",
      req));
  EXPECT_EQ(openai["error"]["message"], "the model '[redacted]' does not exist");
  EXPECT_EQ(openai["error"]["code"], "model_not_found");
  EXPECT_EQ(openai["error"]["param"], "model");
  const auto ollama = nlohmann::json::parse(
      redact_error_body(R"({"error":"model 'zebraquartz7731' not found"})", req));
  EXPECT_EQ(ollama["error"], "model '[redacted]' not found");
  // Not an error body: unchanged, byte for byte.
  const std::string ok = R"({"choices":[{"text":"zebraquartz7731"}]})";
  EXPECT_EQ(redact_error_body(ok, req), ok);
  // A param path holding a client's logit_bias key is scrubbed like the message.
  const auto bias = nlohmann::json::parse(redact_error_body(
      R"({"error":{"message":"'logit_bias' key 'qqqqq' is not a token id","param":"logit_bias.qqqqq"}})",
      R"({"logit_bias":{"qqqqq":1}})"));
  EXPECT_EQ(bias["error"]["message"], "'logit_bias' key '[redacted]' is not a token id");
  EXPECT_EQ(redact_error_body("not json", req), "not json");
  EXPECT_EQ(redacted_size(107), "[redacted, 107 bytes]");
}

}  // namespace
}  // namespace power::server
