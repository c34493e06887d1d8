// Import of llama2.c checkpoints (Karpathy's `run.c` format) into GGUF.
//
// A checkpoint is a header of seven int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads,
// vocab_size, seq_len; a negative vocab_size means the classifier is stored separately)
// followed by float32 weights in run.c's order; the tokenizer file is an int32
// max_token_length then, per token, a float32 score, an int32 length and the bytes.
// The GGUF written has the same tensors, names, order and tokenizer metadata as llama.cpp's
// convert-llama2c-to-ggml (tokens <unk>/<s>/</s> for ids 0-2, spaces escaped to U+2581,
// byte pieces typed BYTE, empty pieces CONTROL), except that llama.context_length records
// the checkpoint's seq_len (the peer writes its default of 128).
// Both inputs are untrusted: sizes are checked exactly against the header before reading.
#pragma once

#include <string>

#include "base/status.h"

namespace power {

struct Llama2cConvertStats {
  int dim = 0, hidden_dim = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, vocab_size = 0;
  int seq_len = 0;
  bool shared_classifier = true;
};

Result<Llama2cConvertStats> convert_llama2c(const std::string& model_path,
                                            const std::string& tokenizer_path,
                                            const std::string& out_path);

}  // namespace power
