#include "server/embed_openai.h"

#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "server/openai_mapping.h"

namespace power {
namespace {

using nlohmann::json;

OpenAiError bad(std::string message, std::string param, std::string code = "") {
  OpenAiError e;
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

bool is_token(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>() <= std::numeric_limits<int32_t>::max();
  if (v.is_number_integer()) {
    const auto x = v.get<int64_t>();
    return x >= std::numeric_limits<int32_t>::min() && x <= std::numeric_limits<int32_t>::max();
  }
  return false;
}

bool is_token_array(const json& v) {
  if (!v.is_array() || v.empty()) return false;
  for (const auto& t : v) {
    if (!is_token(t)) return false;
  }
  return true;
}

std::vector<int32_t> tokens_of(const json& v) {
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (const auto& t : v) ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  return ids;
}

}  // namespace

std::string base64_encode(const void* data, size_t n) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const auto* p = static_cast<const uint8_t*>(data);
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= n; i += 3) {
    const uint32_t v = (uint32_t{p[i]} << 16) | (uint32_t{p[i + 1]} << 8) | p[i + 2];
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.push_back(kAlphabet[(v >> 6) & 63]);
    out.push_back(kAlphabet[v & 63]);
  }
  if (n - i == 1) {
    const uint32_t v = uint32_t{p[i]} << 16;
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out += "==";
  } else if (n - i == 2) {
    const uint32_t v = (uint32_t{p[i]} << 16) | (uint32_t{p[i + 1]} << 8);
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.push_back(kAlphabet[(v >> 6) & 63]);
    out.push_back('=');
  }
  return out;
}

OpenAiError not_an_embedding_model(const std::string& model_id) {
  return bad("model '" + model_id +
                 "' is a text-generation model, not an embedding model; /v1/embeddings needs "
                 "an embedding model (e.g. a BERT-family GGUF)",
             "model", "not_an_embedding_model");
}

std::variant<json, OpenAiError> run_openai_embeddings(const json& body, EmbeddingModel& model,
                                                      const std::string& model_id) {
  if (!body.is_object()) return bad("the request body must be a JSON object", "");
  if (!body.contains("input")) return bad("'input' is required", "input");
  const json& input = body["input"];
  EmbedRequest req;
  req.normalize = true;
  if (input.is_string()) {
    req.texts.push_back(input.get<std::string>());
  } else if (input.is_array() && !input.empty()) {
    if (input[0].is_string()) {
      for (const auto& s : input) {
        if (!s.is_string()) {
          return bad("'input' mixes strings and other values", "input");
        }
        req.texts.push_back(s.get<std::string>());
      }
    } else if (is_token_array(input)) {
      req.token_inputs.push_back(tokens_of(input));
    } else {
      for (const auto& a : input) {
        if (!is_token_array(a)) {
          return bad(
              "'input' must be a string, an array of strings, an array of token ids or an "
              "array of non-empty token id arrays",
              "input");
        }
        req.token_inputs.push_back(tokens_of(a));
      }
    }
  } else {
    return bad("'input' must be a non-empty string, array of strings or token array(s)", "input");
  }
  if (req.texts.size() + req.token_inputs.size() > 2048) {
    return bad("'input' has more than 2048 items", "input");
  }
  bool base64 = false;
  if (body.contains("encoding_format") && !body["encoding_format"].is_null()) {
    const json& f = body["encoding_format"];
    if (!f.is_string() || (f != "float" && f != "base64")) {
      return bad("'encoding_format' must be \"float\" or \"base64\"", "encoding_format");
    }
    base64 = f == "base64";
  }
  const int64_t n_embd = model.info().n_embd;
  if (body.contains("dimensions") && !body["dimensions"].is_null()) {
    const json& d = body["dimensions"];
    if (!d.is_number_integer() || d.get<int64_t>() != n_embd) {
      return bad("'dimensions' is not supported by this model (its vectors have " +
                     std::to_string(n_embd) + " dimensions)",
                 "dimensions", "unsupported_dimensions");
    }
  }
  if (model.info().pooling == "none") {
    return bad("this model has no pooling (per-token output), which /v1/embeddings cannot return",
               "model");
  }
  auto res = model.embed(req);
  if (!res.ok()) {
    const Status& st = res.status();
    OpenAiError e = bad(server::status_sentence(st), "input");
    switch (st.code()) {
      case StatusCode::kInvalidArgument:
        break;
      case StatusCode::kOutOfRange: {
        // OpenAI's wording; the input is named by its index.
        const int64_t n_ctx = server::status_context_number(st, "n_ctx");
        const int64_t tokens = server::status_context_number(st, "tokens");
        const int64_t input = server::status_context_number(st, "input");
        e.message = fmt::format(
            "This model's maximum context length is {} tokens, however "
            "input[{}] has {} tokens. Please reduce the length of the input.",
            n_ctx, input, tokens);
        e.code = "context_length_exceeded";
        break;
      }
      case StatusCode::kQueueFull:
        e.http_status = 503;
        e.type = "server_error";
        e.param.clear();
        break;
      default:
        e.http_status = 500;
        e.type = "server_error";
        e.param.clear();
        break;
    }
    return e;
  }
  json data = json::array();
  for (size_t i = 0; i < res->embeddings.size(); ++i) {
    const auto& v = res->embeddings[i];
    json item = {{"object", "embedding"}, {"index", i}};
    if (base64) {
      item["embedding"] = base64_encode(v.data(), v.size() * sizeof(float));
    } else {
      item["embedding"] = v;
    }
    data.push_back(std::move(item));
  }
  return json{
      {"object", "list"},
      {"data", std::move(data)},
      {"model", model_id},
      {"usage", {{"prompt_tokens", res->prompt_tokens}, {"total_tokens", res->prompt_tokens}}}};
}

}  // namespace power
