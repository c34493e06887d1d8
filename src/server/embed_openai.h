// The OpenAI `POST /v1/embeddings` contract over an EmbeddingModel, without the transport: the
// HTTP server parses the body, calls run_openai_embeddings() and sends what comes back.
//
// Request: {"model": id, "input": string | [string, ...] | [int, ...] | [[int, ...], ...],
// "encoding_format": "float" (default) | "base64", "dimensions": n (only n_embd is accepted:
// these models have no Matryoshka truncation), "user": ignored}. Token arrays are used as
// given. Vectors are L2-normalized, as OpenAI's and llama-server's /v1/embeddings return them.
// Response: {"object": "list", "data": [{"object": "embedding", "index": i, "embedding":
// [floats] | "base64 of little-endian float32"}], "model": id, "usage": {"prompt_tokens": n,
// "total_tokens": n}}. Errors carry the HTTP status (400 for bad input, with code
// "context_length_exceeded" when an input is longer than the context; 503 when the queue is
// full; 500 otherwise) and OpenAI's error fields.
#pragma once

#include <string>
#include <variant>

#include <nlohmann/json.hpp>

#include "power/embed.h"

namespace power {

struct OpenAiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // empty: null
  std::string code;   // empty: null
};

std::variant<nlohmann::json, OpenAiError> run_openai_embeddings(const nlohmann::json& body,
                                                                EmbeddingModel& model,
                                                                const std::string& model_id);

// The error a generative (chat) model gets on /v1/embeddings.
OpenAiError not_an_embedding_model(const std::string& model_id);

// Standard base64 (RFC 4648, with padding).
std::string base64_encode(const void* data, size_t n);

}  // namespace power
