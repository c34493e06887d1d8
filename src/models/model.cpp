#include "models/model.h"

#include <algorithm>

#include "kernels/cpu/matmul.h"
#include "models/decoder.h"

namespace power {

Result<std::unique_ptr<Workspace>> Model::make_workspace(int64_t max_batch_tokens, int64_t n_ctx,
                                                         int n_threads) const {
  if (max_batch_tokens <= 0 || n_ctx <= 0) {
    return Status(StatusCode::kInvalidArgument, "batch and context sizes must be positive");
  }
  return std::make_unique<Workspace>(hp_, max_batch_tokens, n_ctx, n_threads);
}

void Model::repack_weights() {
  for (const GgufTensor& t : file_->tensors()) {
    if (t.ne.size() != 2 || !matmul_repack_supported(t.type)) continue;
    // The embedding table only serves row lookups, unless it is tied to the output head.
    if (t.data == token_embd_.data && output_.data != token_embd_.data) continue;
    const int64_t shape[2] = {static_cast<int64_t>(t.ne[0]), static_cast<int64_t>(t.ne[1])};
    Result<TensorView> v = TensorView::contiguous(t.type, shape, t.data, t.n_bytes);
    if (v.ok()) packs_.add(*v);
  }
}

KvCacheConfig Model::kv_config(int64_t n_ctx_tokens, int n_sequences, GgmlType dtype) const {
  KvCacheConfig c;
  c.n_layer = static_cast<int>(hp_.n_layer);
  c.n_kv_heads = static_cast<int>(hp_.n_head_kv);
  c.head_dim_k = static_cast<int>(hp_.head_dim_k);
  c.head_dim_v = static_cast<int>(hp_.head_dim_v);
  c.block_tokens = 16;
  c.n_blocks = static_cast<int>((n_ctx_tokens + c.block_tokens - 1) / c.block_tokens) *
               std::max(1, n_sequences);
  c.dtype = dtype;
  return c;
}

int64_t Model::logit_rows(std::span<const ForwardChunk> chunks) {
  int64_t n = 0;
  for (const auto& c : chunks) n += c.all_logits ? static_cast<int64_t>(c.tokens.size()) : 1;
  return n;
}

Status Model::forward(Workspace& ws, std::span<const ForwardChunk> chunks, float* logits) const {
  int64_t total = 0;
  for (size_t c = 0; c < chunks.size(); ++c) {
    const ForwardChunk& ch = chunks[c];
    if (ch.seq == nullptr || ch.tokens.empty()) {
      return Status(StatusCode::kInvalidArgument, "empty chunk in batch").with("chunk", c);
    }
    for (int32_t tok : ch.tokens) {
      if (tok < 0 || tok >= hp_.n_vocab) {
        return Status(StatusCode::kInvalidArgument, "token id out of range")
            .with("token", tok)
            .with("n_vocab", hp_.n_vocab);
      }
    }
    const int64_t end = ch.seq->n_tokens() + static_cast<int64_t>(ch.tokens.size());
    if (end > ws.n_ctx) {
      return Status(StatusCode::kOutOfRange, "sequence exceeds the context size")
          .with("positions", end)
          .with("n_ctx", ws.n_ctx);
    }
    total += static_cast<int64_t>(ch.tokens.size());
  }
  if (total > ws.max_tokens) {
    return Status(StatusCode::kOutOfRange, "batch exceeds the workspace's maximum tokens")
        .with("tokens", total)
        .with("max", ws.max_tokens);
  }
  for (const ForwardChunk& ch : chunks) {
    POWER_RETURN_IF_ERROR(ch.seq->reserve(ch.seq->n_tokens() + static_cast<int>(ch.tokens.size())));
  }
  ws.chunks = chunks;
  ws.n_tokens = total;
  int64_t t = 0;
  for (size_t c = 0; c < chunks.size(); ++c) {
    for (size_t i = 0; i < chunks[c].tokens.size(); ++i, ++t) {
      ws.pos[static_cast<size_t>(t)] = chunks[c].seq->n_tokens() + static_cast<int32_t>(i);
      ws.chunk_of[static_cast<size_t>(t)] = static_cast<int32_t>(c);
      matrix_row_f32(token_embd_, chunks[c].tokens[i], ws.x.data() + t * hp_.n_embd);
    }
  }
  forward_layers(ws);
  // Gather the rows that want logits, normalize, project.
  int64_t out_rows = 0;
  t = 0;
  for (const ForwardChunk& ch : chunks) {
    const int64_t n = static_cast<int64_t>(ch.tokens.size());
    const int64_t first = ch.all_logits ? 0 : n - 1;
    for (int64_t i = first; i < n; ++i, ++out_rows) {
      rms_norm(ws.x.data() + (t + i) * hp_.n_embd, output_norm_.data(),
               ws.xn.data() + out_rows * hp_.n_embd, hp_.n_embd, hp_.rms_eps);
    }
    t += n;
  }
  matmul(ws.cpu, output_, ws.xn.data(), hp_.n_embd, out_rows, logits, hp_.n_vocab);
  for (const ForwardChunk& ch : chunks) {
    ch.seq->set_n_tokens(ch.seq->n_tokens() + static_cast<int>(ch.tokens.size()));
  }
  ws.chunks = {};
  return Status();
}

}  // namespace power
