#include "models/decoder.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

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

namespace {

// Runs fn(t) for every token of the batch, over the compute threads when there are several
// tokens (the row operations between the matmuls would otherwise run on one thread while the
// others wait for the next matmul).
template <typename Fn>
void for_each_token(Workspace& ws, Fn fn) {
  if (ws.n_tokens <= 1) {
    if (ws.n_tokens == 1) fn(int64_t{0});
    return;
  }
  ws.cpu.pool().parallel_for(static_cast<size_t>(ws.n_tokens), [&](size_t b, size_t e, int) {
    for (size_t t = b; t < e; ++t) fn(static_cast<int64_t>(t));
  });
}

}  // namespace

void norm_rows(Workspace& ws, const float* in, const std::vector<float>& w, float* out, int64_t n,
               float eps) {
  for_each_token(ws, [&](int64_t t) {
    rms_norm(in + t * n, w.empty() ? nullptr : w.data(), out + t * n, n, eps);
  });
}

void linear(Workspace& ws, const TensorView& w, const std::vector<float>& bias, const float* in,
            float* out) {
  const int64_t n_in = w.ne[0], n_out = w.ne[1];
  matmul(ws.cpu, w, in, n_in, ws.n_tokens, out, n_out);
  if (!bias.empty()) {
    for (int64_t t = 0; t < ws.n_tokens; ++t) add_inplace(out + t * n_out, bias.data(), n_out);
  }
}

void linear_same_input(Workspace& ws, std::span<const LinearJob> jobs, const float* in) {
  if (jobs.empty()) return;
  std::vector<MatmulJob> mm;
  mm.reserve(jobs.size());
  for (const LinearJob& j : jobs) mm.push_back({j.w, j.out, j.w->ne[1]});
  matmul_same_input(ws.cpu, mm, in, jobs[0].w->ne[0], ws.n_tokens);
  for (const LinearJob& j : jobs) {
    const int64_t n_out = j.w->ne[1];
    if (j.bias == nullptr || j.bias->empty()) continue;
    for (int64_t t = 0; t < ws.n_tokens; ++t) add_inplace(j.out + t * n_out, j.bias->data(), n_out);
  }
}

void head_norm(Workspace& ws, float* x, int64_t n_heads, int64_t head_dim,
               const std::vector<float>& w, float eps) {
  for_each_token(ws, [&](int64_t t) {
    for (int64_t h = 0; h < n_heads; ++h) {
      float* p = x + (t * n_heads + h) * head_dim;
      rms_norm(p, w.data(), p, head_dim, eps);
    }
  });
}

void rope(Workspace& ws, float* x, int64_t n_heads, int64_t head_dim, const RopeParams& p) {
  // Over the compute threads, as the norms: one token's angles (pow, sincos per pair of
  // dimensions) are a few microseconds, a 512-token prompt's on one thread held the others.
  for_each_token(ws, [&](int64_t t) {
    rope_apply_heads(x + t * n_heads * head_dim, n_heads, head_dim, ws.pos[static_cast<size_t>(t)],
                     p);
  });
}

