#include "models/decoder.h"

#include <cmath>
#include <cstring>

#include "kernels/cpu/matmul.h"

namespace power {

Workspace::Workspace(const ModelHparams& hp, int64_t max_tokens_, int64_t n_ctx_, int n_threads)
    : cpu(n_threads,
          std::max({hp.n_embd, hp.n_ff, hp.n_head * hp.head_dim_k, hp.n_head * hp.head_dim_v}),
          n_ctx_),
      max_tokens(max_tokens_),
      n_ctx(n_ctx_) {
  auto rows = [&](int64_t width) {
    return std::vector<float>(static_cast<size_t>(max_tokens * width));
  };
  x = rows(hp.n_embd);
  xn = rows(hp.n_embd);
  q = rows(hp.n_head * hp.head_dim_k);
  k = rows(hp.n_head_kv * hp.head_dim_k);
  v = rows(hp.n_head_kv * hp.head_dim_v);
  attn = rows(hp.n_head * hp.head_dim_v);
  ff_a = rows(hp.n_ff);
  ff_b = rows(hp.n_ff);
  // Fused projections (phi3's qkv and gate|up) land here before they are split.
  fused = rows(std::max(
      hp.n_head * hp.head_dim_k + 2 * hp.n_head_kv * std::max(hp.head_dim_k, hp.head_dim_v),
      2 * hp.n_ff));
  pos.assign(static_cast<size_t>(max_tokens), 0);
  chunk_of.assign(static_cast<size_t>(max_tokens), 0);
}

uint64_t Workspace::bytes() const {
  uint64_t floats = x.size() + xn.size() + q.size() + k.size() + v.size() + attn.size() +
                    ff_a.size() + ff_b.size() + fused.size();
  return floats * sizeof(float) + (pos.size() + chunk_of.size()) * sizeof(int32_t) +
         cpu.scratch_bytes();
}

namespace decoder {

std::vector<float> to_f32(const TensorView& view) {
  if (view.data == nullptr) return {};
  std::vector<float> out(static_cast<size_t>(view.n_elements()));
  for (int64_t r = 0; r < view.n_rows(); ++r) matrix_row_f32(view, r, out.data() + r * view.ne[0]);
  return out;
}

void norm_rows(Workspace& ws, const float* in, const std::vector<float>& w, float* out, int64_t n,
               float eps) {
  for (int64_t t = 0; t < ws.n_tokens; ++t) {
    rms_norm(in + t * n, w.empty() ? nullptr : w.data(), out + t * n, n, eps);
  }
}

void linear(Workspace& ws, const TensorView& w, const std::vector<float>& bias, const float* in,
            float* out) {
  const int64_t n_in = w.ne[0], n_out = w.ne[1];
  matmul(ws.cpu, w, in, n_in, ws.n_tokens, out, n_out);
  if (!bias.empty()) {
    for (int64_t t = 0; t < ws.n_tokens; ++t) add_inplace(out + t * n_out, bias.data(), n_out);
  }
}

void head_norm(Workspace& ws, float* x, int64_t n_heads, int64_t head_dim,
               const std::vector<float>& w, float eps) {
  for (int64_t t = 0; t < ws.n_tokens; ++t) {
    for (int64_t h = 0; h < n_heads; ++h) {
      float* p = x + (t * n_heads + h) * head_dim;
      rms_norm(p, w.data(), p, head_dim, eps);
    }
  }
}

void rope(Workspace& ws, float* x, int64_t n_heads, int64_t head_dim, const RopeParams& p) {
  for (int64_t t = 0; t < ws.n_tokens; ++t) {
    for (int64_t h = 0; h < n_heads; ++h) {
      rope_apply(x + (t * n_heads + h) * head_dim, ws.pos[static_cast<size_t>(t)], p);
    }
  }
}

void attention(Workspace& ws, const ModelHparams& hp, int layer, const float* q, const float* k,
               const float* v, float* out) {
  const int64_t n_head = hp.n_head, n_kv = hp.n_head_kv;
  const int64_t hd_k = hp.head_dim_k, hd_v = hp.head_dim_v;
  const int64_t group = n_head / n_kv;
  // 1. Store this batch's keys and values.
  for (int64_t t = 0; t < ws.n_tokens; ++t) {
    KvSequence& seq = *ws.chunks[static_cast<size_t>(ws.chunk_of[static_cast<size_t>(t)])].seq;
    const int p = ws.pos[static_cast<size_t>(t)];
    seq.cache().write_k(layer, seq.block_of(p), seq.slot_of(p), k + t * n_kv * hd_k);
    seq.cache().write_v(layer, seq.block_of(p), seq.slot_of(p), v + t * n_kv * hd_v);
  }
  // 2. Each (token, head) attends over its sequence's positions [lo, pos].
  const bool f16_cache =
      ws.chunks.empty() ? false : ws.chunks[0].seq->cache().config().dtype == GgmlType::F16;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd_k));
  const size_t items = static_cast<size_t>(ws.n_tokens * n_head);
  ws.cpu.pool().parallel_for(items, [&](size_t begin, size_t end, int thread) {
    float* scores = ws.cpu.span_scratch(thread);
    float* row = ws.cpu.row_scratch(thread);
    for (size_t item = begin; item < end; ++item) {
      const int64_t t = static_cast<int64_t>(item) / n_head;
      const int64_t h = static_cast<int64_t>(item) % n_head;
      const int64_t kvh = h / group;
      const KvSequence& seq =
          *ws.chunks[static_cast<size_t>(ws.chunk_of[static_cast<size_t>(t)])].seq;
      const KvCache& cache = seq.cache();
      const int64_t p = ws.pos[static_cast<size_t>(t)];
      int64_t lo = 0;
      if (hp.sliding_window > 0 && p - hp.sliding_window + 1 > 0) lo = p - hp.sliding_window + 1;
      // The peer multiplies an F16 cache by the query rounded to F16; do the same so that
      // both caches give the peer's numbers.
      float qh[1024];
      const float* qsrc = q + (t * n_head + h) * hd_k;
      const float* qv = qsrc;
      if (f16_cache && hd_k <= 1024) {
        std::memcpy(qh, qsrc, static_cast<size_t>(hd_k) * sizeof(float));
        round_to_f16(qh, hd_k);
        qv = qh;
      }
      for (int64_t j = lo; j <= p; ++j) {
        cache.read_k(layer, seq.block_of(static_cast<int>(j)), seq.slot_of(static_cast<int>(j)),
                     static_cast<int>(kvh), row);
        scores[j - lo] = dot_f32(qv, row, hd_k) * scale;
      }
      const int64_t span = p - lo + 1;
      softmax(scores, span);
      if (f16_cache) round_to_f16(scores, span);
      float* o = out + (t * n_head + h) * hd_v;
      std::memset(o, 0, static_cast<size_t>(hd_v) * sizeof(float));
      for (int64_t j = lo; j <= p; ++j) {
        cache.read_v(layer, seq.block_of(static_cast<int>(j)), seq.slot_of(static_cast<int>(j)),
                     static_cast<int>(kvh), row);
        const float w = scores[j - lo];
        for (int64_t d = 0; d < hd_v; ++d) o[d] += w * row[d];
      }
    }
  });
}

void add_rows(Workspace& ws, float* x, const float* y, int64_t n) {
  add_inplace(x, y, ws.n_tokens * n);
}

void swiglu_rows(Workspace& ws, float* gate, const float* up, int64_t n_ff, int64_t ld) {
  for (int64_t t = 0; t < ws.n_tokens; ++t) swiglu(gate + t * ld, up + t * ld, n_ff);
}

}  // namespace decoder
}  // namespace power
