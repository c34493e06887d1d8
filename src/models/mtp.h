// MTP (multi-token prediction, "NextN") heads of a decoder GGUF, as DeepSeek-V3, GLM-4.5 and
// Qwen3-Next style files carry them, and their forward pass.
//
// File layout (llama.cpp's convention): `<arch>.nextn_predict_layers` = N, and
// `<arch>.block_count` counts the main layers plus the N MTP layers, which sit at block indices
// [n_main, n_main + N). Each MTP block holds an ordinary decoder block (attn_norm, attn_q/k/v,
// attn_output, ffn_norm, ffn_gate/up/down, optional biases and q/k norms) and:
//   blk.B.nextn.eh_proj.weight          [2 * n_embd, n_embd]  concat(enorm(e), hnorm(h)) -> x
//   blk.B.nextn.enorm.weight            [n_embd]              RMSNorm of the token embedding
//   blk.B.nextn.hnorm.weight            [n_embd]              RMSNorm of the main hidden state
//   blk.B.nextn.shared_head_norm.weight [n_embd]   optional: output_norm when absent
//   blk.B.nextn.shared_head_head.weight [n_embd, n_vocab] optional: the main output head
//   blk.B.nextn.embed_tokens.weight     [n_embd, n_vocab] optional: token_embd
// The main model (models/hparams.cpp) runs only the first n_main blocks.
//
// The MTP step at position i combines the main model's final hidden state h_i (before the
// output norm) with the embedding of the token at i + 1 and predicts the token at i + 2:
//   x = eh_proj([enorm(embed(t[i+1])); hnorm(h_i)]); x = block(x) (attention over the MTP's own
//   KV cache, one layer); logits = head(shared_head_norm(x)).
// Deeper drafts reuse the first MTP layer on its own output (x stands in for h_{i+1}), as
// DeepSeek-V3 style runtimes do; only layer 0 is run (further layers are validated, unused).
//
// load() validates everything before any compute: a missing or misshaped tensor is an error
// naming it (with the expected and actual shape); a file without the key is kInvalidArgument.
// Thread-safety: immutable after load; forward() uses the caller's Workspace and KvSequence.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "device/kv_cache.h"
#include "models/arch_common.h"
#include "models/decoder.h"
#include "models/model.h"

namespace power {

// `<arch>.nextn_predict_layers` of the file (0 when absent).
int64_t mtp_layer_count(const GgufFile& file);

class MtpHead {
 public:
  // Binds and validates the MTP layers of `main`'s file (main must stay alive).
  static Result<std::unique_ptr<MtpHead>> load(const Model& main);

  int64_t n_layers() const { return n_nextn_; }
  int64_t first_block() const { return first_block_; }
  const ModelHparams& hparams() const { return hp_; }
  // KV geometry of the MTP layer (one layer) for n_sequences contexts of n_ctx positions.
  KvCacheConfig kv_config(int64_t n_ctx, int n_sequences, GgmlType dtype) const;
  // A workspace for batches of up to max_tokens MTP rows.
  Result<std::unique_ptr<Workspace>> make_workspace(int64_t max_tokens, int64_t n_ctx,
                                                    int n_threads) const;
  // Rows of scratch floats forward() needs per token (the concatenation).
  int64_t concat_width() const { return 2 * hp_.n_embd; }

  // Appends n = tokens.size() MTP positions to `seq`: row r pairs hidden[r] (n_embd floats,
  // the main model's final hidden state at position seq.n_tokens() + r) with tokens[r] (the
  // token that followed it). Writes the MTP output of the last row to out_hidden (n_embd)
  // and its logits to out_logits (n_vocab). `concat` holds n * concat_width() floats.
  // n <= ws.max_tokens.
  Status forward(Workspace& ws, KvSequence& seq, const float* hidden,
                 std::span<const int32_t> tokens, float* concat, float* out_hidden,
                 float* out_logits) const;

 private:
  MtpHead() = default;
  ModelHparams hp_;
  int64_t n_nextn_ = 0, first_block_ = 0;
  TensorView embed_, head_, eh_proj_;
  std::vector<float> enorm_, hnorm_, head_norm_, rope_freqs_;
  DecoderLayer layer_;
};

}  // namespace power