void attention(Workspace& ws, const ModelHparams& hp, int layer, const float* q, const float* k,
               const float* v, float* out) {
  const int64_t n_head = hp.n_head, n_kv = hp.n_head_kv;
  const int64_t hd_k = hp.head_dim_k, hd_v = hp.head_dim_v;
  const int64_t group = n_head / n_kv;
  // 1. Store this batch's keys and values.
  // Every token writes its own slot, so tokens may be written in parallel.
  for_each_token(ws, [&](int64_t t) {
    KvSequence& seq = *ws.chunks[static_cast<size_t>(ws.chunk_of[static_cast<size_t>(t)])].seq;
    const int p = ws.pos[static_cast<size_t>(t)];
    seq.cache().write_k(layer, seq.block_of(p), seq.slot_of(p), k + t * n_kv * hd_k);
    seq.cache().write_v(layer, seq.block_of(p), seq.slot_of(p), v + t * n_kv * hd_v);
  });
  // 2. Each (token, head) attends over its sequence's positions [lo, pos]. Work items are
  // (block of up to kTokenBlock consecutive tokens of one sequence, KV head); their queries go
  // through the row-by-column products of ops.h (4 queries x 2 keys, 4 queries x 16 output
  // values per pass, in registers): the keys all of the run's tokens attend to in one call,
  // the others per token. Per query the arithmetic and its order are those of one dot per key
  // and one axpy per value row (dot, scale, softmax over [lo, pos], then o += w * v for
  // ascending j), whatever the batch holds.
  const bool f16_cache =
      ws.chunks.empty() ? false : ws.chunks[0].seq->cache().config().dtype == GgmlType::F16;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd_k));
  constexpr int64_t kTokenBlock = 16;
  // One run of tokens [t0, t1) of one sequence against KV head kvh.
  auto attend_run = [&](int64_t t0, int64_t t1, int64_t kvh, int thread) {
    const KvSequence& seq =
        *ws.chunks[static_cast<size_t>(ws.chunk_of[static_cast<size_t>(t0)])].seq;
    const KvCache& cache = seq.cache();
    const int64_t nt = t1 - t0;
    const int64_t nq = nt * group;  // query qi = (t - t0) * group + (h - kvh * group)
    // Per token of the run: its position and the first position it attends to.
    int64_t tp[kTokenBlock], tlo[kTokenBlock];
    int64_t lo_min = INT64_MAX, p_max = 0;
    for (int64_t i = 0; i < nt; ++i) {
      const int64_t p = ws.pos[static_cast<size_t>(t0 + i)];
      tp[i] = p;
      tlo[i] = (hp.sliding_window > 0 && p - hp.sliding_window + 1 > 0) ? p - hp.sliding_window + 1
                                                                        : int64_t{0};
      lo_min = std::min(lo_min, tlo[i]);
      p_max = std::max(p_max, p);
    }
    const int64_t span = p_max - lo_min + 1;
    // Scratch: scores [nq x span], queries [nq x hd_k], outputs [nq x hd_v].
    float* scores = ws.cpu.tile_scratch(thread, static_cast<uint64_t>(nq * (span + hd_k + hd_v)));
    float* qs = scores + nq * span;
    float* os = qs + nq * hd_k;
    for (int64_t i = 0; i < nt; ++i) {
      for (int64_t g = 0; g < group; ++g) {
        const int64_t qi = i * group + g, t = t0 + i, h = kvh * group + g;
        std::memcpy(qs + qi * hd_k, q + (t * n_head + h) * hd_k,
                    static_cast<size_t>(hd_k) * sizeof(float));
        // The peer multiplies an F16 cache by the query rounded to F16; do the same so that
        // both caches give the peer's numbers.
        if (f16_cache) round_to_f16(qs + qi * hd_k, hd_k);
      }
    }
    // The cached rows of positions [lo_min, p_max], read in place: an F16 row is converted
    // inside the products (the same values as converting it first).
    thread_local std::vector<const uint8_t*> k16, v16;
    thread_local std::vector<const float*> k32, v32;
    const auto n_span = static_cast<size_t>(span);
    if (f16_cache) {
      k16.resize(n_span);
      v16.resize(n_span);
    } else {
      k32.resize(n_span);
      v32.resize(n_span);
    }
    for (int64_t j = lo_min; j <= p_max; ++j) {
      const int block = seq.block_of(static_cast<int>(j)), slot = seq.slot_of(static_cast<int>(j));
      const uint8_t* kr = cache.k_row(layer, block, slot, static_cast<int>(kvh));
      const uint8_t* vr = cache.v_row(layer, block, slot, static_cast<int>(kvh));
      const auto at = static_cast<size_t>(j - lo_min);
      if (f16_cache) {
        k16[at] = kr;
        v16[at] = vr;
      } else {
        k32[at] = reinterpret_cast<const float*>(kr);
        v32[at] = reinterpret_cast<const float*>(vr);
      }
    }
    // Scores (dot, then the scale) of query rows `rows` from qa against keys [j0, j0 + n), into
    // the rows' score lines from sc on; values o += w * v over the same keys, ascending (per
    // element one fused multiply-add per key: the reference loop's order).
    auto dot = [&](const float* qa, int64_t rows, int64_t j0, int64_t n, float* sc) {
      if (n <= 0) return;
      const int64_t off = j0 - lo_min;
      if (f16_cache) {
        dot_f16_cols(qa, rows, hd_k, k16.data() + off, n, hd_k, scale, sc + off, span);
      } else {
        dot_f32_cols(qa, rows, hd_k, k32.data() + off, n, hd_k, scale, sc + off, span);
      }
    };
    auto axpy = [&](float* o, int64_t rows, const float* sc, int64_t j0, int64_t n) {
      if (n <= 0) return;
      const int64_t off = j0 - lo_min;
      if (f16_cache) {
        axpy_f16_cols(o, rows, hd_v, sc + off, span, v16.data() + off, n, hd_v);
      } else {
        axpy_f32_cols(o, rows, hd_v, sc + off, span, v32.data() + off, n, hd_v);
      }
    };
    // Keys every token of the run attends to, [c_lo, c_hi] (consecutive positions without a
    // window: from 0 to the first token's position): one call takes all the run's queries as
    // rows, so a cached row is read once per 4 queries of any tokens (a model with one query
    // head per KV head gets 4-row tiles too). The other keys of each token (the diagonal, and
    // under a sliding window the start), per token.
    int64_t c_lo = 0, c_hi = INT64_MAX;
    for (int64_t i = 0; i < nt; ++i) {
      c_lo = std::max(c_lo, tlo[i]);
      c_hi = std::min(c_hi, tp[i]);
    }
    if (c_lo > c_hi) {  // none: every key per token
      c_lo = p_max + 1;
      c_hi = p_max;
    }
    dot(qs, nq, c_lo, c_hi - c_lo + 1, scores);
    for (int64_t i = 0; i < nt; ++i) {
      const float* qa = qs + i * group * hd_k;
      float* sc = scores + i * group * span;
      const int64_t n_j = tp[i] - tlo[i] + 1;
      dot(qa, group, tlo[i], std::min(c_lo, tp[i] + 1) - tlo[i], sc);
      dot(qa, group, std::max(c_hi + 1, tlo[i]), tp[i] - std::max(c_hi, tlo[i] - 1), sc);
      for (int64_t g = 0; g < group; ++g) {
        float* row = sc + g * span + (tlo[i] - lo_min);
        softmax(row, n_j);
        if (f16_cache) round_to_f16(row, n_j);
      }
    }
    std::memset(os, 0, static_cast<size_t>(nq * hd_v) * sizeof(float));
    for (int64_t i = 0; i < nt; ++i) {
      axpy(os + i * group * hd_v, group, scores + i * group * span, tlo[i],
           std::min(c_lo, tp[i] + 1) - tlo[i]);
    }
    axpy(os, nq, scores, c_lo, c_hi - c_lo + 1);
    for (int64_t i = 0; i < nt; ++i) {
      axpy(os + i * group * hd_v, group, scores + i * group * span, std::max(c_hi + 1, tlo[i]),
           tp[i] - std::max(c_hi, tlo[i] - 1));
    }
    for (int64_t i = 0; i < nt; ++i) {
      for (int64_t g = 0; g < group; ++g) {
        const int64_t qi = i * group + g, t = t0 + i, h = kvh * group + g;
        std::memcpy(out + (t * n_head + h) * hd_v, os + qi * hd_v,
                    static_cast<size_t>(hd_v) * sizeof(float));
      }
    }
  };
  const int64_t n_blocks = (ws.n_tokens + kTokenBlock - 1) / kTokenBlock;
  const size_t items = static_cast<size_t>(n_blocks * n_kv);
  ws.cpu.pool().parallel_for(items, [&](size_t begin, size_t end, int thread) {
    for (size_t item = begin; item < end; ++item) {
      const int64_t b = static_cast<int64_t>(item) / n_kv, kvh = static_cast<int64_t>(item) % n_kv;
      const int64_t b_end = std::min(ws.n_tokens, (b + 1) * kTokenBlock);
      for (int64_t t0 = b * kTokenBlock; t0 < b_end;) {
        int64_t t1 = t0 + 1;
        while (t1 < b_end &&
               ws.chunk_of[static_cast<size_t>(t1)] == ws.chunk_of[static_cast<size_t>(t0)]) {
          ++t1;
        }
        attend_run(t0, t1, kvh, thread);
        t0 = t1;
      }
    }
  });
}

void add_rows(Workspace& ws, float* x, const float* y, int64_t n) {
  add_inplace(x, y, ws.n_tokens * n);
}

void swiglu_rows(Workspace& ws, float* gate, const float* up, int64_t n_ff, int64_t ld) {
  // Pieces of at most 1024 elements of one row, so one decode token is split over the
  // threads too (exp per element: ~10 us per piece).
  constexpr int64_t kPiece = 1024;
  const int64_t per_row = (n_ff + kPiece - 1) / kPiece;
  const int64_t pieces = ws.n_tokens * per_row;
  auto run = [&](int64_t i) {
    const int64_t t = i / per_row, b = (i % per_row) * kPiece;
    swiglu(gate + t * ld + b, up + t * ld + b, std::min(kPiece, n_ff - b));
  };
  if (pieces <= 1) {
    if (pieces == 1) run(0);
    return;
  }
  ws.cpu.pool().parallel_for(static_cast<size_t>(pieces), [&](size_t b, size_t e, int) {
    for (size_t i = b; i < e; ++i) run(static_cast<int64_t>(i));
  });
}

}  // namespace decoder
}  // namespace power
