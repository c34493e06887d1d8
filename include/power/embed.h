// Text embeddings with BERT-family encoders (general.architecture = "bert"): the embedded API.
//
//   auto rt = power::Runtime::create({});
//   auto model = (*rt)->load_embedding("bge-small.gguf", {});   // or EmbeddingModel::open(...)
//   power::EmbedRequest req;
//   req.texts = {"Hello world.", "The quick brown fox."};
//   req.normalize = true;
//   auto res = (*model)->embed(req);   // res->embeddings[i]: n_embd floats per input
//
// Inputs: `texts` are tokenized with the model's WordPiece tokenizer ([CLS] ... [SEP]);
// `token_inputs` are used exactly as given (no special tokens added). An input longer than the
// context is kOutOfRange unless `truncate` is set (then it keeps its first n_ctx - 1 tokens and
// ends with [SEP] when the tokenizer adds one). Empty inputs are kInvalidArgument.
// Pooling: the file's bert.pooling_type unless EmbedOptions::pooling overrides it; with "none"
// each input's result is its per-token states, n_tokens x n_embd row-major.
//
// Microbatching: embed() is blocking and safe to call from many threads. Calls arriving within
// EmbedOptions::batch_window_us of the first waiting one are merged into one forward pass of up
// to max_batch_tokens tokens (inputs are taken whole, in arrival order; a call with more tokens
// than one pass holds is spread over several passes), and each caller gets back exactly its own
// rows. Results do not depend on what else is in the pass: an input's vector is bit-identical
// alone or merged. stats() counts passes, requests and merged requests.
// Memory: the weights stay in the file mapping; the activation workspace for max_batch_tokens
// is planned and allocated at load (kDoesNotFit with the numbers when weights + workspace
// exceed the budget); embed() never allocates activation memory beyond its own result vectors.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "power/status.h"

namespace power {

struct EmbedOptions {
  int threads = 0;    // compute threads; 0: all cores
  int64_t n_ctx = 0;  // tokens per input; 0: the model's context (bert.context_length)
  int64_t max_batch_tokens = 2048;   // tokens of one merged forward pass (>= n_ctx)
  int batch_window_us = 2000;        // how long the first waiting call waits for others to join
  int max_waiting = 4096;            // waiting calls beyond which embed() says kQueueFull
  std::string pooling;               // "" (the file's), "none", "mean", "cls" or "last"
  uint64_t memory_budget_bytes = 0;  // open(): 0 = no check; Runtime::load_embedding fills it
  // An encrypted container (power encrypt): the key, as LoadOptions' fields of the same names
  // (include/power/runtime.h; docs/CONFIDENTIAL.md "Encrypted weights").
  std::string model_key_file;
  std::string model_key_hex;
  bool require_mlock = false;
};

struct EmbedRequest {
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> token_inputs;  // used instead of texts when non-empty
  bool normalize = false;  // L2-normalize each vector (each token row for pooling "none")
  bool truncate = false;   // cut inputs longer than the context instead of failing
};

struct EmbedResult {
  std::vector<std::vector<float>> embeddings;  // one per input, in input order
  int64_t prompt_tokens = 0;                   // tokens of all inputs (after truncation)
  int64_t n_embd = 0;
};

struct EmbedStats {
  uint64_t requests = 0;         // embed() calls that ran (at least one pass)
  uint64_t inputs = 0;           // inputs embedded
  uint64_t tokens = 0;           // tokens through the encoder
  uint64_t forward_passes = 0;   // encoder passes
  uint64_t merged_requests = 0;  // requests that shared a pass with another request
  uint64_t max_pass_inputs = 0;  // most inputs in one pass so far
  uint64_t max_pass_tokens = 0;
};

struct EmbeddingModelInfo {
  std::string path;
  std::string arch;
  std::string kind = "embedding";
  std::string pooling;  // in effect
  int64_t n_vocab = 0, n_layer = 0, n_embd = 0, n_ctx = 0;
  int64_t max_batch_tokens = 0;
  uint64_t weights_bytes = 0;    // mapped file
  uint64_t workspace_bytes = 0;  // activation workspace
  int threads = 0;
};

class EmbeddingModelImpl;

class EmbeddingModel {
 public:
  // Maps the file and builds the encoder, tokenizer, workspace and batching worker.
  // kUnsupported for a file that is not a BERT encoder (e.g. a chat model).
  static Result<std::unique_ptr<EmbeddingModel>> open(const std::string& path,
                                                      const EmbedOptions& options);
  ~EmbeddingModel();
  EmbeddingModel(const EmbeddingModel&) = delete;
  EmbeddingModel& operator=(const EmbeddingModel&) = delete;

  Result<EmbedResult> embed(const EmbedRequest& request);
  // Token ids of one text as embed() would feed them (before truncation).
  std::vector<int32_t> tokenize(const std::string& text) const;
  const EmbeddingModelInfo& info() const;
  EmbedStats stats() const;

 private:
  explicit EmbeddingModel(std::unique_ptr<EmbeddingModelImpl> impl);
  std::unique_ptr<EmbeddingModelImpl> impl_;
};

// True when the GGUF file at `path` is an embedding model Power runs (general.architecture
// "bert"); reads only the metadata. An encrypted container is decrypted with `keys`' model key
// to see its metadata (false without a key).
bool is_embedding_model_file(const std::string& path, const EmbedOptions& keys = {});

}  // namespace power
