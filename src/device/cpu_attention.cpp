// The attention ops of CpuOps: over the sequences' KV blocks, and local to each chunk.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "device/cpu_ops.h"
#include "device/cpu_ops_internal.h"
#include "kernels/cpu/ops.h"

namespace power {

using cpu_ops::for_each_row;
using sdk::Act;
using sdk::Op;

void CpuOps::attention(int layer, Act qa, Act ka, Act va, Act oa, const sdk::AttentionParams& hp) {
  if (!start(Op::kAttention) || !valid(Op::kAttention, qa, "q") ||
      !valid(Op::kAttention, ka, "k") || !valid(Op::kAttention, va, "v") ||
      !valid(Op::kAttention, oa, "out")) {
    return;
  }
  const int64_t n_head = hp.n_head, n_kv = hp.n_head_kv;
  const int64_t hd_k = hp.head_dim_k, hd_v = hp.head_dim_v;
  const int kv_layer = layer >= 0 && static_cast<size_t>(layer) < layout_.kv_layer.size()
                           ? layout_.kv_layer[static_cast<size_t>(layer)]
                           : -1;
  if (kv_layer < 0) {
    fail(Op::kAttention,
         Status(StatusCode::kInvalidArgument, "layer has no attention state in the model's spec")
             .with("layer", layer));
    return;
  }
  if (n_head <= 0 || n_kv <= 0 || n_head % n_kv != 0 || hd_k <= 0 || hd_v <= 0 ||
      qa.cols != n_head * hd_k || ka.cols != n_kv * hd_k || va.cols != n_kv * hd_v ||
      oa.cols != n_head * hd_v || qa.rows != ws_.n_tokens || ka.rows != ws_.n_tokens ||
      va.rows != ws_.n_tokens || oa.rows != ws_.n_tokens) {
    fail(Op::kAttention, Status(StatusCode::kInvalidArgument, "shapes do not match the heads")
                             .with("n_head", n_head)
                             .with("n_head_kv", n_kv)
                             .with("q_cols", qa.cols)
                             .with("k_cols", ka.cols)
                             .with("v_cols", va.cols));
    return;
  }
  for (const ForwardChunk& ch : ws_.chunks) {
    const KvCacheConfig& c = ch.seq == nullptr ? KvCacheConfig{} : ch.seq->cache().config();
    if (ch.seq == nullptr || c.n_kv_heads != n_kv || c.head_dim_k != hd_k || c.head_dim_v != hd_v ||
        kv_layer >= c.n_layer) {
      fail(Op::kAttention,
           Status(StatusCode::kInvalidArgument, "the sequence's KV cache has another geometry")
               .with("layer", layer));
      return;
    }
  }
  const float* q = row(qa, 0);
  const float* k = row(ka, 0);
  const float* v = row(va, 0);
  float* out = row(oa, 0);
  const int64_t ldq = qa.ld, ldk = ka.ld, ldv = va.ld, ldo = oa.ld;
  const int64_t group = n_head / n_kv;
  Workspace& ws = ws_;
  // 1. Store this batch's keys and values.
  // Every token writes its own slot, so tokens may be written in parallel.
  for_each_row(ws, ws.n_tokens, [&](int64_t t) {
    KvSequence& seq = *ws.chunks[static_cast<size_t>(ws.chunk_of[static_cast<size_t>(t)])].seq;
    const int p = ws.pos[static_cast<size_t>(t)];
    seq.cache().write_k(kv_layer, seq.block_of(p), seq.slot_of(p), k + t * ldk);
    seq.cache().write_v(kv_layer, seq.block_of(p), seq.slot_of(p), v + t * ldv);
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
  const float scale = hp.scale > 0.0f ? hp.scale : 1.0f / std::sqrt(static_cast<float>(hd_k));
  const float softcap = hp.softcap;
  const int64_t window = hp.sliding_window;
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
      tlo[i] = (window > 0 && p - window + 1 > 0) ? p - window + 1 : int64_t{0};
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
        std::memcpy(qs + qi * hd_k, q + t * ldq + h * hd_k,
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
      const uint8_t* kr = cache.k_row(kv_layer, block, slot, static_cast<int>(kvh));
      const uint8_t* vr = cache.v_row(kv_layer, block, slot, static_cast<int>(kvh));
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
    auto dot = [&](const float* qp, int64_t rows, int64_t j0, int64_t n, float* sc) {
      if (n <= 0) return;
      const int64_t off = j0 - lo_min;
      if (f16_cache) {
        dot_f16_cols(qp, rows, hd_k, k16.data() + off, n, hd_k, scale, sc + off, span);
      } else {
        dot_f32_cols(qp, rows, hd_k, k32.data() + off, n, hd_k, scale, sc + off, span);
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
      const float* qp = qs + i * group * hd_k;
      float* sc = scores + i * group * span;
      const int64_t n_j = tp[i] - tlo[i] + 1;
      dot(qp, group, tlo[i], std::min(c_lo, tp[i] + 1) - tlo[i], sc);
      dot(qp, group, std::max(c_hi + 1, tlo[i]), tp[i] - std::max(c_hi, tlo[i] - 1), sc);
      for (int64_t g = 0; g < group; ++g) {
        float* r = sc + g * span + (tlo[i] - lo_min);
        if (softcap > 0.0f) {
          for (int64_t j = 0; j < n_j; ++j) r[j] = softcap * std::tanh(r[j] / softcap);
        }
        power::softmax(r, n_j);
        if (f16_cache) round_to_f16(r, n_j);
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
        std::memcpy(out + t * ldo + h * hd_v, os + qi * hd_v,
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

void CpuOps::attention_local(Act qa, Act ka, Act va, Act oa, const sdk::AttentionParams& hp,
                             bool causal) {
  if (!start(Op::kAttentionLocal) || !valid(Op::kAttentionLocal, qa, "q") ||
      !valid(Op::kAttentionLocal, ka, "k") || !valid(Op::kAttentionLocal, va, "v") ||
      !valid(Op::kAttentionLocal, oa, "out")) {
    return;
  }
  const int64_t H = hp.n_head, n_kv = hp.n_head_kv, hd_k = hp.head_dim_k, hd_v = hp.head_dim_v;
  if (H <= 0 || n_kv <= 0 || H % n_kv != 0 || hd_k <= 0 || hd_v <= 0 || qa.cols != H * hd_k ||
      ka.cols != n_kv * hd_k || va.cols != n_kv * hd_v || oa.cols != H * hd_v ||
      qa.rows != ws_.n_tokens || ka.rows != ws_.n_tokens || va.rows != ws_.n_tokens ||
      oa.rows != ws_.n_tokens) {
    fail(Op::kAttentionLocal, Status(StatusCode::kInvalidArgument, "shapes do not match the heads")
                                  .with("n_head", H)
                                  .with("q_cols", qa.cols));
    return;
  }
  const int64_t group = H / n_kv;
  const float scale = hp.scale > 0.0f ? hp.scale : 1.0f / std::sqrt(static_cast<float>(hd_k));
  const float softcap = hp.softcap;
  const int64_t window = hp.sliding_window;
  const size_t n_chunks = ws_.chunks.size();
  const size_t items = n_chunks * static_cast<size_t>(H);
  // Work items are (chunk, head) pairs; scores live in the thread's span scratch (a chunk is
  // at most n_ctx tokens).
  ws_.cpu.pool().parallel_for(items, [&](size_t begin, size_t end, int thread) {
    float* scores = ws_.cpu.span_scratch(thread);
    for (size_t item = begin; item < end; ++item) {
      const size_t s = item / static_cast<size_t>(H);
      const int64_t h = static_cast<int64_t>(item % static_cast<size_t>(H));
      const int64_t kvh = h / group;
      const int64_t t0 = ws_.chunk_start[s], n = ws_.chunk_start[s + 1] - ws_.chunk_start[s];
      for (int64_t i = 0; i < n; ++i) {
        const float* q = row(qa, t0 + i) + h * hd_k;
        int64_t j_lo = 0, j_hi = causal ? i : n - 1;
        if (window > 0 && causal && i - window + 1 > 0) j_lo = i - window + 1;
        const int64_t nj = j_hi - j_lo + 1;
        for (int64_t j = j_lo; j <= j_hi; ++j) {
          float sc = dot_f32(q, row(ka, t0 + j) + kvh * hd_k, hd_k) * scale;
          if (softcap > 0.0f) sc = softcap * std::tanh(sc / softcap);
          scores[j - j_lo] = sc;
        }
        power::softmax(scores, nj);
        float* o = row(oa, t0 + i) + h * hd_v;
        std::fill(o, o + hd_v, 0.0f);
        for (int64_t j = j_lo; j <= j_hi; ++j) {
          const float* vr = row(va, t0 + j) + kvh * hd_v;
          const float p = scores[j - j_lo];
          for (int64_t d = 0; d < hd_v; ++d) o[d] += p * vr[d];
        }
      }
    }
  });
}

}  // namespace power
